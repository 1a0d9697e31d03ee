"""The Triton kernel against the reference kernel in float64: on the CPU under Triton's interpreter (tests/conftest.py
sets TRITON_INTERPRET=1 where there is no GPU), tiny shapes, float32 inside the kernel."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from eva_helpers import fixed_noise, inputs, make

from fairseq_eva.attention.kernels import KERNELS, choose
from fairseq_eva.attention.kernels.reference import reference_attention, visible_keys
from fairseq_eva.attention.layout import BlockLayout
from fairseq_eva.attention.reference import reference_eva

triton = pytest.importorskip("triton")
from fairseq_eva.attention.kernels.triton import op  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
B, H, N, D, C = 2, 2, 16, 16, 5
LAYOUTS = {
    "bidirectional": BlockLayout.bidirectional(4, False),
    "bidirectional_overlap": BlockLayout.bidirectional(4, True),
    "causal": BlockLayout.causal_blocks(4, False, 2),
    "causal_overlap": BlockLayout.causal_blocks(4, True, 2),
}
NAMES = ("q", "k", "v", "k_summary", "beta", "rpe")


def make_inputs(layout, *, batch=B, heads=H, length=N, chunks=C, rpe=True, seed=0):
    """float64 leaves: q, k, v, k_summary, beta (None without chunks), the RPE table (or None)."""
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()

    qkv = [leaf(batch, heads, length, D) for _ in range(3)]
    summaries = [leaf(batch, heads, chunks, D) for _ in range(2)] if chunks else [None, None]
    table = leaf(heads, layout.num_offsets) if rpe else None
    return dict(zip(NAMES, qkv + summaries + [table]))


def run_triton(layout, inputs, *, chunk_ok=None, lengths=None, dropout=0.0, seed=0, tiles=(4, 4), dtype=torch.float32):
    """The kernel on `inputs` cast to dtype (leaves of their own): (y, lse, leaves)."""
    leaves = {n: None if t is None else t.detach().to(DEVICE, dtype).requires_grad_() for n, t in inputs.items()}
    y, lse = KERNELS["triton"].run(
        layout=layout, **leaves, chunk_ok=None if chunk_ok is None else chunk_ok.to(DEVICE),
        lengths=None if lengths is None else lengths.to(DEVICE), dropout=dropout, seed=seed, scale=D**-0.5,
        block_m=tiles[0], block_n=tiles[1])
    return y, lse, leaves


def gradients(y, leaves, grad):
    present = [n for n, t in leaves.items() if t is not None]
    got = torch.autograd.grad(y, [leaves[n] for n in present], grad.to(y))
    return {n: g.double().cpu() for n, g in zip(present, got)}


def check(got, expected, tol=1e-5, what="y"):
    torch.testing.assert_close(got.double().cpu(), expected.double(), rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


def compare(layout, inputs, chunk_ok=None, lengths=None, tiles=(4, 4)):
    """Output, lse (of queries that see a key) and every gradient against the reference kernel."""
    y0, lse0 = reference_attention(layout=layout, **inputs, chunk_ok=chunk_ok, lengths=lengths, dropout=0.0, seed=0,
                                   scale=D**-0.5)
    y, lse, leaves = run_triton(layout, inputs, chunk_ok=chunk_ok, lengths=lengths, tiles=tiles)
    check(y, y0)
    seen = lse0.isfinite()
    check(lse[seen], lse0[seen], what="lse")
    assert lse.isfinite().all()
    grad = torch.randn_like(y0)
    expected = dict(zip([n for n, t in inputs.items() if t is not None],
                        torch.autograd.grad(y0, [t for t in inputs.values() if t is not None], grad)))
    got = gradients(y, leaves, grad)
    assert got.keys() == expected.keys()
    for name in expected:
        check(got[name], expected[name], what=f"d {name}")
    return y, got


@pytest.mark.parametrize("name", LAYOUTS)
def test_padding_rpe_and_hidden_summary_match_the_reference(name):
    """Right padding (lengths < N), a summary chunk_ok hides, the RPE table: output, lse and all six gradients."""
    layout = LAYOUTS[name]
    chunk_ok = torch.ones(B, C, dtype=torch.bool)
    chunk_ok[0, 1] = False
    compare(layout, make_inputs(layout), chunk_ok=chunk_ok, lengths=torch.tensor([N, N - 5]))


@pytest.mark.parametrize("name", ["bidirectional_overlap", "causal_overlap"])
def test_without_summaries_or_rpe(name):
    """C = 0 (no summary tensors), no RPE, no lengths: the local part alone."""
    layout = LAYOUTS[name]
    compare(layout, make_inputs(layout, chunks=0, rpe=False))


@pytest.mark.parametrize("name", ["bidirectional", "causal_overlap"])
def test_a_row_without_real_tokens_is_zero_and_finite(name):
    """lengths 0 and every summary of the row hidden: zeros, a finite lse, zero gradients, nothing NaN."""
    layout = LAYOUTS[name]
    chunk_ok = torch.ones(B, C, dtype=torch.bool)
    chunk_ok[1] = False
    y, grads = compare(layout, make_inputs(layout), chunk_ok=chunk_ok, lengths=torch.tensor([N - 3, 0]))
    assert (y[1] == 0).all()
    for name in ("q", "k", "v"):
        assert (grads[name][1] == 0).all() and grads[name].isfinite().all()


@pytest.mark.parametrize("layout", [BlockLayout.bidirectional(8, True), BlockLayout.causal_blocks(8, False, 2)],
                         ids=["bidirectional_overlap_w8", "causal_w8"])
def test_a_query_tile_smaller_than_the_window(layout):
    """w = 8 cut into query tiles of 4 and key tiles of 2: several tiles a block."""
    compare(layout, make_inputs(layout), lengths=torch.tensor([N, 13]), tiles=(4, 2))


def masked_reference(layout, inputs, keep, dropout, chunk_ok=None, lengths=None):
    """y of the contract with the dropout mask `keep` (B x H x N x (width + C): local column j, then width + c),
    query by query in float64, differentiable by autograd: what the kernel must compute with that mask."""
    q, k, v, k_summary, beta, rpe = (inputs[n] for n in NAMES)
    batch, heads, length, _ = q.shape
    chunks = 0 if k_summary is None else k_summary.size(2)
    first_offset = layout.offset - layout.window + 1
    rows = []
    for b in range(batch):
        real = length if lengths is None else int(lengths[b])
        ys = []
        for n in range(length):
            local, seen = visible_keys(layout, n, real, chunks, None if chunk_ok is None else chunk_ok[b])
            if not local and not seen:
                ys.append(q.new_zeros(heads, D))
                continue
            logits = D**-0.5 * torch.cat([k[b][:, local] @ q[b, :, n, :, None], k_summary[b][:, seen] @ q[b, :, n, :, None]], 1)
            bias = torch.cat([rpe[:, [m - n - first_offset for m in local]], rpe.new_zeros(heads, len(seen))], 1)
            logits = logits.squeeze(-1) + bias
            first_key = n // layout.window * layout.window + layout.offset
            columns = [m - first_key for m in local] + [layout.width + c for c in seen]
            weights = torch.softmax(logits, -1) * keep[b, :, n, columns] / (1 - dropout)
            ys.append((weights[..., None] * torch.cat([v[b][:, local], beta[b][:, seen]], 1)).sum(1))
        rows.append(torch.stack(ys, 1))
    return torch.stack(rows)


def kernel_mask(layout, dropout, seed, batch=B, heads=H, length=N, chunks=C):
    """The kernel's keep mask, B x H x N x (width + C)."""
    keep = op.dropout_keep_mask(batch * heads * length, layout.width + chunks, dropout, seed, DEVICE)
    return keep.view(batch, heads, length, -1).cpu()


