"""fairseq_eva/fairseq_fixes/harmless_warnings.py: the warnings that fairseq 0.12 gives with this torch and hydra, raised here by
their real sources, are silenced by the plugin's filters, and other warnings are not. A real fairseq-train and
fairseq-hydra-train run with nothing of it on stderr: tests/test_fairseq_translation.py."""

import warnings

import pytest
import torch

pytest.importorskip("fairseq")

from fairseq import options  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401  (registers the models)
from fairseq_eva.fairseq_fixes.harmless_warnings import install as ignore_harmless_warnings  # noqa: E402

EXPECTED = ("hydra.experimental.initialize() is no longer experimental", "version_base parameter is not specified",
            "package header '# @package _group_'", "is validated against ConfigStore schema", "strict flag",
            "torch.cuda.amp.autocast(args...)", "mismatched key_padding_mask and attn_mask")


def fairseqs_warnings():
    """Run what gives them in fairseq's tools: its hydra config from a command line, its autocast, torch's
    attention with its masks, its pinned data loader; return the warnings' messages."""
    args = options.parse_args_and_arch(options.get_training_parser(),
                                       ["/nonexistent", "--task", "translation", "--arch", "transformer_eva_tiny"])
    convert_namespace_to_omegaconf(args)
    with torch.cuda.amp.autocast(enabled=False):
        pass
    attention = torch.nn.MultiheadAttention(8, 2)
    x = torch.randn(3, 2, 8)
    future = torch.triu(torch.full((3, 3), float("-inf")), 1)
    attention(x, x, x, key_padding_mask=torch.zeros(2, 3, dtype=torch.bool), attn_mask=future)
    list(torch.utils.data.DataLoader([1, 2], pin_memory=True))
    warnings.warn("a warning that matters", UserWarning)
    warnings.warn("another one", FutureWarning)


def record(silenced):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if silenced:
            ignore_harmless_warnings()
        fairseqs_warnings()
    return [str(w.message) for w in caught]


def test_fairseqs_harmless_warnings_are_silenced_and_others_are_not():
    before = record(silenced=False)
    assert all(any(e in m for m in before) for e in EXPECTED), before  # their sources still give them
    if not torch.cuda.is_available():
        assert any("'pin_memory' argument is set as true" in m for m in before)
    after = record(silenced=True)
    assert after == ["a warning that matters", "another one"], after
