"""The blockwise kernel's elementwise passes: the compiled C loops equal the PyTorch ones (float32), masks
and all, and they build wherever a C compiler is (docs/design.md, "Kernels")."""

import shutil

import pytest
import torch

from fairseq_eva.attention import EVAAttention, blockwise, softmax_dropout

LOW = torch.finfo(torch.float32).min


def group(B=2, H=3, G=2, w=4, keys=9, width=5, seed=0):
    """Logits with a masked key, a bias with a masked entry (the causal mask), and dY V^T."""
    torch.manual_seed(seed)
    S = torch.randn(B, H, G, w, keys) * 3
    S[0, 1, 0, 2, 1] = LOW
    bias = torch.randn(H, w, width)
    bias[:, 0, 3:] = LOW
    return S, bias, torch.randn(B, H, G, w, keys)


def test_the_c_loops_build_where_a_compiler_is():
    if shutil.which("cc") is None:
        pytest.skip("no C compiler: the PyTorch passes run")
    assert softmax_dropout.library() is not None


@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("seen", [None, [6, 9]], ids=["all keys", "causal staircase"])
def test_c_loops_equal_pytorch(p, with_bias, seen):
    if softmax_dropout.library() is None:
        pytest.skip("the C loops did not build")
    S, bias, dP = group()
    bias = bias if with_bias else None
    S_c, lse_c = softmax_dropout.forward(S.clone(), bias, seen, p, seed=5)
    S_t, lse_t = softmax_dropout.forward_torch(S.clone(), bias, seen, p, seed=5)
    torch.testing.assert_close(S_c, S_t, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lse_c, lse_t, atol=1e-5, rtol=1e-6)
    if p:  # the same mask, drawn by both: some weights dropped, the same ones
        assert torch.equal(S_c == 0, S_t == 0) and (S_t == 0).float().mean() > 0.15
    if seen:
        assert (S_c[:, :, 0, :, 6:] == 0).all()

    D = (S_t * dP).sum(-1)  # rowsum(dY * Y) = rowsum(Z P dP), which the C loop takes and PyTorch recomputes
    grads = []
    for backward in (softmax_dropout.backward, softmax_dropout.backward_torch):
        d_bias = torch.zeros(3, 4, 5) if with_bias else None
        grads.append((*backward(S.clone(), dP.clone(), lse_t, D, bias, seen, d_bias, p, 5), d_bias))
    for c, t in zip(*grads):
        if t is not None:
            torch.testing.assert_close(c, t, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads[0][0], S_t, atol=1e-6, rtol=1e-5)  # the backward redraws the forward's Z * P


def test_softmax_rows_sum_to_one_and_masked_keys_get_nothing():
    S, bias, _ = group()
    P, _ = softmax_dropout.forward(S.clone(), bias, None, 0.0, seed=0)
    torch.testing.assert_close(P.sum(-1), torch.ones(P.shape[:-1]))
    assert P[0, 1, 0, 2, 1] == 0 and (P[:, :, :, 0, 3:5] == 0).all()
    expected = torch.softmax(torch.cat([S[..., :5] + bias[None, :, None], S[..., 5:]], -1), -1)
    torch.testing.assert_close(P, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [dict(window_size=4, num_chunks=3), dict(causal=True, window_size=4, chunk_size=2, overlap=True)],
    ids=["bidirectional", "causal"],
)
@pytest.mark.parametrize("group_elements", [2**20, 64], ids=["one group", "a group a block"])
def test_the_layer_trains_alike_on_both_implementations(options, group_elements, monkeypatch):
    """An EVA layer in training, float32, trainable RPE and dropout, padded: outputs and every gradient the
    same with the C loops and with the PyTorch passes (which the float64 tests check against the definition).
    With a group a block, each group's rows of the saved log-sum-exp are a strided slice."""
    if softmax_dropout.library() is None:
        pytest.skip("the C loops did not build")
    monkeypatch.setitem(blockwise.GROUP_ELEMENTS, "cpu", group_elements)
    torch.manual_seed(0)
    mod = EVAAttention(16, 2, use_rpe=True, dropout=0.2, **options).train()
    x = torch.randn(2, 21, 16, requires_grad=True)
    pad = torch.zeros(2, 21, dtype=torch.bool)
    pad[1, 17:] = True

    def run():
        torch.manual_seed(1)
        y = mod(x, key_padding_mask=None if mod.causal else pad)
        return [y, *torch.autograd.grad(y.square().sum(), [x, *mod.parameters()])]

    compiled = run()
    monkeypatch.setattr(softmax_dropout, "_library", False)
    reference = run()
    for c, t in zip(compiled, reference):
        torch.testing.assert_close(c, t, atol=2e-5, rtol=1e-4)
