"""The layer's attention under torch.compile (EVAAttention(compile=...), --eva-compile): one graph (fullgraph=True)
with inductor on the CPU, equal to eager, and how often a new batch shape compiles it again. The Triton kernel runs
under its interpreter (tests/conftest.py), as a custom op the graph calls. Compiling takes minutes here: slow."""

import pytest
import torch

from fairseq_eva.attention import EVAAttention

pytest.importorskip("triton")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

D, H, N = 32, 4, 16


@pytest.fixture
def inductor():
    """Fresh dynamo state, and inductor drawing random numbers as eager does (so the proposal's noise agrees)."""
    import torch._dynamo
    import torch._inductor.config

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch._inductor.config.patch(fallback_random=True):
        yield torch._dynamo.utils.counters
    torch._dynamo.reset()


def layers(**options):
    torch.manual_seed(0)
    eager = EVAAttention(D, H, kernel="triton", **options).train()
    compiled = EVAAttention(D, H, kernel="triton", compile="default", **options).train()
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled


def outputs_and_gradients(mod, x, **call):
    torch.manual_seed(1)
    y = mod(x, **call)
    return (y, *torch.autograd.grad((y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum(), [x, *mod.parameters()]))


def padding(B):
    mask = torch.zeros(B, N, dtype=torch.bool)
    mask[1:, : B + 1] = True
    return mask


@pytest.mark.parametrize("options,compiles", [
    (dict(window_size=8, overlap=True, num_chunks=4, use_rpe=True), [1, 2, 2, 3, 4, 4]),
    (dict(causal=True, window_size=8, chunk_size=2, use_rpe=True), [1, 2, 2, 2, 2, 2]),  # pads are not its input
], ids=["bi", "causal"])
def test_compiled_equals_eager_and_batch_shapes_recompile_once(options, compiles, inductor):
    """Batches of 2, 3 and 5 rows, without then with a padding mask: each path compiles once for its first shape
    and once more for a dynamic batch, then no more (the graphs so far after each batch)."""
    eager, compiled = layers(**options)
    graphs = []
    for masked in (False, True):
        for B in (2, 3, 5):
            x = torch.randn(B, N, D, requires_grad=True)
            call = dict(key_padding_mask=padding(B)) if masked else {}
            for want, got in zip(outputs_and_gradients(eager, x, **call), outputs_and_gradients(compiled, x, **call)):
                torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            graphs.append(inductor["stats"]["unique_graphs"])
    assert graphs == compiles
    assert not inductor["graph_break"]


def test_compiled_with_dropout_equals_eager(inductor):
    """The seed drawn inside the graph draws the eager layer's masks."""
    eager, compiled = layers(window_size=8, num_chunks=4, use_rpe=True, dropout=0.1)
    x = torch.randn(2, N, D, requires_grad=True)
    for want, got in zip(outputs_and_gradients(eager, x), outputs_and_gradients(compiled, x)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_layers_of_one_configuration_share_their_graphs(inductor):
    """A model's layers (here two, with their own parameters) compile once between them."""
    first, second = (layers(window_size=8, num_chunks=4)[1] for _ in range(2))
    x = torch.randn(2, N, D)
    first(x), second(x)
    assert inductor["stats"]["unique_graphs"] == 1
