"""Mistakes with fairseq's command-line tools that fairseq meets before the plugin is loaded: the last line
fairseq prints is what docs/troubleshooting.md says it is."""

import re
from pathlib import Path

import pytest

pytest.importorskip("fairseq")

from fairseq_helpers import REPO, run  # noqa: E402

DOC = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")


def documented(prefix):
    """The message of the troubleshooting row whose message starts with `prefix`."""
    match = re.search(r"^\| `(" + re.escape(prefix) + r"[^`]*)`", DOC, re.M)
    assert match, f"no row for {prefix!r} in docs/troubleshooting.md"
    return match.group(1)


def test_a_mistyped_user_dir_ends_as_documented(tmp_path):
    proc = run("fairseq-train", tmp_path, "--user-dir", "fairseq_evaa", "--task", "language_modeling",
               cwd=tmp_path, check=False)
    assert proc.returncode == 1
    line = documented("FileNotFoundError: ").replace("PATH", str(Path(tmp_path) / "fairseq_evaa"))
    assert proc.stderr.strip().splitlines()[-1] == line
