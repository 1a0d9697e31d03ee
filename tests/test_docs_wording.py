"""The manuals and the tools' help texts speak of the project, not of how it was developed.

Scanned: README.md, docs/*.md, benchmarks/results/**/*.md; every string in scripts/, benchmarks/ and
data_prep/ Python tools (module docstrings, argparse help, report templates: what `--help` and the reports
print), and the shell tools whole (their usage texts). A hit names the file and line.
"""

import ast
import re

import pytest

from fairseq_helpers import REPO

PATTERNS = {
    "an issue number": r"\bissues? #?\d+",
    "a work session": r"\bsessions?\b",
    "a lent machine": r"\b(lent|borrowed)\b",
    "rounds of work": r"\brounds? of work\b",
    "a numbered call": r"\b(first|second|third|fourth|fifth) calls?\b|\bcall \d+\b",
    "the device tool": r"`device` tool|\bdevice tool\b",
    "the developers": r"\bengineers?\b|\bdevelopment machine\b",
}
WORDING = re.compile("|".join(f"(?:{p})" for p in PATTERNS.values()), flags=re.I)
# replaced by docs/results.md; skipped while it is still in the tree
SKIP = {"docs/RESULTS.md"}


def documents():
    found = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "benchmarks" / "results").rglob("*.md"))]
    return [p.relative_to(REPO).as_posix() for p in found if p.relative_to(REPO).as_posix() not in SKIP]


def tools():
    return [p.relative_to(REPO).as_posix() for folder in ("scripts", "benchmarks", "data_prep")
            for suffix in ("py", "sh") for p in sorted((REPO / folder).glob(f"*.{suffix}"))]


def hits(text, first_line=1):
    """(line, matched text) of every development wording in `text`, whose first line is `first_line`."""
    return [(first_line + text[:m.start()].count("\n"), m.group(0)) for m in WORDING.finditer(text)]


def python_strings(source):
    """(line, text) of every string constant: docstrings, help texts, report templates, f-string parts."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_the_patterns_catch_development_wording_and_not_the_manual():
    for said in ("the targets of issue 17", "Issue 19's step 4", "the ninth session", "on a lent GPU machine",
                 "a borrowed machine", "two rounds of work", "call 2's budget", "the second call",
                 "the `device` tool's machine", "kept by different engineers", "on the development machine"):
        assert hits(said), said
    for fine in ("(pytorch/pytorch#38228)", "65,536 tokens a call", "compiled on first use", "rounded up",
                 "each round of the interleaving", "a process per GPU", "see the issue tracker",
                 "fairseq's `device_id`", "the training scripts", "--num-workers 0"):
        assert not hits(fine), fine


@pytest.mark.parametrize("path", documents())
def test_documents_say_the_finding(path):
    found = hits((REPO / path).read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{path}:{line}: {text!r}" for line, text in found)


@pytest.mark.parametrize("path", tools())
def test_tool_texts_say_the_finding(path):
    source = (REPO / path).read_text(encoding="utf-8")
    strings = python_strings(source) if path.endswith(".py") else [(1, source)]
    found = [hit for line, text in strings for hit in hits(text, line)]
    assert not found, "\n".join(f"{path}:{line}: {text!r}" for line, text in found)
