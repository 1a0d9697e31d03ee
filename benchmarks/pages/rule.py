"""The rule of the tables in words: which rows are ordered (scripts/paper_table.py's beyond_spread: every seed of
one better than every seed of the other; a row of one seed never), for every sentence of the pages that orders
rows."""

from benchmarks.experiments import reports
from benchmarks.pages.words import listed


def rule_pairs(scores, higher=False):
    """[(better, worse)] of the pairs of rows that the tables' rule orders (scripts/paper_table.py's beyond_spread:
    every seed of one better than every seed of the other; never a row of one seed), from {row: [each seed's
    value]}."""

    beyond = reports.beyond_spread
    return [(a, b) for a in scores for b in scores if a != b and beyond(scores[a], scores[b], higher)]


def rule_sentence(scores, higher=False):
    """The rule's verdict on rows {name: [each seed's value]} as words: 'A below B and C; B and C within the
    spread' (below: lower is better; above: higher), and the rows of one seed, which it orders against none."""
    word = "above" if higher else "below"
    pairs = rule_pairs(scores, higher)
    single = [row for row, values in scores.items() if len(values) < 2]
    mean = {row: sum(v) / len(v) for row, v in scores.items()}
    order = sorted((row for row in scores if row not in single), key=lambda row: -mean[row] if higher else mean[row])
    parts = [f"{a} {word} {listed([b for x, b in pairs if x == a])}" for a in order if any(x == a for x, _ in pairs)]
    within = [f"{a} and {b}" for i, a in enumerate(order) for b in order[i + 1:]
              if (a, b) not in pairs and (b, a) not in pairs]
    if within:
        parts.append(("every other pair" if parts and len(within) > 2 else listed(within)) + " within the spread")
    if single:
        parts.append(f"{listed(single)} (one seed) ordered against no row")
    return "; ".join(parts)


def rule_over(points, unit, higher=False):
    """For each pair of rows, the points of [(point, {row: [each seed's value]})] at which the rule orders it: 'A
    below B from P on' (at every point from P to the last), 'at P, Q', or within the spread at every point."""
    single = [row for row in points[-1][1] if all(len(values[row]) < 2 for _, values in points)]
    rows = [row for row in points[-1][1] if row not in single]
    words = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            found = []
            for x, y in ((a, b), (b, a)):
                hits = [p for p, values in points if (x, y) in rule_pairs({x: values[x], y: values[y]}, higher)]
                if hits and hits == [p for p, _ in points][-len(hits):]:
                    found.append(f"{x} {'above' if higher else 'below'} {y} from {hits[0]:,} {unit} on")
                elif hits:
                    found.append(f"{x} {'above' if higher else 'below'} {y} at {listed([f'{h:,}' for h in hits])} "
                                 f"{unit}")
            words.append(" and ".join(found) if found else f"{a} and {b} within the spread at every point")
    if single:
        words.append(f"{listed(single)} (one seed) ordered against no row")
    return "; ".join(words)
