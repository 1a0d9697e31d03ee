"""The host's share of the layer's time, counted on the CPU: the operations one forward + backward dispatches
(benchmarks/op_count.py), and that none of them waits for the device.

The layers are those of the GPU check's speed tables (benchmarks/gpu_check/layers.py, LAYERS) at tiny sizes, with the
Triton kernel under its interpreter (tests/conftest.py): the path a CUDA tensor takes. The counts do not depend on
the sizes, only on the path (a length that is a multiple of the window and of the chunks, as there).
"""

import pytest
import torch
from fairseq.modules import MultiheadAttention
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.op_count import count
from fairseq_eva.attention import EVAAttention
from fairseq_eva.modules import EVAMultiheadAttention

pytest.importorskip("triton")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def cuda_path(monkeypatch):
    """The chunk summaries in Triton too, as for a CUDA tensor (benchmarks.op_count.cuda_path)."""
    from fairseq_eva.attention import chunks

    monkeypatch.setattr(chunks, "_use_triton", lambda q: chunks.TRITON)

D, H, N = 32, 4, 16
# name: (options, the operations and new tensors it may dispatch). Most of what remains is the projections'
# (benchmarks.op_count: the four Linear layers alone take 85 / 20) and the proposal's Linear and LayerNorm.
LAYERS = {
    "eva": (dict(window_size=8, num_chunks=4, use_rpe=False), (124, 38)),
    "eva+rpe+dropout": (dict(window_size=8, num_chunks=4, use_rpe=True, dropout=0.1), (130, 41)),
    "eva-causal": (dict(causal=True, window_size=8, chunk_size=2, use_rpe=False), (124, 38)),
    "eva-causal+rpe+dropout": (dict(causal=True, window_size=8, chunk_size=2, use_rpe=True, dropout=0.1), (130, 41)),
}
# what a forward + backward may not dispatch on the way a CUDA tensor takes: each waits for the device
SYNCS = {"item", "_local_scalar_dense", "any", "nonzero", "is_nonzero", "equal"}


def layer(**options):
    torch.manual_seed(0)
    return EVAAttention(D, H, kernel="triton", **options).train()


@pytest.mark.parametrize("name", LAYERS)
def test_operations_within_budget(name):
    options, (operations, new) = LAYERS[name]
    total, made, ops = count(layer(**options), torch.randn(1, N, D, requires_grad=True))
    assert total <= operations and made <= new, (total, made, ops.most_common(10))


class Dispatched(TorchDispatchMode):
    """The names of the aten operations dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def dispatched(module, x, **call):
    """The operations of a forward + backward of `module` on x."""
    with Dispatched() as mode:
        out = module(x, **call)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    return mode.names


def padding(B, length):
    mask = torch.zeros(B, length, dtype=torch.bool)
    mask[1, :3] = True  # fairseq left-pads sources
    return mask


@pytest.mark.slow
def test_translation_attention_dispatches_within_budget():
    """The translation encoder's self-attention (windows of 8 with overlap, C = 8, RPE, dropout, pads) against
    fairseq's MultiheadAttention in the same setting. count() calls once before counting, as a model's layers
    after its first do: the layout of the batch's padding mask, which they share, is derived once
    (layout.tensor_cache). Not yet fairseq's count (123 / 46): 160 / 62 is what the layer reaches."""
    x, mask = torch.randn(N, 2, D, requires_grad=True), padding(2, N)
    torch.manual_seed(0)
    eva = EVAMultiheadAttention(D, H, window_size=8, overlap=True, num_chunks=8, use_rpe=True, dropout=0.1, kernel="triton")
    softmax = MultiheadAttention(D, H, dropout=0.1, self_attention=True)

    def call(module):
        return lambda x: module(x, x, x, key_padding_mask=mask)[0]

    counts = {name: count(_Call(call(m), m).train(), x)[:2] for name, m in (("eva", eva), ("softmax", softmax))}
    assert counts["eva"][0] <= 160 and counts["eva"][1] <= 62, counts


class _Call(torch.nn.Module):
    """A module whose forward is `call`, holding `module` (so that count() zeroes its gradients)."""

    def __init__(self, call, module):
        super().__init__()
        self.call, self.module = call, module

    def forward(self, x):
        return self.call(x)


@pytest.mark.parametrize("options", [
    dict(window_size=8, num_chunks=4),
    dict(window_size=8, overlap=True, num_chunks=3),  # chunks over the real tokens of each row
    dict(window_size=0, num_chunks=4),
    dict(window_size=6, num_chunks=4),  # the queries padded to whole blocks
    dict(causal=True, window_size=8, chunk_size=2),
    dict(causal=True, window_size=8, overlap=True, chunk_size=4),
], ids=str)
@pytest.mark.parametrize("masked", [False, True], ids=["no_mask", "mask"])
def test_no_synchronisation(options, masked):
    """Neither the layer nor the kernel asks the device for a value: with the RPE, training, pads or none."""
    mod = layer(use_rpe=options.get("window_size", 0) > 0, **options)
    call = dict(key_padding_mask=padding(2, N)) if masked else {}
    assert not dispatched(mod, torch.randn(2, N, D, requires_grad=True), **call) & SYNCS


def test_no_synchronisation_with_dropout():
    """The dropout seed is a device tensor that the Triton programs read themselves."""
    mod = layer(window_size=8, num_chunks=4, dropout=0.1)
    assert not dispatched(mod, torch.randn(2, N, D, requires_grad=True)) & SYNCS


def test_no_synchronisation_ignores_nothing():
    """The check sees a synchronisation where there is one: the blockwise kernel reads the seed on the host."""
    torch.manual_seed(0)
    mod = EVAAttention(D, H, window_size=8, num_chunks=4, dropout=0.1, kernel="blockwise").train()
    assert dispatched(mod, torch.randn(2, N, D, requires_grad=True)) & SYNCS == {"_local_scalar_dense"}
