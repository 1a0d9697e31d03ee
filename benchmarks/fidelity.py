"""The paper's configs at their full size: parameters, and multiply-adds of one forward pass, beside the paper's
#Params and FLOPs columns.

Each config of configs/ is composed as fairseq-hydra-train composes it and its model built by the task, with a
dictionary of the paper's size (WMT14's joined BPE, 32,768; Wikitext-103's words, 267,744; the masked LM's GPT-2
BPE, 50,265 with <mask>), on the meta device: shapes without storage, so a 450M model costs nothing to build and
the count is the one a training run would print. Initialisation is skipped (RoBERTa's draws its numbers on the
CPU); it changes no count.

Multiply-adds (MACs) are of the transformer layers, one sequence at the config's length (tokens_per_sample): each
self-attention's projections and the layer's other Linear modules (the feed-forward) counted from the built
modules, and the attention itself from the registry's cost formula (fairseq_eva/attention/registry.py) at the
options the layer was built with. That is what the paper's masked-LM FLOPs column counts (softmax: 12 D^2 N L
= 173.9G for the projections and feed-forward of RoBERTa-base at N = 2048, plus 2 N^2 D L = 77.3G, 251G against
its 252G); embeddings and output layers are not counted. Translation has no fixed length: its rows have none.

    python -m benchmarks.fidelity            # writes benchmarks/results/fidelity/fidelity.json and meta.json
"""

import argparse
import datetime
import json
import os
import sys
import tempfile
from unittest import mock

import torch
from omegaconf import OmegaConf

from benchmarks import common, paper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(REPO, "configs")
OUT = os.path.join(REPO, "benchmarks", "results", "fidelity")

# family -> (dictionary length the model sees, dictionary files, symbols the task adds to the file's words):
# fairseq's Dictionary holds 4 special symbols; the masked-LM task adds <mask>
DICTIONARIES = {"wmt14": (32768, ("dict.en.txt", "dict.de.txt"), 4),
                "wikitext103": (267744, ("dict.txt",), 4),
                "mlm": (50265, ("dict.txt",), 5)}

# config (or config plus overrides) -> (the paper's #Params in M, its FLOPs in G or None, where they come from),
# from benchmarks/paper.json
PAPER = paper.sizes()


def rows():
    """Every config of configs/, and the extra rows of PAPER (a config with overrides), in order."""
    names = sorted(f[:-5] for f in os.listdir(CONFIGS) if f.endswith(".yaml"))
    extra = [key for key in PAPER if " " in key]
    return sorted(names + extra)


def compose(name, overrides):
    """The config as fairseq-hydra-train composes it: hydra composition, fairseq's defaults, a plain struct."""
    from fairseq.dataclass.initialize import add_defaults, hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    hydra_init(name)
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.1"):
        cfg = hydra_compose(config_name=name, overrides=overrides)
    add_defaults(cfg)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(cfg, True)
    return cfg


def dictionaries(folder, families):
    """A data folder per family holding only the dictionaries (all a model build reads), of the paper's sizes."""
    paths = {}
    for family in families:
        size, files, added = DICTIONARIES[family]
        path = os.path.join(folder, family)
        os.makedirs(path, exist_ok=True)
        words = "".join(f"w{i} 1\n" for i in range(size - added))
        for name in files:
            with open(os.path.join(path, name), "w") as f:
                f.write(words)
        paths[family] = path
    return paths


def built_attention(model):
    """{id(attention module): (mechanism, causal, options)} of each self-attention the plugin built, from the plan
    each carries (fairseq's own MultiheadAttention, the softmax rows' layer, carries none)."""
    return {id(m): (m.attention_plan.kind, m.attention_plan.causal, dict(m.attention_plan.options))
            for m in model.modules() if hasattr(m, "attention_plan")}


def build_on_meta(cfg):
    """(the task, the model on the meta device, {id(attention module): (mechanism, causal, options)})."""
    from fairseq import tasks

    import fairseq_eva.plugin  # noqa: F401  (registers the models)

    task = tasks.setup_task(cfg.task)
    no_init = lambda module: None  # noqa: E731  (RoBERTa's init copies through the CPU: meta tensors have no data)
    with torch.device("meta"), mock.patch("fairseq.models.roberta.model.init_bert_params", no_init), \
            mock.patch("fairseq_eva.models.roberta_eva.init_bert_params", no_init):
        model = task.build_model(cfg.model)
    return task, model, built_attention(model)


