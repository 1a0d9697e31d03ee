"""The "c_loop" kernel (kernels/c_loop/: the blockwise kernel as one compiled C loop) equals the "blockwise"
kernel (groups of torch products and PyTorch passes) in float32, dropout masks and all, on every layout and
at two threads; and a float32 layer on it equals the per-query definition in float64 (docs/design.md,
"Kernels"). Both kernels are chosen through the public option, EVAAttention(kernel=...) or the registry.
Then the library's robustness: it builds wherever it should, a damaged cached library is rebuilt
instead of killing the process, a torch without sgemm_ gives one warning, an ILP64 BLAS is refused, and a
failed allocation raises."""

import copy
import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from eva_helpers import fixed_noise, inputs, make

from fairseq_eva.attention import EVAAttention
from fairseq_eva.attention.kernels import KERNELS, softmax_dropout
from fairseq_eva.attention.kernels.c_loop import build
from fairseq_eva.attention.layout import BlockLayout
from fairseq_eva.attention.reference import reference_eva

LAYOUTS = {
    "bidirectional": BlockLayout.bidirectional(8, False),
    "bidirectional, overlap": BlockLayout.bidirectional(8, True),
    "causal": BlockLayout.causal_blocks(8, False, 2),
    "causal, overlap": BlockLayout.causal_blocks(8, True, 4),
}


