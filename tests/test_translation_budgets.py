"""The translation table at two budgets: each pair's verdict follows the tables' rule at both budgets."""

from benchmarks.pages import translation_budgets as tb


def runs(**bleu):
    return {row: [{"result": {"bleu": b}} for b in values] for row, values in bleu.items()}


def test_each_pair_is_held_flipped_closed_or_opened_by_the_rule():
    short = runs(a=[5, 6], b=[3, 4], c=[1, 2], d=[1.5, 5.5])
    long = runs(a=[9, 10], b=[11, 12], c=[3, 4], d=[2, 13])
    apart, within = tb.verdicts(short, long)
    verdict = {(better, worse): word for better, worse, _, _, word in apart}
    assert verdict == {("a", "b"): "flipped", ("a", "c"): "held", ("b", "c"): "held"}
    assert ("a", "d") in within and ("c", "d") in within
    short, long = runs(a=[5, 6], b=[3, 4]), runs(a=[5, 6], b=[4, 5.5])
    assert [word for *_, word in tb.verdicts(short, long)[0]] == ["closed"]
    assert [word for *_, word in tb.verdicts(long, short)[0]] == ["opened"]


def test_a_row_of_one_seed_is_ordered_against_none():
    apart, within = tb.verdicts(runs(a=[9], b=[1, 2]), runs(a=[9], b=[1, 2]))
    assert apart == [] and within == [("a", "b")]


def test_the_rows_with_evas_bias_are_those_whose_encoder_is_evas_layer():
    assert [row for row in tb.ROWS if tb.with_bias(row)] == ["exact", "local", "eva16", "eva64"]
