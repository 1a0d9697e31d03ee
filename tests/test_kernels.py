"""Every registered kernel against the reference kernel (kernels/reference.py: the contract query by query),
on random contract inputs: the four layouts, with and without padding (per-row lengths, hidden summaries),
a relative position table, and the gradients of q, k, v, the summaries and the table. Kernels are taken from
the registry by name; a kernel that cannot compute a call here is skipped with its own reason."""

import pytest
import torch
from eva_helpers import F64, KERNEL_NAMES, LAYOUTS, contract_inputs

from fairseq_eva.attention.kernels import KERNELS, KernelSpec

pytestmark = pytest.mark.usefixtures("one_thread")

def outputs_and_gradients(kernel, call, wrt):
    y, lse = KERNELS[kernel].run(**call)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    return y, lse, torch.autograd.grad((y * weights).sum(), [call[name] for name in wrt])


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_each_kernel_equals_the_reference_kernel(kernel, layout, padded):
    """y, lse (where a query sees a key) and every gradient equal the reference's: float64 to 1e-10, a
    float32-only kernel to float32 rounding (its inputs are the float64 ones rounded). The RPE table's gradient
    where the kernel gives one on this device."""
    spec = KERNELS[kernel]
    dtype = F64 if F64 in spec.dtypes else torch.float32
    probe = torch.empty(1, 1, 1, 1, dtype=dtype)
    bias_grad = spec.refusal(probe, needs_grad=True, dropout=0.0, bias_grad=True, layout=layout) is None
    reason = spec.refusal(probe, needs_grad=True, dropout=0.0, bias_grad=bias_grad, layout=layout)
    if reason is not None:
        pytest.skip(f"{kernel}: {reason}")
    expected_call = contract_inputs(layout, padded, F64)
    call = contract_inputs(layout, padded, dtype)
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
