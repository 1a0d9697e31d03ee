#!/usr/bin/env python
r"""Average the parameters of several fairseq checkpoints (the project's own version of fairseq's
scripts/average_checkpoints.py, which the pip packages do not ship).

    # the last 10 epoch checkpoints of a folder (checkpoint<N>.pt)
    python scripts/average_checkpoints.py --inputs checkpoints/wmt14_eva32 --num-epoch-checkpoints 10 \
        --output checkpoints/wmt14_eva32/checkpoint_avg10.pt
    # the last 10 update checkpoints (checkpoint_<epoch>_<update>.pt), up to update 300000
    python scripts/average_checkpoints.py --inputs DIR --num-update-checkpoints 10 --checkpoint-upper-bound 300000 --output OUT
    # explicit files
    python scripts/average_checkpoints.py --inputs a.pt b.pt c.pt --output avg.pt

Every checkpoint must be of the same model: the same architecture and EVA options (as far as the
checkpoints record them) and the same parameter names with the same shapes and dtypes, or nothing is
written. Floating-point parameters are summed and divided in float64 and stored in their own dtype;
other tensors (integer buffers) are taken from the first checkpoint (the newest, with --num-*), as is
everything else in the file (cfg, args, extra state). The output is written to a temporary file in the same
folder and renamed into place, so that a failure leaves no partial file and an existing output untouched.

Checkpoints are read with torch.load(weights_only=True) (fairseq_eva.fairseq_fixes.checkpoint_safety): a file that is
not a fairseq checkpoint is refused by name, and nothing else is ever unpickled.
"""

import argparse
import collections
import os
import re
import sys
import tempfile

import torch

from fairseq_eva.attention import registry
from fairseq_eva.fairseq_fixes import checkpoint_safety


class AverageError(RuntimeError):
    pass


def last_n_checkpoints(folder, n, update_based, upper_bound=None):
    """The paths of the newest n epoch (or update) checkpoints in folder, newest first."""
    pattern = re.compile(r"checkpoint_\d+_(\d+)\.pt$" if update_based else r"checkpoint(\d+)\.pt$")
    found = []
    for name in os.listdir(folder):
        m = pattern.fullmatch(name)
        if m:
            step = int(m.group(1))
            if upper_bound is None or step <= upper_bound:
                found.append((step, os.path.join(folder, name)))
    if len(found) < n:
        kind, name = ("update", "checkpoint_<E>_<U>.pt") if update_based else ("epoch", "checkpoint<N>.pt")
        bound = "" if upper_bound is None else f" up to {kind} {upper_bound}"
        use = "pass the checkpoint files themselves as --inputs"
        if found:
            use = f"pass --num-{kind}-checkpoints {len(found)} to average those, or {use}"
        raise AverageError(f"{folder} holds {len(found)} {kind} checkpoints ({name}){bound}, fewer than "
                           f"--num-{kind}-checkpoints {n}: {use}")
    return [path for _, path in sorted(found, reverse=True)[:n]]


def load(path):
    if not os.path.isfile(path):
        raise AverageError(f"no checkpoint {path}")
    try:
        return checkpoint_safety.load(path)
    except checkpoint_safety.CheckpointError as e:
        raise AverageError(str(e)) from e


def model_options(state):
    """The architecture, attention kinds and attention options a checkpoint records ({} for a bare state dict)."""
    cfg = state.get("cfg")
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if model is None:
        model = state.get("args")  # checkpoints of older fairseq versions
    if model is None:
        return {}
    items = vars(model) if isinstance(model, argparse.Namespace) else dict(model)
    options = {"architecture": items.get("arch", items.get("_name"))}
    prefixes = tuple(f"{mechanism}_" for mechanism in registry.choices())
    for name, value in sorted(items.items()):
        if name.startswith(prefixes) or name in ("encoder_attention", "decoder_attention"):
            options[name] = value
    return options


def check_same_model(options, path, ref_options, ref_path):
    differ = [k for k in sorted(set(options) | set(ref_options)) if options.get(k) != ref_options.get(k)]
    if differ:
        raise AverageError(
            f"{path} and {ref_path} are different models: "
            + ", ".join(f"{k} {options.get(k, 'unset')} vs {ref_options.get(k, 'unset')}" for k in differ)
        )


def average_checkpoints(paths):
    """Return the first checkpoint's state with its "model" replaced by the average over paths."""
    if not paths:
        raise AverageError("no checkpoints to average")
    base = None
    sums = collections.OrderedDict()
    for i, path in enumerate(paths):
        state = load(path)
        model = state["model"]
        if base is None:
            base = state
            ref = {k: (tuple(v.shape), v.dtype) for k, v in model.items()}
            ref_path, ref_options = path, model_options(state)
        else:
            check_same_model(model_options(state), path, ref_options, ref_path)
            if set(model) != set(ref):
                missing, extra = sorted(set(ref) - set(model)), sorted(set(model) - set(ref))
                raise AverageError(
                    f"{path} and {ref_path} differ in their parameters: "
                    f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                    f"extra {extra[:5]}{'...' if len(extra) > 5 else ''}"
                )
            for k, v in model.items():
                if (tuple(v.shape), v.dtype) != ref[k]:
                    raise AverageError(
                        f"{k}: {tuple(v.shape)} {v.dtype} in {path} but {ref[k][0]} {ref[k][1]} in {ref_path}"
                    )
        for k, v in model.items():
            if v.is_floating_point():
                sums[k] = v.to(torch.float64) if i == 0 else sums[k] + v.to(torch.float64)
    averaged = collections.OrderedDict()
    for k, v in base["model"].items():
        averaged[k] = (sums[k] / len(paths)).to(v.dtype) if v.is_floating_point() else v
    base["model"] = averaged
    return base


def atomic_save(state, output):
    """torch.save to a temporary file beside output, then rename it into place."""
    folder = os.path.dirname(os.path.abspath(output))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(output) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", required=True, nargs="+", metavar="PATH",
                        help="checkpoint files, or one folder with --num-epoch-checkpoints/--num-update-checkpoints")
    parser.add_argument("--output", required=True, metavar="FILE", help="where to write the average")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--num-epoch-checkpoints", type=int, metavar="N", help="average the last N checkpoint<epoch>.pt")
    group.add_argument("--num-update-checkpoints", type=int, metavar="N",
                       help="average the last N checkpoint_<epoch>_<update>.pt")
    parser.add_argument("--checkpoint-upper-bound", type=int, metavar="N",
                        help="ignore checkpoints after this epoch (or update, with --num-update-checkpoints)")
    args = parser.parse_args(argv)
    try:
        n = args.num_epoch_checkpoints or args.num_update_checkpoints
        if n is not None:
            if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
                raise AverageError("--num-*-checkpoints needs exactly one folder as --inputs")
            paths = last_n_checkpoints(args.inputs[0], n, args.num_update_checkpoints is not None,
                                       args.checkpoint_upper_bound)
        else:
            paths = args.inputs
        print(f"averaging {len(paths)} checkpoints: {' '.join(paths)}", flush=True)
        atomic_save(average_checkpoints(paths), args.output)
    except AverageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
