"""Every registered kernel against the reference kernel (kernels/reference.py: the contract query by query),
on random contract inputs: the four layouts, with and without padding (per-row lengths, hidden summaries),
a relative position bias by offset or by place (a per-place grid), and the gradients of q, k, v, the summaries
and the bias. Kernels are taken from the registry by name; a kernel that cannot compute a call here is skipped
with its own reason."""

import dataclasses
import re

import pytest
import torch
from eva_helpers import F64, KERNEL_NAMES, LAYOUTS, contract_inputs

from fairseq_eva.attention.kernels import AUTO_ORDER, KERNELS, KernelSpec, choose

GRID_REFUSAL = "it takes the relative position bias by offset only, not a per-place table (--eva-rpe-type table)"

pytestmark = pytest.mark.usefixtures("one_thread")

def outputs_and_gradients(kernel, call, wrt):
    y, lse = KERNELS[kernel].run(**call)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    return y, lse, torch.autograd.grad((y * weights).sum(), [call[name] for name in wrt])


@pytest.mark.parametrize("bias", ["offsets", "places"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_each_kernel_equals_the_reference_kernel(kernel, layout, padded, bias):
    """y, lse (where a query sees a key) and every gradient equal the reference's: float64 to 1e-10, a
    float32-only kernel to float32 rounding (its inputs are the float64 ones rounded). The bias's gradient
    where the kernel gives one on this device; the bias a table by offset or a random per-place grid."""
    spec = KERNELS[kernel]
    dtype = F64 if F64 in spec.dtypes else torch.float32
    probe = torch.empty(1, 1, 1, 1, dtype=dtype)
    grid = bias == "places"
    bias_grad = spec.refusal(probe, needs_grad=True, dropout=0.0, bias_grad=True, bias_grid=grid, layout=layout) is None
    reason = spec.refusal(probe, needs_grad=True, dropout=0.0, bias_grad=bias_grad, bias_grid=grid, layout=layout)
    if reason is not None:
        pytest.skip(f"{kernel}: {reason}")
    expected_call = contract_inputs(layout, padded, F64, grid=grid)
    call = contract_inputs(layout, padded, dtype, grid=grid)
    if not bias_grad:
        call["rpe"].requires_grad_(False)
    wrt = ["q", "k", "v", "k_summary", "beta"] + (["rpe"] if bias_grad else [])
    try:
        y, lse, grads = outputs_and_gradients(kernel, call, wrt)
    except ValueError as error:
        if "takes no lengths" in str(error):
            pytest.skip(f"{kernel}: {error}")
        raise
    ref_y, ref_lse, ref_grads = outputs_and_gradients("reference", expected_call, wrt)
    tol = dict(atol=1e-10, rtol=0) if dtype == F64 else dict(atol=2e-5, rtol=1e-4)
    assert lse.shape == ref_lse.shape and lse.dtype in (torch.float32, F64)
    torch.testing.assert_close(y.to(F64), ref_y, **tol)
    seen = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse.to(F64)[seen], ref_lse[seen], **tol)
    for name, g, e in zip(wrt, grads, ref_grads):
        torch.testing.assert_close(g.to(F64), e, **tol, msg=lambda m: f"d {name}: {m}")
    if padded:
        assert not seen[2].any() and (y[2] == 0).all()  # queries that see nothing: zeros


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("kernel", ["reference", *KERNEL_NAMES])
def test_a_grid_gathered_from_an_offset_table_is_that_table(kernel, layout, padded):
    """The two forms of the bias meet: the grid rpe[:, layout.offset_index()] gives exactly the output of the table
    rpe itself, and (through the gather) the table's gradient, to rounding."""
    spec = KERNELS[kernel]
    dtype = F64 if F64 in spec.dtypes else torch.float32
    probe = torch.empty(1, 1, 1, 1, dtype=dtype)
    reason = spec.refusal(probe, needs_grad=True, dropout=0.0, bias_grad=False, bias_grid=True, layout=layout)
    if reason is not None:
        pytest.skip(f"{kernel}: {reason}")
    bias_grad = spec.refusal(probe, needs_grad=True, dropout=0.0, bias_grad=True, bias_grid=True, layout=layout) is None
    call = contract_inputs(layout, padded, dtype)
    table = call["rpe"].detach().requires_grad_(bias_grad)
    results = []
    for rpe in (table, table[:, layout.offset_index()]):
        try:
            y, lse = spec.run(**{**call, "rpe": rpe})
        except ValueError as error:
            if "takes no lengths" in str(error):
                pytest.skip(f"{kernel}: {error}")
            raise
        grad = torch.autograd.grad(y.pow(2).sum(), table)[0] if bias_grad else None
        results.append((y, lse, grad))
    (y, lse, grad), (y_grid, lse_grid, grad_grid) = results
    assert torch.equal(y_grid, y) and torch.equal(lse_grid, lse)
    if bias_grad:
        torch.testing.assert_close(grad_grid, grad, atol=1e-12 if dtype == F64 else 1e-5, rtol=1e-6 if dtype == F64 else 1e-4)


def test_a_grid_of_the_wrong_shape_is_refused():
    call = contract_inputs(LAYOUTS["bidirectional, overlap"], False, F64, grid=True)
    call["rpe"] = call["rpe"][:, :, :-1]
    with pytest.raises(ValueError, match=r"per-place RPE grid must be heads x 4 x 8, not \(2, 4, 7\)"):
        KERNELS["blockwise"].run(**call)


def test_the_triton_kernel_refuses_a_per_place_grid(monkeypatch):
    """Its programs read the bias by offset: a grid is a refusal reason of its own (no Triton needed to say so), a
    pinned call is refused with it, and "auto" takes the next kernel, as on CUDA where the Triton kernel comes first."""
    spec = KERNELS["triton"]
    q = torch.empty(1, 2, 8, 4)
    assert GRID_REFUSAL in spec.refusal(q, needs_grad=True, dropout=0.0, bias_grad=True, bias_grid=True)
    assert GRID_REFUSAL not in (spec.refusal(q, needs_grad=True, dropout=0.0, bias_grad=True) or "")
    with pytest.raises(ValueError, match="the EVA kernel 'triton' cannot run this call: .*" + re.escape(GRID_REFUSAL)):
        choose("triton", q, needs_grad=False, dropout=0.0, bias_grad=False, bias_grid=True)
    installed = dataclasses.replace(spec, devices=frozenset({"cpu"}), unavailable=lambda: None)  # as on a GPU
    monkeypatch.setitem(KERNELS, "triton", installed)
    monkeypatch.setitem(AUTO_ORDER, "cpu", ["triton", "blockwise"])
    assert choose("auto", q, needs_grad=True, dropout=0.1, bias_grad=True).name == "triton"
    assert choose("auto", q, needs_grad=True, dropout=0.1, bias_grad=True, bias_grid=True).name == "blockwise"
    assert installed.refusal(q, needs_grad=True, dropout=0.1, bias_grad=True, bias_grid=True) == GRID_REFUSAL


def test_a_refusal_names_every_reason():
    """A pinned kernel that cannot run a call says all that stands in the way, not the first thing only."""
    spec = KernelSpec(name="narrow", run=None, devices=frozenset({"cuda"}), dtypes=frozenset({torch.float16}),
                      backward=False, dropout=False, bias_grad=False, check=lambda q, **call: "its own check",
                      unavailable=lambda: "not installed")
    reason = spec.refusal(torch.empty(1, 1, 1, 1, dtype=F64), needs_grad=True, dropout=0.1, bias_grad=True)
    assert reason.split("; ") == ["it runs on cuda, not cpu", "it takes float16, not float64",
                                  "it has no backward (evaluation only)", "it takes no attention dropout",
                                  "it gives no gradient to a trainable relative position bias", "its own check",
                                  "not installed"]
    assert spec.refusal(torch.empty(1, 1, 1, 1, dtype=torch.float16, device="meta"), needs_grad=False, dropout=0.0,
                        bias_grad=False) == "it runs on cuda, not meta; its own check; not installed"


def test_a_kernel_that_torch_compile_cannot_trace_is_refused_before_compiling():
    """Pinned with compile on: refused when the layer is built. Under "auto": a compiled call takes only kernels that
    torch.compile traces, and when none of them takes the call, the layer says why before anything compiles."""
    from fairseq_eva.attention import EVAAttention

    untraceable = sorted(name for name, spec in KERNELS.items() if not spec.compiles)
    assert "c_loop" in untraceable and "blockwise" in untraceable
    for name in untraceable:
        with pytest.raises(ValueError, match=f"compile 'default' needs a kernel that torch.compile traces.*'{name}'"):
            EVAAttention(16, 2, window_size=4, num_chunks=2, kernel=name, compile="default")
    layer = EVAAttention(16, 2, window_size=4, num_chunks=2, use_rpe=True, dropout=0.1, compile="default").train()
    with pytest.raises(ValueError, match="c_loop: torch.compile cannot trace it .*blockwise: torch.compile cannot trace it"):
        layer(torch.randn(1, 8, 16, requires_grad=True))
    q = torch.empty(1, 1, 1, 1)
    assert KERNELS["c_loop"].refusal(q, needs_grad=False, dropout=0.0, bias_grad=False, compiling=True) == \
        "torch.compile cannot trace it"
