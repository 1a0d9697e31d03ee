"""The tables of README.md and docs/results.md, rendered from the records under benchmarks/results/.

A table's place in a page is marked by `<!-- results: NAME -->` ... `<!-- end results -->`; this writes each
marked block again from its record (TABLES), so a number on the pages is one of a record's. A test renders
them and fails where the committed text differs.

    python -m benchmarks.results_tables          # = make results: rewrite the marked blocks in place
    python -m benchmarks.results_tables --check  # say which blocks differ, change nothing
"""

import argparse
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")
PAGES = ("README.md", os.path.join("docs", "results.md"))
BLOCK = re.compile(r"(<!-- results: (\S+) -->\n)(.*?)(<!-- end results -->)", re.S)


def load(*path):
    with open(os.path.join(RESULTS, *path)) as f:
        return json.load(f)


def approximation_equal_cost(inputs):
    def render():
        from benchmarks import approximation

        return approximation.markdown(load("approximation.json")["results"][inputs]["equal_cost"], inputs).strip()

    return render


def mechanisms_speed(setting, lengths):
    """One row a mechanism: time and peak memory against EVA's in the same run, at each length."""

    def render():
        rows = [r for name in sorted(os.listdir(os.path.join(RESULTS, "mechanisms")))
                if name.startswith(f"speed_{setting}") and name.endswith(".json")
                for r in load("mechanisms", name)["results"]]  # each run holds EVA, which its ratios are against
        names = list(dict.fromkeys(r["mechanism"] for r in rows))
        shown = [n for n in lengths if any(r["N"] == n for r in rows)]
        cells = {(r["mechanism"], r["N"]): r for r in rows}
        head = " | ".join(f"N = {n}: time, memory" for n in shown)
        lines = [f"| {setting}: mechanism (MACs/token at N = {shown[0]}) | {head} |", "|---" * (len(shown) + 1) + "|"]
        for name in names:
            first = cells.get((name, shown[0]))
            cost = f" ({first['macs_per_token'] / 768:.0f} D)" if first else ""
            values = [f"{c['time_vs_eva']:.2f}x, {c['memory_vs_eva']:.2f}x" if (c := cells.get((name, n))) else "-"
                      for n in shown]
            lines.append(f"| {name}{cost} | " + " | ".join(values) + " |")
        return "\n".join(lines)

    return render


TABLES = {
    "approximation-equal-cost-model": approximation_equal_cost("model"),
    "approximation-equal-cost-random": approximation_equal_cost("random"),
    "mechanisms-speed-paper": mechanisms_speed("paper", (1024, 4096, 16384)),
    "mechanisms-speed-equal-cost": mechanisms_speed("equal-cost", (1024, 4096, 16384)),
}


def render_page(text):
    """The page with every marked block rendered again; unknown names raise KeyError naming them."""
    def block(match):
        name = match.group(2)
        if name not in TABLES:
            raise KeyError(f"no table named {name!r} (benchmarks/results_tables.py TABLES)")
        return match.group(1) + TABLES[name]() + "\n" + match.group(4)

    return BLOCK.sub(block, text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report the blocks that differ; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        path = os.path.join(REPO, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = render_page(text)
        if new != text:
            stale.append(page)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    for page in stale:
        print(f"{page}: {'differs from its records' if args.check else 'tables written again'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