def test_masked_reference_without_dropout_is_the_reference():
    """The test's own replay (masked_reference) with nothing dropped equals the reference kernel."""
    layout = LAYOUTS["causal_overlap"]
    inputs, lengths = make_inputs(layout), torch.tensor([N, 9])
    keep = torch.ones(B, H, N, layout.width + C, dtype=torch.bool)
    y0, _ = reference_attention(layout=layout, **inputs, chunk_ok=None, lengths=lengths, dropout=0.0, seed=0, scale=D**-0.5)
    check(masked_reference(layout, inputs, keep, 0.0, lengths=lengths), y0, 1e-12)


@pytest.mark.parametrize("name", ["bidirectional_overlap", "causal_overlap"])
def test_dropout_forward_and_backward_replay_the_mask(name):
    """With dropout the output and every gradient are those of the contract with the kernel's own mask: the forward
    and all four backward programs draw the same mask, and kept weights are scaled by 1 / (1 - p)."""
    layout, p, seed = LAYOUTS[name], 0.3, 1234
    inputs, lengths = make_inputs(layout), torch.tensor([N, N - 5])
    chunk_ok = torch.ones(B, C, dtype=torch.bool)
    chunk_ok[1, 0] = False
    keep = kernel_mask(layout, p, seed)
    assert 0 < (~keep).sum() < keep.numel()
    y0 = masked_reference(layout, inputs, keep, p, chunk_ok, lengths)
    y, _, leaves = run_triton(layout, inputs, chunk_ok=chunk_ok, lengths=lengths, dropout=p, seed=seed)
    check(y, y0)
    grad = torch.randn_like(y0)
    expected = dict(zip(NAMES, torch.autograd.grad(y0, list(inputs.values()), grad)))
    got = gradients(y, leaves, grad)
    for name in NAMES:
        check(got[name], expected[name], what=f"d {name}")


