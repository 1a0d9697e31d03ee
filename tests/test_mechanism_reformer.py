"""Reformer's LSH attention: the module equals its float64 reference with left padding (same rotations; in
evaluation with the saved rotations, in training with the draw that torch.manual_seed replays); one chunk
holding every position with attention across buckets is shared-QK softmax over the normalised keys with
the query itself masked (used only when alone), whatever the number of rounds; buckets do not change when x
is scaled by a positive number; evaluation is deterministic and training redraws; the shared padding and
gradient checks hold."""

import mechanism_checks as checks
import pytest
import torch
import torch.nn.functional as F

from fairseq_eva.attention import reformer, registry


def _out(module, y):
    B, H, N, d = y.shape
    return module.out_proj(y.transpose(1, 2).reshape(B, N, H * d))


def _batch(N=13):
    torch.manual_seed(0)
    x = torch.randn(3, N, checks.EMBED, dtype=torch.float64)
    mask = torch.zeros(3, N, dtype=torch.bool)
    mask[1, :4] = True  # left padding
    mask[2, 10:] = True  # right padding
    return x, mask


@pytest.mark.parametrize("across", [False, True])
@pytest.mark.parametrize("num_buckets", [0, 4])
def test_equals_its_float64_reference_with_padding_in_evaluation(across, num_buckets):
    """Chunks of 3 over 9 to 13 real tokens, 4 buckets: several chunks and buckets in every round."""
    options = dict(num_hashes=3, chunk_size=3, num_buckets=num_buckets, attend_across_buckets=across)
    module = checks.build("reformer", train=False, **options)
    x, mask = _batch()
    q, _, v = module.project(x)
    expected = _out(module, reformer.reference(q, v, module.rotations, 3, num_buckets, across, real=~mask))
    y = module(x, mask)
    torch.testing.assert_close(y[~mask], expected[~mask])
    assert not y[mask].any()


def test_equals_its_float64_reference_in_training_with_the_seeded_draw():
    module = checks.build("reformer", train=True, num_hashes=2, chunk_size=3)
    x, mask = _batch()
    q, _, v = module.project(x)
    torch.manual_seed(7)
    rotations = torch.randn(module.rotations.shape, dtype=torch.float64)
    expected = _out(module, reformer.reference(q, v, rotations, 3, real=~mask))
    assert not torch.equal(rotations, module.rotations)
    torch.manual_seed(7)
    torch.testing.assert_close(module(x, mask)[~mask], expected[~mask])


def test_one_chunk_across_buckets_is_shared_qk_softmax_with_itself_masked_and_rounds_coincide():
    N = 9
    x, mask = _batch(N)
    mask[2] = True
    mask[2, 4] = False  # a row with one real token: it attends itself
    outputs = []
    for num_hashes in (1, 4):
        module = checks.build("reformer", num_hashes=num_hashes, chunk_size=N, attend_across_buckets=True)
        q, _, v = module.project(x)
        k = F.normalize(q, dim=-1)
        logits = (q @ k.transpose(-1, -2)) / q.size(-1) ** 0.5
        hidden = torch.eye(N, dtype=torch.bool) | mask[:, None, None, :]
        p = torch.softmax(logits.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0)
        alone = ~mask[:, None, :, None] & (~mask).sum(1)[:, None, None, None].eq(1)
        p = torch.where(alone, torch.eye(N, dtype=p.dtype), p)
        y = module(x, mask)
        torch.testing.assert_close(y[~mask], _out(module, p @ v)[~mask])
        outputs.append(y)
    torch.testing.assert_close(outputs[0], outputs[1])


def test_buckets_do_not_change_under_positive_rescaling_and_negation_moves_by_half():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 20, 8, dtype=torch.float64)
    rotations = torch.randn(3, 4, 8, 8, dtype=torch.float64)
    half = torch.tensor([3, 8])
    buckets = reformer.lsh_buckets(x, rotations, half)
    assert buckets.unique().numel() > 4 and (buckets < 2 * half[:, None, None, None]).all()
    for scale in (1e-3, 0.5, 40.0):
        assert torch.equal(reformer.lsh_buckets(scale * x, rotations, half), buckets)
    negated = reformer.lsh_buckets(-x, rotations, half)
    assert torch.equal(negated, (buckets + half[:, None, None, None]) % (2 * half[:, None, None, None]))


def test_evaluation_is_deterministic_and_saved_while_training_redraws():
    x, mask = _batch()
    module = checks.build("reformer", num_hashes=2, chunk_size=2, num_buckets=6)
    training = [checks.run(module, x, mask, seed=s) for s in (1, 2, 1)]
    assert not torch.allclose(training[0], training[1])
    torch.testing.assert_close(training[0], training[2], rtol=0, atol=0)
    module.eval()
    evaluation = [checks.run(module, x, mask, seed=s) for s in (1, 2)]
    torch.testing.assert_close(evaluation[0], evaluation[1], rtol=0, atol=0)
    copy = checks.build("reformer", train=False, seed=3, num_hashes=2, chunk_size=2, num_buckets=6)
    assert not torch.equal(copy.rotations, module.rotations)
    copy.load_state_dict(module.state_dict())
    torch.testing.assert_close(copy(x, mask), evaluation[0], rtol=0, atol=0)


@pytest.mark.parametrize("options,message", [
    ({"num_hashes": 0}, "num_hashes must be a positive integer, got 0"),
    ({"chunk_size": -2}, "chunk_size must be a positive integer, got -2"),
    ({"num_buckets": 3}, "num_buckets must be 0 .* or a positive even integer, got 3")])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message), torch.device("meta"):
        registry.build("reformer", 16, 2, **options)


def test_shared_checks():
    for train in (True, False):
        checks.check_padding("reformer", train=train, num_hashes=2, chunk_size=2)
    checks.check_gradients("reformer", num_hashes=2, chunk_size=2)


def test_cost_at_the_papers_masked_lm_setting():
    """n_h = 4, m = 64, N = 2048: 32 buckets, 4 (4 * 64 + 16) D = 1088 D."""
    assert registry.get("reformer").macs_per_token(2048, 768, 12) == 1088 * 768


def test_a_chunk_longer_than_the_batch_is_one_chunk_of_the_batch():
    """A chunk size above N lays out one chunk of N: the outputs of chunk size N, without a million empty slots."""
    x, mask = _batch()
    module = checks.build("reformer", train=False, num_hashes=2, chunk_size=x.size(1), num_buckets=4)
    y = module(x, mask)
    module.chunk_size = 10**6  # B x H x R x m x 2m logits would be terabytes
    torch.testing.assert_close(module(x, mask)[~mask], y[~mask], rtol=1e-12, atol=1e-12)
