"""The tables of README.md and docs/results.md, and the sentences with numbers around them, rendered from the
records under benchmarks/results/.

A table's place in a page is marked by `<!-- results: NAME -->` ... `<!-- end results -->`; this writes each
marked block again from its record, so a number on the pages is one of a record's. The renderers live in
benchmarks/pages/, one module a section of the pages, each with its table of names (TABLES); the engine that
renders a page and names the records each block read is benchmarks/pages/core.py. A test renders the pages and
fails where the committed text differs.

    python -m benchmarks.results_tables          # = make results: rewrite the marked blocks in place
    python -m benchmarks.results_tables --check  # say which blocks differ, change nothing
"""

import argparse
import sys

from benchmarks.pages import baselines, closeness, configs, core, cpu, gpu, learning, paper_tables, readme, translation_budgets

TABLES = core.gather(cpu.TABLES, gpu.TABLES, closeness.TABLES, learning.TABLES, baselines.TABLES,
                     paper_tables.TABLES, configs.TABLES, readme.TABLES, translation_budgets.TABLES)


def render_page(text):
    """The page with every marked block rendered again from TABLES (benchmarks/pages/core.py's render_page)."""
    return core.render_page(text, TABLES)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report the blocks that differ; write nothing")
    args = parser.parse_args(argv)
    stale = core.write_pages(TABLES, check=args.check)
    for page in stale:
        print(f"{page}: {'differs from its records' if args.check else 'tables written again'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