@pytest.mark.slow
def test_dropout_same_seed_same_output_and_tiling_does_not_change_it():
    """Key tiles of 8 draw Philox once per four keys, tiles of 2 once per key: the same mask, the same output."""
    layout, p = BlockLayout.bidirectional(8, True), 0.3
    inputs, lengths = make_inputs(layout), torch.tensor([N, 12])
    y1, _, leaves1 = run_triton(layout, inputs, lengths=lengths, dropout=p, seed=7, tiles=(8, 8))
    y2, _, _ = run_triton(layout, inputs, lengths=lengths, dropout=p, seed=torch.tensor([7], device=DEVICE), tiles=(8, 8))
    assert torch.equal(y1, y2)
    y3, _, _ = run_triton(layout, inputs, lengths=lengths, dropout=p, seed=8, tiles=(8, 8))
    assert not torch.allclose(y1, y3)
    y4, _, leaves4 = run_triton(layout, inputs, lengths=lengths, dropout=p, seed=7, tiles=(4, 2))  # a draw a weight
    check(y4, y1.detach())
    grad = torch.randn_like(y1)
    got1, got4 = gradients(y1, leaves1, grad), gradients(y4, leaves4, grad)
    for name in NAMES:
        check(got4[name], got1[name], what=f"d {name}")


