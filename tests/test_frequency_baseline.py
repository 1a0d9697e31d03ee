"""scripts/frequency_baseline.py: the perplexity of the training split's smoothed token frequencies, by hand."""

import math

from benchmarks.experiments import frequency as fb
from fairseq_helpers import run


def test_frequency_perplexity_equals_the_hand_computed_one(tmp_path):
    (tmp_path / "train.txt").write_text("a a a b\n")
    (tmp_path / "valid.txt").write_text("a b\n")
    run("fairseq-preprocess", "--only-source", "--trainpref", tmp_path / "train.txt", "--validpref",
        tmp_path / "valid.txt", "--destdir", tmp_path / "bin", "--workers", "1")
    from fairseq.data import Dictionary

    size = len(Dictionary.load(str(tmp_path / "bin" / "dict.txt")))  # the specials and padding words included
    result = fb.frequency_perplexity(str(tmp_path / "bin"), "valid")
    p_a, p_b = (3 + 1) / (4 + size), (1 + 1) / (4 + size)  # add-one over the dictionary; eos not counted
    assert result["tokens"] == 2 and result["train_tokens"] == 4
    assert math.isclose(result["perplexity"], math.exp(-(math.log(p_a) + math.log(p_b)) / 2), rel_tol=1e-12)