@pytest.fixture
def c_loop():
    """Skips where the C loop did not build, with the reason."""
    reason = KERNELS["c_loop"].unavailable()
    if reason is not None:
        pytest.skip(f"the C loop: {reason}")


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def attention_and_gradients(kernel, layout, dropout, padded, B=2, H=3, N=40, d=8):
    """Y and the gradients of q, k, v, the summaries and the RPE table, float32, by the registered kernel; the
    second row padded, and (bidirectional) some summaries hidden."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, N, H, d).transpose(1, 2).requires_grad_() for _ in range(3))
    C = N // 2 if layout.causal else 5
    k_summary, beta = (torch.randn(B, H, C, d, requires_grad=True) for _ in range(2))
    rpe = torch.randn(H, layout.num_offsets, requires_grad=True)
    lengths = torch.tensor([N, N - 13 if padded else N])
    chunk_ok = torch.tensor([[True] * C, [True, False] * (C // 2) + [True] * (C % 2)]) if padded and not layout.causal else None
    y, lse = KERNELS[kernel].run(layout=layout, q=q, k=k, v=v, k_summary=k_summary, beta=beta, chunk_ok=chunk_ok, rpe=rpe,
                                 lengths=lengths, dropout=dropout, seed=11, scale=d**-0.5)
    grads = torch.autograd.grad(y, [q, k, v, k_summary, beta, rpe], torch.randn_like(y))
    return [y, lse, *grads]


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_the_c_loop_equals_the_blockwise_kernel(layout, dropout, padded, c_loop, two_threads):
    """Two threads: the same outputs, log-sum-exps and gradients as the groups; with dropout the same weights
    dropped (a different mask moves Y by far more than the tolerance)."""
    compiled = attention_and_gradients("c_loop", layout, dropout, padded)
    groups = attention_and_gradients("blockwise", layout, dropout, padded)
    for name, c, t in zip(["y", "lse", "dq", "dk", "dv", "d_summary", "d_beta", "d_rpe"], compiled, groups):
        torch.testing.assert_close(c, t, atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    if dropout:
        assert (attention_and_gradients("c_loop", layout, 0.0, padded)[0] - compiled[0]).abs().max() > 0.1


@pytest.mark.parametrize("rpe_type", ["buckets", "table"])
@pytest.mark.parametrize(
    "options",
    [dict(window_size=4, num_chunks=3, overlap=True), dict(causal=True, window_size=4, chunk_size=2, overlap=True)],
    ids=["bidirectional", "causal"],
)
def test_the_c_loop_matches_the_definition(options, rpe_type, c_loop, monkeypatch):
    """A float32 layer in training with a trainable RPE (T5 buckets or a per-place table), on the C loop: its output
    and the gradients of the input and of every parameter equal autograd through the per-query definition in
    float64, to float32 rounding."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: fixed_noise(t.shape[-3:]).to(t).expand_as(t))
    reference = make(train=True, use_rpe=True, rpe_type=rpe_type, **options)  # float64
    layer = copy.deepcopy(reference).float()
    layer.kernel = "c_loop"
    x = inputs(2, 21, requires_grad=True)
    weights = torch.randn(2, 21, 16, dtype=torch.float64)
    y = layer(x.float())
    grads = torch.autograd.grad((y * weights.float()).sum(), [x, *layer.parameters()])
    noise = lambda c: fixed_noise((2, c + 1, 8))[:, c]  # noqa: E731
    expected = torch.stack([reference_eva(reference, row, noise=noise) for row in x])
    expected_grads = torch.autograd.grad((expected * weights).sum(), [x, *reference.parameters()])
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-4)
    for (name, _), g, e in zip([("input", x), *reference.named_parameters()], grads, expected_grads):
        torch.testing.assert_close(g.double(), e, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def test_softmax_rows_sum_to_one_and_masked_keys_get_nothing():
    torch.manual_seed(0)
    S, bias = torch.randn(2, 3, 2, 4, 9) * 3, torch.randn(3, 4, 5)
    low = torch.finfo(torch.float32).min
    S[0, 1, 0, 2, 1] = low
    bias[:, 0, 3:] = low
    rows = torch.arange(2 * 3 * 2 * 4).view(2, 3, 2, 4)
    P, _ = softmax_dropout.forward(S.clone(), bias, None, 0.0, 0, rows)
    torch.testing.assert_close(P.sum(-1), torch.ones(P.shape[:-1]))
    assert P[0, 1, 0, 2, 1] == 0 and (P[:, :, :, 0, 3:5] == 0).all()
    expected = torch.softmax(torch.cat([S[..., :5] + bias[None, :, None], S[..., 5:]], -1), -1)
    torch.testing.assert_close(P, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [dict(window_size=4, num_chunks=3), dict(causal=True, window_size=4, chunk_size=2, overlap=True)],
    ids=["bidirectional", "causal"],
)
def test_the_layer_trains_alike_on_both_kernels(options, c_loop):
    """An EVA layer in training, float32, trainable RPE and dropout, padded: outputs and every gradient the
    same with kernel="c_loop" and kernel="blockwise"."""
    x = torch.randn(2, 21, 16, requires_grad=True)
    pad = torch.zeros(2, 21, dtype=torch.bool)
    pad[1, 17:] = True

    def run(kernel):
        torch.manual_seed(0)
        mod = EVAAttention(16, 2, use_rpe=True, dropout=0.2, kernel=kernel, **options).train()
        torch.manual_seed(1)
        y = mod(x, key_padding_mask=None if mod.causal else pad)
        return [y, *torch.autograd.grad(y.square().sum(), [x, *mod.parameters()])]

    for c, t in zip(run("c_loop"), run("blockwise")):
        torch.testing.assert_close(c, t, atol=2e-5, rtol=1e-4)


# ------------------------------------------------------------------ the library: where it builds, damaged caches


def test_the_c_loop_builds_where_it_should():
    """It builds wherever a C compiler with OpenMP and torch's sgemm_ are; elsewhere this skips, saying which is
    missing (and the layer runs the blockwise kernel)."""
    missing = build.prerequisite_missing()
    if missing is not None:
        pytest.skip(f"the C loop cannot build here: {missing}")
    assert build.unavailable() is None


# A fresh process with its own cache folder (build.py alone, without fairseq, for speed): asks for the library
# twice, multiplies two matrices through it, and prints whether it runs and the warnings fairseq_eva gave.
# "no-sgemm": as with a torch that exports none.
CHILD = """
import ctypes, importlib.util, json, sys, warnings
spec = importlib.util.spec_from_file_location("build", sys.argv[2])
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)
if sys.argv[1] == "no-sgemm":
    build.SGEMM = "sgemm_not_exported_"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    library = build.library() and build.library()
works = bool(library) and library[0].eva_check_sgemm(ctypes.c_void_p(library[1])) == 1
print(json.dumps({"c_loop": works, "warnings": [str(w.message) for w in caught if "fairseq_eva" in str(w.message)]}))
"""


def run_child(cache, scenario=""):
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    child = subprocess.run([sys.executable, "-c", CHILD, scenario, build.__file__], env=env, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, f"the process died (exit status {child.returncode}): {child.stderr[-3000:]}"
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache(tmp_path):
    """A cache folder holding this process's good build (and its checksum); yields (folder, library path there)."""
    if build.unavailable() is not None:
        pytest.skip(f"the C loop: {build.unavailable()}")
    good = build.library_path()
    folder = tmp_path / "fairseq_eva"
    folder.mkdir()
    for name in (good, good + ".sum"):
        shutil.copy(name, folder)
    return tmp_path, str(folder / os.path.basename(good))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "garbage, no checksum"])