@pytest.mark.slow
def test_dropout_is_unbiased():
    """Over 64 rows with the same inputs (64 independent masks) the mean output is the output without dropout;
    with v = beta = 1 in the first feature, y_0 = sum of the kept, rescaled weights, whose mean is 1."""
    layout, p, copies = LAYOUTS["bidirectional_overlap"], 0.5, 64
    one = make_inputs(layout, batch=1, heads=1, length=8, chunks=2)
    with torch.no_grad():
        one["v"][..., 0] = 1
        one["beta"][..., 0] = 1
    inputs = {n: t.detach().expand(copies, *t.shape[1:]).contiguous() if n != "rpe" else t.detach() for n, t in one.items()}
    keep = op.dropout_keep_mask(16, 512, p, 99, DEVICE).float().cpu()
    assert abs(keep.mean().item() - (1 - p)) < 0.03  # 5 standard deviations of 8192 draws
    words = keep.view(16, 128, 4)  # the four words of one Philox draw
    assert ((words.mean((0, 1)) - (1 - p)).abs() < 0.06).all()  # 5 sd of 2048 draws each
    for a, b in ((0, 1), (0, 3), (1, 2)):  # words of one draw keep independently: both kept at rate (1 - p)^2
        assert abs((words[..., a] * words[..., b]).mean().item() - (1 - p) ** 2) < 0.05
    y0, _ = reference_attention(layout=layout, **one, chunk_ok=None, lengths=None, dropout=0.0, seed=0, scale=D**-0.5)
    y, _, _ = run_triton(layout, inputs, dropout=p, seed=99)
    y = y.detach().double().cpu()
    error = (y.mean(0) - y0[0]).abs()
    assert (error <= 5 * y.std(0) / copies**0.5 + 1e-6).all()
    kept_sum = y[..., 0].flatten()  # 64 x 8 independent draws
    assert abs(kept_sum.mean().item() - 1) < 5 * kept_sum.std().item() / kept_sum.numel() ** 0.5


def test_registered_with_what_it_accepts(monkeypatch):
    q = torch.zeros(1, 1, 4, D, device=DEVICE)
    assert choose("triton", q, needs_grad=True, dropout=0.1, bias_grad=True) is KERNELS["triton"]
    with pytest.raises(ValueError, match="not float64"):
        choose("triton", q.double(), needs_grad=True, dropout=0.1, bias_grad=True)
    monkeypatch.setitem(__import__("sys").modules, "triton", None)  # as if Triton were not installed
    assert KERNELS["triton"].unavailable.__wrapped__() == "Triton is not installed"


def test_bad_rpe_table_is_refused():
    layout = LAYOUTS["bidirectional"]
    inputs = make_inputs(layout)
    inputs["rpe"] = inputs["rpe"][:, :-1]
    with pytest.raises(ValueError, match="RPE table must be heads x 7"):
        run_triton(layout, inputs)


# Triton 3.9's interpreter multiplies bfloat16 matrices wrongly (tl.dot of a bfloat16 identity gives 2.6e8 on the
# diagonal), so bfloat16 is checked on a GPU only
BF16 = pytest.mark.skipif(DEVICE != "cuda", reason="the Triton interpreter's tl.dot is wrong for bfloat16")


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 1e-2), pytest.param(torch.bfloat16, 6e-2, marks=BF16)],
                         ids=["float16", "bfloat16"])
def test_half_inputs_with_float32_summaries(dtype, tol):
    """float16 / bfloat16 q, k, v with float32 summaries (as autocast leaves them): float32 softmax, gradients in
    each input's dtype, close to the float64 reference at the input's precision."""
    layout = LAYOUTS["causal_overlap"]
    inputs = make_inputs(layout)
    y0, _ = reference_attention(layout=layout, **inputs, chunk_ok=None, lengths=None, dropout=0.0, seed=0, scale=D**-0.5)
    leaves = {n: t.detach().to(DEVICE, dtype if n in ("q", "k", "v") else torch.float32).requires_grad_()
              for n, t in inputs.items()}
    y, lse = KERNELS["triton"].run(layout=layout, **leaves, chunk_ok=None, lengths=None, dropout=0.0, seed=0, scale=D**-0.5)
    assert y.dtype == dtype and lse.dtype == torch.float32
    check(y, y0, tol)
    grad = torch.randn_like(y0)
    expected = torch.autograd.grad(y0, list(inputs.values()), grad)
    got = torch.autograd.grad(y, list(leaves.values()), grad.to(DEVICE, dtype))
    for name, g, e, leaf in zip(NAMES, got, expected, leaves.values()):
        assert g.dtype == leaf.dtype, name
        check(g, e, 3 * tol, what=f"d {name}")