def transformer_layers(model):
    """The model's transformer layers: RoBERTa's encoder's, or the language model's decoder's. All of them: a
    LayerDrop list, iterated in training mode, leaves some out at random."""
    if hasattr(model, "encoder") and hasattr(model.encoder, "sentence_encoder"):
        layers = model.encoder.sentence_encoder.layers
    else:
        layers = model.decoder.layers
    return list(torch.nn.ModuleList.__iter__(layers))


PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def layer_macs_per_token(layer, N, built):
    """Multiply-adds a token of one layer: the self-attention's projections that exist (Reformer has no key
    projection), the mechanism's cost formula at length N, and every other Linear of the layer."""
    from fairseq_eva.attention import registry

    attention = layer.self_attn
    if id(attention) in built:
        kind, causal, settings = built[id(attention)]
    else:  # fairseq's MultiheadAttention: softmax, causal in a decoder layer
        kind, causal, settings = "softmax", hasattr(layer, "encoder_attn"), {}
    projections = sum(m.in_features * m.out_features for name in PROJECTIONS
                      if isinstance(m := getattr(attention, name, None), torch.nn.Linear))
    mechanism = registry.get(kind)
    option_names = {o.name for o in mechanism.options}
    cost = mechanism.macs_per_token(N, attention.embed_dim, attention.num_heads, causal=causal,
                                    **{k: v for k, v in settings.items() if k in option_names})
    others = sum(m.in_features * m.out_features for name, m in layer.named_modules()
                 if isinstance(m, torch.nn.Linear) and not name.startswith("self_attn"))
    return projections + cost + others


def count(name, overrides, data):
    """One row: parameters of the full-size model, and the layers' multiply-adds of one sequence."""
    family = name.split("_")[0]
    cfg = compose(name, [f"task.data={data[family]}", *overrides])
    task, model, built = build_on_meta(cfg)
    size = DICTIONARIES[family][0]
    if len(task.source_dictionary) != size:
        raise RuntimeError(f"{name}: the dictionary holds {len(task.source_dictionary)} symbols, not {size}")
    row = {"config": " ".join([name, *overrides]), "dictionary": size,
           "params": sum(p.numel() for p in model.parameters())}
    if family != "wmt14":
        N = cfg.task.tokens_per_sample
        row["length"] = N
        row["layers"] = len(transformer_layers(model))
        row["macs"] = N * sum(layer_macs_per_token(layer, N, built) for layer in transformer_layers(model))
    return row


def measure(names=None):
    """The rows of `names` (default: every row), each beside the paper's numbers."""
    results, names = [], names or rows()
    with tempfile.TemporaryDirectory() as folder:
        data = dictionaries(folder, {key.split("_")[0] for key in names})
        for key in names:
            name, *overrides = key.split(" ")
            row = count(name, overrides, data)
            params, flops, source = PAPER.get(key, (None, None, None))
            row.update(paper_params_m=params, paper_flops_g=flops, paper_source=source)
            results.append(row)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=OUT, help="the record's folder (fidelity.json, meta.json)")
    parser.add_argument("--rows", default="", help="comma-separated rows (default: every config)")
    args = parser.parse_args(argv)
    results = measure([r for r in args.rows.split(",") if r] or None)
    for r in results:
        macs = f"{r['macs'] / 1e9:.1f}G MACs" if "macs" in r else ""
        print(f"{r['config']:50s} {r['params'] / 1e6:9.3f}M {macs}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fidelity.json"), "w") as f:
        json.dump({"results": results}, f, indent=1)
    meta = {"command": "python -m benchmarks.fidelity" + (f" --rows {args.rows}" if args.rows else ""),
            "commit": common.commit(), "date": datetime.date.today().isoformat(),
            "device": "on torch's meta device (shapes only, on a CPU)"}
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
