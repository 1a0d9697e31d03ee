"""`adaptive_loss_fp32_sum` (fairseq_eva/criterions/adaptive_loss.py): on a float16 batch whose loss overflows fairseq's
float16 sum, it gives the float32 sum with fairseq's gradients; the language-model configs use it."""

import glob
import os
import types

import pytest
import torch
from torch import nn

pytest.importorskip("fairseq")

from fairseq.criterions import CRITERION_REGISTRY  # noqa: E402
from fairseq.criterions.adaptive_loss import AdaptiveLoss  # noqa: E402
from fairseq.modules import AdaptiveSoftmax  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401  (registers the criterion)
from fairseq_eva.criterions.adaptive_loss import AdaptiveLossFP32Sum  # noqa: E402
from fairseq_eva.errors import UserError  # noqa: E402

FLOAT16_MAX = torch.finfo(torch.float16).max  # 65504
PAD = 1
VOCAB, DIM, CUTOFF = 3000, 32, [500, 1500]


class OneBatchLM(nn.Module):
    """What the criterion asks of a language model: decoder states for a batch, its targets and the decoder's
    adaptive softmax (fairseq's own)."""

    def __init__(self, states, dtype):
        super().__init__()
        torch.manual_seed(0)
        self.decoder = types.SimpleNamespace(adaptive_softmax=AdaptiveSoftmax(VOCAB, DIM, CUTOFF, dropout=0.0).to(dtype))
        self.states = nn.Parameter(states.to(dtype))

    def forward(self, src_tokens):
        return self.states, None

    def get_targets(self, sample, net_output):
        return sample["target"]


def batch(tokens_per_row=512, rows=16):
    """8192 tokens (the Wikitext-103 configs' per GPU), a few padded, 90% of them in the head (frequent words),
    decoder states large enough that a token costs about 10 nats: the sum over the head alone, which every
    token enters, overflows float16, as at the start of training."""
    g = torch.Generator().manual_seed(1)
    head = torch.randint(2, CUTOFF[0], (rows, tokens_per_row), generator=g)
    tail = torch.randint(CUTOFF[0], VOCAB, (rows, tokens_per_row), generator=g)
    target = torch.where(torch.rand(rows, tokens_per_row, generator=g) < 0.9, head, tail)
    target[:, -7:] = PAD
    states = torch.randn(rows, tokens_per_row, DIM, generator=g) * 8
    return {"net_input": {"src_tokens": target}, "target": target}, states


def criterion(cls):
    task = types.SimpleNamespace(target_dictionary=types.SimpleNamespace(pad=lambda: PAD))
    return cls(task, sentence_avg=False)


def loss_and_gradient(cls, dtype):
    sample, states = batch()
    model = OneBatchLM(states, dtype)
    loss, sample_size, log = criterion(cls)(model, sample)
    loss.backward()
    return loss, sample_size, log, model.states.grad


def test_the_float16_sum_overflows_and_ours_gives_the_float32_sum():
    fairseq_loss, _, fairseq_log, fairseq_grad = loss_and_gradient(AdaptiveLoss, torch.float16)
    assert torch.isinf(fairseq_log["loss"]).all()  # the bug: fairseq's adaptive_loss logs inf

    loss, sample_size, log, grad = loss_and_gradient(AdaptiveLossFP32Sum, torch.float16)
    reference, reference_size, reference_log, reference_grad = loss_and_gradient(AdaptiveLoss, torch.float32)
    assert loss.dtype == log["loss"].dtype == torch.float32 and torch.isfinite(loss)
    assert loss.item() > FLOAT16_MAX and loss.item() / sample_size > 8  # the case of the configs' first updates
    torch.testing.assert_close(loss.reshape(1), reference.reshape(1), rtol=1e-3, atol=0)
    assert (sample_size, log["ntokens"], log["nsentences"]) == (reference_size, 16 * 505, 16) == \
        (reference_size, reference_log["ntokens"], reference_log["nsentences"])
    # the gradients are fairseq's: each token's loss enters the sum with weight 1, whatever its dtype
    assert grad.dtype == torch.float16 and torch.isfinite(grad).all()
    torch.testing.assert_close(grad, fairseq_grad, rtol=0, atol=0)
    assert (grad.float() - reference_grad).norm() < 1e-2 * reference_grad.norm()  # float16's rounding only


def test_in_float32_it_is_fairseqs_adaptive_loss():
    loss, sample_size, log, grad = loss_and_gradient(AdaptiveLossFP32Sum, torch.float32)
    reference, reference_size, reference_log, reference_grad = loss_and_gradient(AdaptiveLoss, torch.float32)
    torch.testing.assert_close(loss.reshape(1), reference.reshape(1), rtol=1e-6, atol=0)
    torch.testing.assert_close(grad, reference_grad)


def test_it_is_registered_and_refuses_a_model_without_adaptive_softmax():
    assert CRITERION_REGISTRY["adaptive_loss_fp32_sum"] is AdaptiveLossFP32Sum
    sample, states = batch(8, 2)
    model = OneBatchLM(states, torch.float32)
    model.decoder.adaptive_softmax = None
    with pytest.raises(UserError, match="needs a model with an adaptive softmax"):
        criterion(AdaptiveLossFP32Sum)(model, sample)


CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CONFIGS, "wikitext103_*.yaml"))))
def test_the_language_model_configs_sum_their_loss_in_float32(path):
    """Their 8192 tokens a GPU x more than 8 nats a token is more than float16 holds."""
    c = OmegaConf.load(path)
    assert c.common.fp16 and c.model.get("adaptive_softmax_cutoff", "set by the architecture")
    assert c.dataset.max_tokens * 8 > FLOAT16_MAX
    assert c.criterion._name == "adaptive_loss_fp32_sum"