def test_custom_op_fake_and_autograd_registration():
    """torch.library.opcheck of the forward and backward ops: the schema, the fakes (what torch.compile traces with:
    shapes, dtypes and strides) and the autograd registration."""
    layout = LAYOUTS["causal_overlap"]
    inputs = make_inputs(layout, batch=1, heads=2, length=8, chunks=2)
    # strided as the layer passes them: q, k, v, the summaries views of B x L x H x d memory; the table a transpose
    x = {n: t.detach().float().to(DEVICE).transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
         for n, t in inputs.items() if n != "rpe"}
    x["rpe"] = inputs["rpe"].detach().float().to(DEVICE).t().contiguous().t().requires_grad_()
    lengths = torch.tensor([7], dtype=torch.int32, device=DEVICE)
    seed = torch.tensor([5], device=DEVICE)
    args = (x["q"], x["k"], x["v"], x["k_summary"], x["beta"], None, x["rpe"], lengths, seed, layout.window, layout.offset,
            layout.width, layout.causal, layout.overlap, layout.chunks_per_block, 0.2, D**-0.5, 4, 4)
    torch.library.opcheck(op.attention_op, args)
    y, lse = op.attention_op(*args)
    plain = [t.detach() if isinstance(t, torch.Tensor) else t for t in args]
    backward_args = (torch.randn_like(y), *plain[:9], y.detach(), lse, *plain[9:-2], True, 4, 4)
    torch.library.opcheck(op.attention_backward_op, backward_args, test_utils=("test_schema", "test_faketensor"))  # no autograd


def test_torch_compile_traces_it_in_one_graph():
    """A model using the kernel compiles without graph breaks (fullgraph) and gives eager's loss and gradients."""
    layout = LAYOUTS["causal_overlap"]
    inputs = {n: t.detach().float().to(DEVICE).requires_grad_()
              for n, t in make_inputs(layout, batch=1, heads=2, length=8, chunks=2).items()}

    def loss(q, k, v, k_summary, beta, rpe):
        y, _ = KERNELS["triton"].run(layout=layout, q=q, k=k, v=v, k_summary=k_summary, beta=beta, chunk_ok=None, rpe=rpe,
                                     lengths=None, dropout=0.2, seed=3, scale=D**-0.5)
        return (y * y).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    eager, traced = loss(**inputs), compiled(**inputs)
    torch.testing.assert_close(traced, eager)
    for a, b in zip(torch.autograd.grad(traced, list(inputs.values())), torch.autograd.grad(eager, list(inputs.values()))):
        torch.testing.assert_close(a, b)


