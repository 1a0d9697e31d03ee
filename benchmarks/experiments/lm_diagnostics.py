"""Inside a trained causal EVA language model: each layer's attention statistics against exact softmax, and
the loss by position in the block. scripts/lm_diagnostics.py is its command line."""


import torch

from benchmarks.experiments.approximation import layer_inputs, reference_outputs  # noqa: F401  (the tests' names)


def layer_stats(attn, x):
    """Statistics of one causal EVA layer on its input x (B x N x embed_dim); a dict of floats."""
    B, N, _ = x.shape
    w, s = attn.window_size, attn.chunk_size
    q, k, v = (attn.split_heads(proj(x)) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    pos = torch.arange(N)
    block = pos // w
    in_e = (block[:, None] == block[None, :]) & (pos[None, :] <= pos[:, None])  # E^n (no overlap)
    before_e = pos[None, :] < block[:, None] * w
    logits = (q @ k.transpose(-1, -2)) * attn.scale  # B x H x N x N
    # a chunk logit offset b is carried by the bias as -b (EVAAttention): here it goes back to the chunk logits, so
    # that the bias inside E^n is the one the exact softmax would have
    offset = attn.chunk_logit_offset
    bias = attn.rpe(pos[None, :] - pos[:, None]).unsqueeze(0) + offset if attn.rpe is not None else torch.zeros(())
    local = logits + bias
    low = torch.finfo(x.dtype).min
    lse_local = local.masked_fill(~in_e, low).logsumexp(-1)
    lse_far = logits.masked_fill(~before_e, low).logsumexp(-1)
    out = {
        "|q|": q.norm(dim=-1).mean(), "|k|": k.norm(dim=-1).mean(),
        "local logit std": local.masked_select(in_e.expand_as(local)).std(),
        "far logit std": logits.masked_select(before_e.expand_as(logits)).std(),
    }
    later = block >= 1  # queries that have keys before E^n
    first = later & (pos % w < 8)
    out["exact mass outside E"] = torch.sigmoid(lse_far - lse_local)[..., later].mean()
    out["exact mass outside E (first 8)"] = torch.sigmoid(lse_far - lse_local)[..., first].mean()
    if attn.chunks is not None and s:
        k_summary, _ = attn.chunks.uniform(q, k, v, s)
        chunk_logits = (q @ k_summary.transpose(-1, -2)) * attn.scale + offset  # B x H x N x C
        visible = ((torch.arange(k_summary.size(2)) + 1) * s)[None, :] <= block[:, None] * w
        lse_chunks = chunk_logits.masked_fill(~visible, low).logsumexp(-1)
        out.update({
            "|k~|": k_summary.norm(dim=-1).mean(),
            "chunk logit std": chunk_logits.masked_select(visible.expand_as(chunk_logits)).std(),
            "EVA mass on chunks": torch.sigmoid(lse_chunks - lse_local)[..., later].mean(),
            "EVA mass on chunks (first 8)": torch.sigmoid(lse_chunks - lse_local)[..., first].mean(),
            "lse far keys - lse chunks": (lse_far - lse_chunks)[..., later].mean(),
        })
    y = reference_outputs(attn, x)
    for name in ("eva", "local"):
        error = (y[name] - y["softmax"]).norm(dim=-1) / y["softmax"].norm(dim=-1)
        out["rel. error vs softmax" if name == "eva" else "local-only rel. error vs softmax"] = error[..., later].mean()
    return {name: float(value) for name, value in out.items()}


def loss_by_position(nll):
    """{"a-b": mean loss over positions a..b} of a B x N loss, positions in doubling ranges 0, 1, 2-3, 4-7, ...:
    a loss still falling in the last ranges means the model uses context that far back."""
    N = nll.size(1)
    edges = [0] + [2**i for i in range(N.bit_length())] + [N]
    return {f"{a}-{min(b, N) - 1}": float(nll[:, a:b].mean()) for a, b in zip(edges, edges[1:]) if a < b and a < N}


def print_stats(label, stats):
    print(f"{label}: " + ", ".join(f"{name} {value:.3f}" for name, value in stats.items()))


@torch.no_grad()
def checkpoint_report(path, data, subset, num_blocks, window):
    from fairseq import checkpoint_utils

    import fairseq_eva.plugin  # noqa: F401  (registers the models, loads checkpoints weights-only)
    from fairseq_eva.attention import EVAAttention

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    model = models[0].eval()
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    samples = [dataset[i] for i in range(min(num_blocks, len(dataset)))]
    samples = [s for s in samples if s["source"].numel() == samples[0]["source"].numel()]
    src, tgt = torch.stack([s["source"] for s in samples]), torch.stack([s["target"] for s in samples])
    logits, inputs = layer_inputs(model, src)
    layers = [layer.self_attn for layer in model.decoder.layers]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2).float(), tgt, reduction="none")  # B x N
    N = nll.size(1)
    eva = [m for m in layers if isinstance(m, EVAAttention)]
    w = eva[0].window_size if eva else window  # softmax models: positions split as EVA's windows would be
    pos = torch.arange(N)
    print(f"== {path}: {len(samples)} blocks of {N} tokens of {subset}; loss (nats) {nll.mean():.3f}")
    parts = {"first window (positions 0..w-1)": pos < w, "later windows": pos >= w,
             "later windows, first 8 positions": (pos >= w) & (pos % w < 8),
             "later windows, positions 8..w/2-1": (pos >= w) & (pos % w >= 8) & (pos % w < w // 2),
             "later windows, positions w/2..w-1": (pos >= w) & (pos % w >= w // 2)}
    print(f"   window w = {w}: " + ", ".join(f"{name} {nll[:, mask].mean():.3f}" for name, mask in parts.items()))
    print("   loss by position: " + ", ".join(f"{span} {loss:.3f}" for span, loss in loss_by_position(nll).items()))
    for i, (attn, x) in enumerate(zip(layers, inputs)):
        if isinstance(attn, EVAAttention) and attn.causal and not attn.overlap:
            print_stats(f"   layer {i}", layer_stats(attn, x))
    if any(attn.chunk_size for attn in eva):  # the same model as local attention: what do its chunks carry?
        for attn in eva:
            attn.chunk_size = 0
        logits, _ = model(src)
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2).float(), tgt, reduction="none")
        print(f"   without its chunks (chunk size 0 in every layer): loss {nll.mean():.3f}, later windows "
              f"{nll[:, pos >= w].mean():.3f}; by position: "
              + ", ".join(f"{span} {loss:.3f}" for span, loss in loss_by_position(nll).items()))
