"""The rendering engine: find the marked blocks of a page, render each from its table, end it with the records it
read, and write the pages. The tables themselves are the section modules' (their `TABLES`)."""

import os
import re

from benchmarks.pages import records

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ("README.md", os.path.join("docs", "results.md"))
BLOCK = re.compile(r"(<!-- results: (\S+) -->\n)(.*?)(<!-- end results -->)", re.S)
WHERE = "the TABLES of the modules of benchmarks/pages/"  # where an unknown block's name is looked for


def gather(*tables):
    """One table of renderers from the sections' own; a name defined twice is an error, not a silent override."""
    found = {}
    for table in tables:
        twice = sorted(set(found) & set(table))
        if twice:
            raise ValueError(f"blocks defined twice in {WHERE}: {', '.join(twice)}")
        found.update(table)
    return found


def record_meta(record):
    """(commit, date) a record measured: its meta.json's, or a top-level JSON file's machine block."""
    if record.endswith(".json"):
        meta = records.load(record)["machine"]
    else:
        meta = records.load(*record.split("/"), "meta.json")
    return meta.get("commit", "not recorded"), meta.get("date", "not recorded")


def provenance(used, body):
    """A line naming the commit and date of each record a block was rendered from, but those the block names."""
    named = []
    for record in sorted(used):
        commit, date = record_meta(record)
        if f"commit {commit.split()[0]}" not in body:
            path = f"benchmarks/results/{record}" + ("" if record.endswith(".json") else "/")
            named.append(f"`{path}` (commit: {commit}; date: {date})")
    return f"\n\nMeasured: {', '.join(named)}." if named else ""


def render_page(text, tables):
    """The page with every marked block rendered again, each ending with the commit and date of the records it
    comes from; unknown names raise KeyError naming them."""
    def block(match):
        name = match.group(2)
        if name not in tables:
            raise KeyError(f"no table named {name!r} ({WHERE})")
        with records.noted() as used:
            body = tables[name]()
        return match.group(1) + body + provenance(used, body) + "\n" + match.group(4)

    return BLOCK.sub(block, text)


def write_pages(tables, check=False):
    """Render every page again and write those that changed (with check, write none); the pages that differed."""
    stale = []
    for page in PAGES:
        path = os.path.join(REPO, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = render_page(text, tables)
        if new != text:
            stale.append(page)
            if not check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    return stale
