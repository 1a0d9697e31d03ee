"""Under fairseq-hydra-train the `model` keys of a legacy model are a free dict: a key that the model does not know
(a misspelled `eva_windw_size`) would be kept and ignored. It is stopped here, with the closest known key."""

import argparse
import difflib
import functools

from ..errors import AttentionOptionError


@functools.cache
def known_model_keys(model_class):
    """The `model.` keys that `model_class` reads: its command-line options (add_args, so a new option is
    known as soon as it is added) and whatever its architectures set (fairseq runs the architecture function
    on the config before the model is built)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    parser = argparse.ArgumentParser(add_help=False)
    model_class.add_args(parser)
    keys = {"_name", *vars(parser.parse_args([]))}
    for arch, registered in ARCH_MODEL_REGISTRY.items():
        if registered is model_class:
            defaults = argparse.Namespace()
            ARCH_CONFIG_REGISTRY[arch](defaults)
            keys.update(vars(defaults))
    return frozenset(keys)


def check_model_keys(cfg, model_class):
    """fairseq-hydra-train: raise AttentionOptionError naming each `model.` key that `model_class` does not know,
    with the closest known key."""
    known = known_model_keys(model_class)
    arch = cfg.get("_name")
    problems = []
    for key in sorted(set(cfg.keys()) - known):
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean model.{close[0]}?)" if close else ""
        problems.append(f"model.{key} is not an option of {arch or 'this model'}{hint}")
    if problems:
        raise AttentionOptionError("; ".join(problems))