def test_the_seed_is_read_on_the_device():
    """The seed is a tensor the programs load: the op's forward and backward read nothing back to the host (a
    seed passed as an int cost a synchronisation a call, and as an integer argument a recompile every 16 seeds)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func.__name__)
            return func(*args, **(kwargs or {}))

    layout, ops = LAYOUTS["causal_overlap"], []
    x = {n: t.detach().float().to(DEVICE) for n, t in make_inputs(layout, batch=1, length=8, chunks=2).items()}
    shape = (layout.window, layout.offset, layout.width, layout.causal, layout.overlap, layout.chunks_per_block)
    lengths, seed = torch.tensor([7], dtype=torch.int32, device=DEVICE), torch.tensor([11], device=DEVICE)
    inputs = (x["q"], x["k"], x["v"], x["k_summary"], x["beta"], None, x["rpe"], lengths, seed)
    with Record():
        y, lse = op.forward(*inputs, *shape, 0.3, D**-0.5)
        op.backward(y, *inputs, y, lse, *shape, 0.3, D**-0.5, True)
    assert "sum.dim_IntList" in ops  # the recorder sees the op's torch calls
    assert not {"_local_scalar_dense", "item", "nonzero", "any"} & {name.split(".")[0] for name in ops}


def test_autotuned_tiles_fit_the_window():
    """The tuned programs try only query tiles no taller than the window (at least the smallest tl.dot's 16 rows);
    a window of 256 tries them all."""
    from fairseq_eva.attention.kernels.triton.backward import eva_backward_dkdv_tuned, eva_backward_dq_tuned
    from fairseq_eva.attention.kernels.triton.forward import eva_forward_tuned
    from fairseq_eva.attention.kernels.triton.tiles import fitting_tiles

    for program in (eva_forward_tuned, eva_backward_dq_tuned, eva_backward_dkdv_tuned):
        assert program.early_config_prune is fitting_tiles
        assert fitting_tiles(program.configs, {}, WINDOW=256) == program.configs
        for window in (4, 8, 16, 64):
            tried = fitting_tiles(program.configs, {}, WINDOW=window)
            assert tried and all(c.kwargs["BLOCK_M"] <= max(16, window) for c in tried), window
        assert {"d", "WINDOW", "CAUSAL"} <= set(program.keys)


@pytest.mark.slow
def test_programs_compile_for_sm90_and_sm80():
    """The interpreter accepts more than the GPU compiler (it read a plain global float): compile every program
    for sm_90 and sm_80 with Triton's own ptxas, no GPU needed (tests/triton_compile_check.py)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).parents[1])
    for arch in ("90", "80"):
        run = subprocess.run([sys.executable, str(Path(__file__).with_name("triton_compile_check.py")), arch], env=env,
                             capture_output=True, text=True, timeout=1800)
        assert run.returncode == 0, run.stderr[-3000:]
        # dtypes x (the forward's, dQ's and dK dV's tuned configs, 3 each for windows 256 and 128, 1 each for
        # window 16, and 6 other programs a layout: 2 attention backward, 4 summaries)
        assert run.stdout.count(f"sm_{arch} ") == 3 * (9 + 3 + 9 + 3 * 6)


@pytest.mark.parametrize(
    "options",
    [dict(window_size=4, num_chunks=3, overlap=True), dict(causal=True, window_size=4, chunk_size=2, overlap=True),
     dict(window_size=4, num_chunks=3, overlap=True, proposal_mean="average")],
    ids=["bidirectional", "causal", "bidirectional_average"],
)
@pytest.mark.parametrize("Lmax", [13, 16], ids=["padded_to_the_window", "whole_windows"])
def test_the_layer_on_triton_matches_the_definition(options, Lmax, monkeypatch):
    """Through the public option, EVAAttention(kernel="triton"): a float32 layer in training with a trainable RPE,
    a left-padded batch (bidirectional), against the per-query layer definition in float64: the output and the
    gradients of the input and of every parameter (projections, sigma, the RPE table). In whole windows q, k, v reach
    the kernel as views of one q/k/v product, with gaps between rows; padded to the window they are copies."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: fixed_noise(t.shape[-3:]).to(t).expand_as(t))
    reference = make(train=True, use_rpe=True, **options)  # float64
    layer = copy.deepcopy(reference).float()
    layer.kernel = "triton"
    lengths = [Lmax, Lmax if options.get("causal") else 9]  # causal rows unpadded (pads come after them)
    x = inputs(2, Lmax, requires_grad=True)
    pad = torch.arange(Lmax)[None, :] < torch.tensor([Lmax - L for L in lengths])[:, None]  # left padding
    weights = torch.randn(2, Lmax, 16, dtype=torch.float64).masked_fill(pad[..., None], 0)
    y = layer(x.float(), key_padding_mask=pad if pad.any() else None)
    grads = torch.autograd.grad((y * weights.float()).sum(), [x, *layer.parameters()])
    noise = lambda c: fixed_noise((2, c + 1, 8))[:, c]  # noqa: E731
    expected = [reference_eva(reference, row[Lmax - L:], noise=noise) for row, L in zip(x, lengths)]
    loss = sum((e * w[Lmax - L:]).sum() for e, w, L in zip(expected, weights, lengths))
    expected_grads = torch.autograd.grad(loss, [x, *reference.parameters()])
    for row, (e, L) in enumerate(zip(expected, lengths)):
        torch.testing.assert_close(y[row, Lmax - L:].double(), e, atol=1e-5, rtol=1e-4)
    for (name, _), g, e in zip([("input", x), *reference.named_parameters()], grads, expected_grads):
        torch.testing.assert_close(g.double(), e, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
