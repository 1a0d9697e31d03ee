"""The chunk summaries in Triton (kernels/triton/summaries.py) against ChunkSummaries' PyTorch definition in
float64, under Triton's interpreter on the CPU (tests/conftest.py): values and the gradients of q, k, v and sigma."""

import copy

import pytest
import torch

from fairseq_eva.attention import chunks
from fairseq_eva.attention.chunks import ChunkSummaries, segments

pytest.importorskip("triton")
from fairseq_eva.attention.kernels.triton import summaries  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
B, H, N, D = 2, 2, 12, 16


def qkv(seed=0):
    """float64 leaves, B x H x N x d views of B x N x H x d memory, as the layer's projections give them."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, N, H, D, generator=g, dtype=torch.float64).transpose(1, 2).requires_grad_() for _ in range(3)]


def summaries_and_grads(module, outputs, leaves):
    """The outputs and the gradients of a fixed random loss of them, of the leaves and the module's parameters."""
    g = torch.Generator().manual_seed(1)
    loss = sum((o.double() * torch.randn(o.shape, generator=g, dtype=torch.float64)).sum() for o in outputs)
    return [o.detach().double().cpu() for o in outputs], [
        t.double().cpu() for t in torch.autograd.grad(loss, [*leaves, *module.parameters()])]


def on_triton(monkeypatch):
    """ChunkSummaries takes the Triton path on these (CPU, interpreted) tensors as it does on CUDA ones; the
    number of calls that took it."""
    calls = []
    run = summaries.chunk_summaries
    monkeypatch.setattr(chunks, "_use_triton", lambda q: True)
    monkeypatch.setattr(summaries, "chunk_summaries", lambda *args, **kw: calls.append(1) or run(*args, **kw))
    return calls


def check(got, expected):
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lengths, num_chunks, chunk_size", [([N, 7], 3, 0), ([N, 0], 0, 5), ([9, N], 0, 4)],
                         ids=["three_chunks_a_row", "chunks_of_5_and_an_empty_row", "chunks_of_4"])
def test_padded_rows_match_the_segmented_definition(lengths, num_chunks, chunk_size, monkeypatch):
    """Rows of their own length (pads after it), chunks of each row's own size (C chunks of ceil(L / C)) or of a
    fixed size with a shorter last chunk, empty chunks (a row of length 0): k~, beta and every gradient."""
    reference = ChunkSummaries(D).double().eval()
    with torch.no_grad():  # LayerNorm's affine away from (1, 0), so that its gradients are not special
        for p in reference.parameters():
            p.add_(0.1 * torch.randn_like(p))
    lengths = torch.tensor(lengths)
    if chunk_size:
        sizes, count = torch.full_like(lengths, chunk_size), -(-N // chunk_size)
    else:
        sizes, count = (lengths + num_chunks - 1) // num_chunks, num_chunks
    positions = torch.arange(N)[None, :]
    chunk_ids = (positions // sizes.clamp_min(1)[:, None]).masked_fill(positions >= lengths[:, None], count)
    leaves = qkv()
    *outputs, chunk_ok = reference.segmented(*leaves, segments(chunk_ids, count))
    expected = summaries_and_grads(reference, outputs, leaves)

    module = copy.deepcopy(reference).float()
    leaves32 = [t.detach().float().to(DEVICE).requires_grad_() for t in leaves]
    calls = on_triton(monkeypatch)
    *outputs, chunk_ok32 = module.segmented(*leaves32, segments(chunk_ids.to(DEVICE), count))  # the layer's chunk ids
    assert calls and [o.dtype for o in outputs] == [torch.float32] * 2
    assert torch.equal(chunk_ok32.cpu(), chunk_ok)
    got = summaries_and_grads(module, outputs, leaves32)
    check(got[0], expected[0])
    check(got[1], expected[1])


def test_whole_chunks_match_the_uniform_definition(monkeypatch):
    """No lengths, chunks of 4 filling N: the uniform definition, in training, with the same noise on omega."""
    noise = torch.randn(B, H, N // 4, D, dtype=torch.float64)
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: noise.to(t))
    reference = ChunkSummaries(D).double().train()
    leaves = qkv(2)
    expected = summaries_and_grads(reference, reference.uniform(*leaves, 4), leaves)
    module = copy.deepcopy(reference).float()
    leaves32 = [t.detach().float().to(DEVICE).requires_grad_() for t in leaves]
    calls = on_triton(monkeypatch)
    got = summaries_and_grads(module, module.uniform(*leaves32, 4), leaves32)
    assert calls
    check(got[0], expected[0])
    check(got[1], expected[1])


@pytest.mark.parametrize("lengths", [None, [N, 7]], ids=["uniform", "segmented"])
def test_views_of_one_projection(monkeypatch, lengths):
    """q, k, v as the layer makes them, views of one B x N x 3 x H x d product (gaps between a view's rows): the
    gradients land where the PyTorch path puts them."""
    module = ChunkSummaries(D).train()
    torch.manual_seed(0)
    product = torch.randn(B, N, 3, H, D, device=DEVICE, requires_grad=True)
    noise = torch.randn(B, H, 3, D, device=DEVICE)
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: noise.to(t))
    if lengths is not None:
        lengths = torch.tensor(lengths, device=DEVICE)
        positions = torch.arange(N, device=DEVICE)[None, :]
        layout = segments((positions // 4).masked_fill(positions >= lengths[:, None], 3), 3)

    def run():
        q, k, v = (t.transpose(1, 2) for t in product.unbind(2))
        outputs = module.uniform(q, k, v, 4) if lengths is None else module.segmented(q, k, v, layout)[:2]
        return summaries_and_grads(module, outputs, [product])

    expected = run()
    calls = on_triton(monkeypatch)
    got = run()
    assert calls
    check(got[0], expected[0])
    check(got[1], expected[1])


def test_custom_ops_fakes_and_autograd():
    """torch.library.opcheck: schemas, the fakes torch.compile traces with, and the autograd registrations."""
    q, k, v = (t.detach().float().to(DEVICE).requires_grad_() for t in qkv(3))
    lengths = torch.tensor([N, 5], dtype=torch.int32, device=DEVICE)
    torch.library.opcheck(summaries.chunk_means_op, (q, k, lengths, None, 4, 3))
    omega = torch.randn(B, H, 3, D, device=DEVICE, requires_grad=True)
    torch.library.opcheck(summaries.chunk_beta_op, (k, v, omega, lengths, None, 4, D**-0.5))


def test_compiles_in_one_graph(monkeypatch):
    """The layer's path through the summaries under torch.compile(fullgraph=True): the dispatch and the custom ops'
    fakes trace without a graph break, and the compiled values and gradients are eager's."""
    module = ChunkSummaries(D).eval()
    leaves = [t.detach().float().to(DEVICE).requires_grad_() for t in qkv(4)]
    lengths = torch.tensor([N, 7], device=DEVICE)
    chunk_ids = (torch.arange(N, device=DEVICE)[None, :] // 3).masked_fill(torch.arange(N, device=DEVICE) >= lengths[:, None], 4)
    layout = segments(chunk_ids, 4)
    calls = on_triton(monkeypatch)

    def loss(q, k, v):
        k_summary, beta, _ = module.segmented(q, k, v, layout)
        return (k_summary * beta).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    eager, traced = loss(*leaves), compiled(*leaves)
    assert calls
    torch.testing.assert_close(traced, eager)
    for a, b in zip(torch.autograd.grad(traced, leaves), torch.autograd.grad(eager, leaves)):
        torch.testing.assert_close(a, b)
