"""docs/troubleshooting.md is the one full list of error messages: every message of the README's troubleshooting
table is in it, and docs/usage.md points to it rather than keeping a table of its own."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def section(text, heading):
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def message_pieces(cell):
    """The literal pieces of a table cell's `code` spans: the text between the elisions (...) and placeholders."""
    pieces = []
    for code in re.findall(r"`([^`]+)`", cell):
        pieces += [p.strip() for p in re.split(r"\.\.\.|/path/to/", code) if len(p.strip()) >= 6]
    return pieces


def test_the_readme_rows_are_in_troubleshooting():
    readme = section((REPO / "README.md").read_text(encoding="utf-8"), "Troubleshooting")
    full = " ".join((REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8").split())
    rows = [line.split(" | ")[0] for line in readme.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 10
    missing = [piece for cell in rows for piece in message_pieces(cell) if piece not in full]
    assert not missing, f"README messages not in docs/troubleshooting.md: {missing}"
    assert "docs/troubleshooting.md" in readme


def test_usage_points_to_troubleshooting():
    usage = section((REPO / "docs" / "usage.md").read_text(encoding="utf-8"), "Errors you may meet")
    assert "(troubleshooting.md)" in usage and "| message |" not in usage
