"""EVA's approximation inside a trained causal language model: per layer, the relative error of its EVA output,
and of its local attention alone, against exact softmax attention over the same queries, keys and values.

  python -m benchmarks.experiments.approximation CHECKPOINT DATA SUBSET BLOCKS LENGTH OUTPUT
"""

import json
import sys

import torch


def reference_outputs(attn, x):
    """A causal EVA layer's attention outputs (B x H x N x head_dim, before the output projection) on its
    input x (B x N x embed_dim), with the same queries, keys and values: {"eva": the layer's own, "softmax":
    exact softmax attention over all earlier keys, "local": softmax over the keys of E^n only}. The relative
    position bias is added inside E^n, as EVA does; no overlap."""
    N = x.size(1)
    w = attn.window_size
    q, k, v = (attn.split_heads(proj(x)) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    pos = torch.arange(N)
    in_e = ((pos // w)[:, None] == (pos // w)[None, :]) & (pos[None, :] <= pos[:, None])
    causal = pos[None, :] <= pos[:, None]
    logits = (q @ k.transpose(-1, -2)) * attn.scale
    if attn.rpe is not None:
        logits = logits + (attn.rpe(pos[None, :] - pos[:, None]).unsqueeze(0) + attn.chunk_logit_offset) * in_e
    low = torch.finfo(logits.dtype).min
    return {"eva": attn.attention(q, k, v), "softmax": logits.masked_fill(~causal, low).softmax(-1) @ v,
            "local": logits.masked_fill(~in_e, low).softmax(-1) @ v}


def layer_inputs(model, src):
    """A language model's output logits on src (B x N) and each decoder layer's self-attention input
    (B x N x embed_dim)."""
    inputs = []

    def keep_input(module, args, kwargs):  # fairseq passes the query by keyword, time first
        inputs.append((args[0] if args else kwargs["query"]).transpose(0, 1))

    hooks = [layer.self_attn.register_forward_pre_hook(keep_input, with_kwargs=True) for layer in model.decoder.layers]
    try:
        logits, _ = model(src)
    finally:
        for hook in hooks:
            hook.remove()
    return logits, inputs



def approximation_errors(checkpoint, data, subset, num_blocks, length):
    """Per layer of a causal EVA language model, on the first `num_blocks` blocks of `length` tokens of
    `subset`: {"eva": error, "local": error} with error = ||y - y_softmax||_F / ||y_softmax||_F over all heads,
    queries and blocks (the approximation benchmark's measure)."""
    from fairseq import checkpoint_utils

    import fairseq_eva.plugin  # noqa: F401  (registers the models)

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": data})
    model = models[0].eval()
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    blocks = [dataset[i]["source"] for i in range(len(dataset)) if dataset[i]["source"].numel() == length][:num_blocks]
    if not blocks:
        sys.exit(f"error: {subset} has no block of {length} tokens")
    squares = None
    with torch.no_grad():
        for src in blocks:
            _, inputs = layer_inputs(model, src[None])
            layers = [layer.self_attn for layer in model.decoder.layers]
            outputs = [reference_outputs(attn, x) for attn, x in zip(layers, inputs)]
            block = [{name: float((y[name] - y["softmax"]).pow(2).sum()) for name in ("eva", "local")}
                     | {"softmax": float(y["softmax"].pow(2).sum())} for y in outputs]
            squares = block if squares is None else [{k: s[k] + b[k] for k in s} for s, b in zip(squares, block)]
    return {"blocks": len(blocks), "length": length, "subset": subset,
            "layers": [{name: (s[name] / s["softmax"]) ** 0.5 for name in ("eva", "local")} for s in squares]}


def main(argv=None):
    """Write the errors (approximation_errors) of CHECKPOINT on DATA's SUBSET to OUTPUT, as JSON."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 6:
        sys.exit("usage: python -m benchmarks.experiments.approximation CHECKPOINT DATA SUBSET BLOCKS LENGTH OUTPUT")
    checkpoint, data, subset, blocks, length, output = argv
    with open(output, "w") as f:
        json.dump(approximation_errors(checkpoint, data, subset, int(blocks), int(length)), f)


if __name__ == "__main__":
    main()
