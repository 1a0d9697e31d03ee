"""The checks every attention mechanism of the registry passes, whatever it computes (each mechanism's test
file calls them, beside the checks of its own special cases and its float64 reference):

- padding: left and right padding give the real tokens the outputs they get alone, and pads get no weight;
- causal mechanisms: nothing after position n changes the output at n, and incremental decoding (token by
  token with a cache, beams reordered) gives the outputs of the parallel forward;
- gradients: torch.autograd.gradcheck at float64 on a tiny layer (inputs and every parameter).

The module is built through the registry in float64, in training mode with dropout 0 (eval mode where
`train=False`); torch.manual_seed is set before each forward, so a mechanism that draws random features
in training draws the same ones in the calls that are compared.
"""

import torch

from fairseq_eva.attention import registry

EMBED, HEADS = 16, 2


def build(name, causal=False, train=True, embed_dim=EMBED, num_heads=HEADS, seed=0, **options):
    torch.manual_seed(seed)
    module = registry.build(name, embed_dim, num_heads, causal=causal, **options).double()
    return module.train(train)


def run(module, x, key_padding_mask=None, seed=1):
    torch.manual_seed(seed)
    return module(x, key_padding_mask=key_padding_mask)


def check_padding(name, causal=False, N=12, pads=(3, 5), train=True, tol=1e-10, **options):
    """Each row alone, then left-padded and right-padded in one batch: the same outputs for its real tokens."""
    module = build(name, causal, train, **options)
    torch.manual_seed(2)
    rows = [torch.randn(1, N - p, EMBED, dtype=torch.float64) for p in pads]
    alone = [run(module, row) for row in rows]
    for side in ("left", "right") if not causal else ("right", "left"):
        x = torch.zeros(len(rows), N, EMBED, dtype=torch.float64)
        mask = torch.ones(len(rows), N, dtype=torch.bool)
        for b, (row, p) in enumerate(zip(rows, pads)):
            real = slice(p, N) if side == "left" else slice(0, N - p)
            x[b, real], mask[b, real] = row[0], False
        x = x.masked_fill(mask[..., None], 1e3)  # pads hold large values: any weight on them shows
        y = run(module, x, mask)
        for b, (p, expected) in enumerate(zip(pads, alone)):
            real = slice(p, N) if side == "left" else slice(0, N - p)
            torch.testing.assert_close(y[b, real], expected[0], rtol=tol, atol=tol,
                                       msg=lambda m: f"{name}, {side} padding, row {b}: {m}")


def check_no_future(name, N=12, train=True, **options):
    """Changing the tokens after n changes nothing at or before n."""
    module = build(name, True, train, **options)
    torch.manual_seed(3)
    x = torch.randn(2, N, EMBED, dtype=torch.float64)
    y = run(module, x)
    for n in range(N - 1):
        changed = x.clone()
        changed[:, n + 1 :] = torch.randn_like(changed[:, n + 1 :]) * 10
        torch.testing.assert_close(run(module, changed)[:, : n + 1], y[:, : n + 1], rtol=1e-12, atol=1e-12,
                                   msg=lambda m: f"{name}: the output at {n} depends on later tokens: {m}")


def check_incremental(name, N=11, **options):
    """Token by token with a cache (eval mode) equals the parallel forward; reorder_cache selects beams."""
    module = build(name, True, train=False, **options)
    torch.manual_seed(4)
    x = torch.randn(3, N, EMBED, dtype=torch.float64)
    full = module(x)
    cache = {}
    steps = [module(x[:, t : t + 1], cache=cache) for t in range(N // 2)]
    order = torch.tensor([2, 0, 0])
    module.reorder_cache(cache, order)
    steps = [s.index_select(0, order) for s in steps]
    x = x.index_select(0, order)
    steps += [module(x[:, t : t + 1], cache=cache) for t in range(N // 2, N)]
    torch.testing.assert_close(torch.cat(steps, 1), full.index_select(0, order), rtol=1e-10, atol=1e-10,
                               msg=lambda m: f"{name}: incremental decoding differs from the full forward: {m}")


def check_gradients(name, causal=False, N=6, padded=True, fast=True, **options):
    """torch.autograd.gradcheck of the layer (input and parameters) at float64, with a padded row. fast: gradcheck's
    fast mode, which compares the analytical and numerical Jacobians along random directions (one numerical
    derivative instead of one per input element; a wrong gradient of any input still shows, with probability 1)."""
    module = build(name, causal, True, embed_dim=8, num_heads=2, **options)
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    params = [module.get_parameter(n).detach().clone().requires_grad_() for n in names]
    torch.manual_seed(5)
    x = torch.randn(2, N, 8, dtype=torch.float64, requires_grad=True)
    mask = None
    if padded:
        mask = torch.zeros(2, N, dtype=torch.bool)
        mask[1, -2:] = True

    def layer(x, *values):
        torch.manual_seed(1)
        return torch.func.functional_call(module, dict(zip(names, values)), (x,), {"key_padding_mask": mask})

    assert torch.autograd.gradcheck(layer, (x, *params), eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=fast)


def expected_output(module, x, mask, attention):
    """The layer's output with `attention(q, k, v, real)` in place of its attend (pads zeroed, then out_proj)."""
    q, k, v = module.project(x)
    y = attention(q, k, v, ~mask).masked_fill(mask[:, None, :, None], 0)
    return module.out_proj(y.transpose(1, 2).reshape(x.shape))


def assert_real_close(y, expected, mask):
    torch.testing.assert_close(y[~mask], expected[~mask], rtol=1e-10, atol=1e-10)