def test_a_damaged_cached_library_is_rebuilt(cache, damage):
    """A truncated library (its first 1000 bytes: loading it was a "Bus error") or one of random bytes (it was
    "could not be built", for good) is rebuilt, silently, and the C loop runs."""
    folder, path = cache
    with open(path, "rb") as f:
        good = f.read()
    with open(path, "wb") as f:
        f.write(good[:1000] if damage == "truncated" else os.urandom(len(good)))
    if damage == "garbage, no checksum":  # as builds before the checksum left them
        os.remove(path + ".sum")
    result = run_child(folder)
    assert result == {"c_loop": True, "warnings": []}
    assert os.path.getsize(path) == len(good) and build._intact(path)


def test_no_sgemm_warns_once_in_the_users_words(cache):
    """A torch that exports no sgemm_: no C loop, and one warning (for two asks) says why and what auto runs
    instead; nothing was cached, so it names no cache."""
    result = run_child(cache[0], "no-sgemm")
    assert not result["c_loop"] and len(result["warnings"]) == 1, result
    warning = result["warnings"][0]
    for words in ("exports no sgemm_not_exported_", "kernel is auto", "runs the blockwise kernel", "computation, slower"):
        assert words in warning, warning
    assert "cache" not in warning, warning


SGEMM_TYPE = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 13)


def fake_sgemm(integer):
    """A column-major sgemm in Python that reads its integer arguments as `integer` (c_int32: LP64, c_int64:
    ILP64), refusing (without computing) a leading dimension below m, as a BLAS's argument check does."""

    def sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        m, n, k, lda, ldb, ldc = (ctypes.cast(x, ctypes.POINTER(integer))[0] for x in (m, n, k, lda, ldb, ldc))
        if lda < m or ldc < m:
            return
        a, b, c = (ctypes.cast(x, ctypes.POINTER(ctypes.c_float)) for x in (a, b, c))
        for i in range(m):
            for j in range(n):
                c[i + j * ldc] = sum(a[i + p * lda] * b[p + j * ldb] for p in range(k))

    return SGEMM_TYPE(sgemm)


def test_the_build_check_refuses_a_blas_with_64_bit_integers(c_loop):
    """The test call of a build (eva_check_sgemm) passes with a BLAS that takes 32-bit integers (torch's, and a
    fake one) and fails with one that takes 64-bit integers."""
    lib = build.library()[0]
    lib.eva_check_sgemm.argtypes = [ctypes.c_void_p]
    assert lib.eva_check_sgemm(ctypes.c_void_p(build.library()[1])) == 1
    lp64, ilp64 = fake_sgemm(ctypes.c_int32), fake_sgemm(ctypes.c_int64)
    assert lib.eva_check_sgemm(ctypes.cast(lp64, ctypes.c_void_p)) == 1
    assert lib.eva_check_sgemm(ctypes.cast(ilp64, ctypes.c_void_p)) == 0


@pytest.mark.skipif(not os.path.exists("/proc/sys/vm/overcommit_memory") or open("/proc/sys/vm/overcommit_memory").read().strip()
                    == "1", reason="needs an allocator that refuses what it cannot hold (Linux overcommit mode 0 or 2)")
def test_a_failed_allocation_raises(c_loop):
    """Buffers the C loop cannot allocate (one block of 2^20 queries against 2^20 summaries: 8 TiB of logits)
    raise a MemoryError instead of aborting the process."""
    N = C = 2**20
    q, k, v = (torch.zeros(1, 1, N, 1) for _ in range(3))
    k_summary, beta = torch.zeros(1, 1, C, 1), torch.zeros(1, 1, C, 1)
    with pytest.raises(MemoryError, match="could not allocate"):
        KERNELS["c_loop"].run(layout=BlockLayout.bidirectional(N, False), q=q, k=k, v=v, k_summary=k_summary, beta=beta,
                              chunk_ok=None, rpe=None, lengths=None, dropout=0.0, seed=0, scale=1.0)
