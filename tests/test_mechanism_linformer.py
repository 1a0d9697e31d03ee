"""Linformer: the module equals its float64 reference with left padding (each row laid out from its first real
token), is softmax attention when E = F = I, softmax over block means when E = F average blocks, refuses
sequences longer than max_positions by naming it, and passes the shared padding and gradient checks."""

import mechanism_checks as checks
import pytest
import torch

from fairseq_eva.attention import linformer, registry
from fairseq_eva.attention import softmax as softmax_module


def _out(module, y):
    B, H, N, d = y.shape
    return module.out_proj(y.transpose(1, 2).reshape(B, N, H * d))


def _set_projections(module, E, F):
    with torch.no_grad():
        module.E.copy_(E)
        if module.F is not None:
            module.F.copy_(F)


@pytest.mark.parametrize("sharing", linformer.SHARING)
def test_equals_its_float64_reference_with_left_padding(sharing):
    module = checks.build("linformer", projected_dim=5, max_positions=10, sharing=sharing)
    torch.manual_seed(0)
    x = torch.randn(3, 9, checks.EMBED, dtype=torch.float64)
    mask = torch.zeros(3, 9, dtype=torch.bool)
    mask[1, :4] = True  # left padding: the row's first real token takes E's first column
    mask[2, :] = True  # nothing real: zeros
    E, F = module.length_projections()
    assert (E is F) == (sharing == "kv") and E.size(0) == (checks.HEADS if sharing == "none" else 1)
    expected = _out(module, linformer.reference(*module.project(x), E, F, real=~mask))
    y = module(x, mask)
    torch.testing.assert_close(y[~mask], expected[~mask])
    assert not y[mask].any()


def test_identity_projections_give_softmax_attention():
    N = 7
    module = checks.build("linformer", projected_dim=N, max_positions=N)
    _set_projections(module, torch.eye(N)[None], torch.eye(N)[None])
    x = torch.randn(2, N, checks.EMBED, dtype=torch.float64)
    q, k, v = module.project(x)
    torch.testing.assert_close(module(x), _out(module, softmax_module.reference(q, k, v)))


def test_block_mean_projections_give_softmax_over_block_means():
    N, s = 8, 2
    module = checks.build("linformer", projected_dim=N // s, max_positions=N, sharing="kv")
    blocks = torch.kron(torch.eye(N // s), torch.full((1, s), 1 / s))  # k x N: row j averages block j
    _set_projections(module, blocks[None], None)
    x = torch.randn(2, N, checks.EMBED, dtype=torch.float64)
    q, k, v = module.project(x)
    k_mean = k.unflatten(2, (N // s, s)).mean(3)
    v_mean = v.unflatten(2, (N // s, s)).mean(3)
    p = torch.softmax(q @ k_mean.transpose(-1, -2) / q.size(-1) ** 0.5, -1)
    torch.testing.assert_close(module(x), _out(module, p @ v_mean))


def test_a_sequence_longer_than_max_positions_is_refused_by_name():
    module = checks.build("linformer", projected_dim=4, max_positions=6)
    module(torch.randn(1, 6, checks.EMBED, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"7 positions, more than max_positions \(6\)"):
        module(torch.randn(1, 7, checks.EMBED, dtype=torch.float64))


@pytest.mark.parametrize("options,message", [
    ({"projected_dim": 0}, "projected_dim must be a positive integer, got 0"),
    ({"max_positions": -1}, "max_positions must be a positive integer, got -1"),
    ({"sharing": "layerwise"}, "sharing must be one of headwise, kv, none, got 'layerwise'")])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message), torch.device("meta"):
        registry.build("linformer", 16, 2, **options)


@pytest.mark.parametrize("sharing", linformer.SHARING)
def test_shared_padding_check(sharing):
    checks.check_padding("linformer", projected_dim=5, max_positions=12, sharing=sharing)


def test_shared_gradient_check():
    checks.check_gradients("linformer", projected_dim=3, max_positions=6)


def test_cost_is_four_k_d():
    assert registry.get("linformer").macs_per_token(2048, 768, 12) == 4 * 256 * 768
