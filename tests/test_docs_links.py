"""Every relative link of the README and docs/ leads somewhere: the file exists and, for a link to a section
of a Markdown page, the page has that heading (GitHub's anchor of it)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "results" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page):
    return {anchor(m.group(1)) for m in re.finditer(r"^#+ (.*)$", page.read_text(), re.M)}


def test_anchor_follows_github():
    assert anchor("How fast, and how much memory, on a CPU?") == "how-fast-and-how-much-memory-on-a-cpu"
    assert anchor("The paper's configs") == "the-papers-configs"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(page):
    broken = []
    for m in LINK.finditer(page.read_text()):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):  # http(s), mailto: not checked offline
            continue
        path, _, section = link.partition("#")
        target = (page.parent / path) if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif section and target.suffix == ".md" and section not in anchors(target):
            broken.append(f"{link}: no such section")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)
