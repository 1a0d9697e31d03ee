"""The one way the pages read benchmarks/results/: every function here notes the record it touches, so that a
block's provenance line names each record its numbers come from, whichever helper or cache read it.

A record is a top-level file or folder of benchmarks/results/, or gpu/FOLDER. Code that reads a folder itself (a
harness's reader) is given the path by `path` or `folder`, which note it; `within` notes a path a helper module
already holds.
"""

import contextlib
import json
import os

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")

_noting = []  # the sets of the blocks being rendered (render_page opens one a block)


def record_of(parts):
    """The record a path under benchmarks/results/ (its parts) belongs to."""
    return "/".join(parts[:2]) if parts[0] == "gpu" else parts[0]


def path(*parts):
    """The path of a file or folder under benchmarks/results/, its record noted."""
    for used in _noting:
        used.add(record_of(parts))
    return os.path.join(RESULTS, *parts)


folder = path  # a record's folder, for the harnesses' readers, which take a folder


def within(full):
    """A path under benchmarks/results/ that a helper module holds (its own constant), its record noted."""
    path(*os.path.relpath(full, RESULTS).split(os.sep))
    return full


def load(*parts):
    """A JSON file of a record."""
    with open(path(*parts)) as f:
        return json.load(f)


def text(*parts):
    """A text file of a record (a report, a log)."""
    with open(path(*parts), encoding="utf-8") as f:
        return f.read()


def curve(*parts):
    """The validations of a run (its curve.jsonl), each a dict."""
    with open(path(*parts, "curve.jsonl")) as f:
        return [json.loads(line) for line in f]


def names(*parts):
    """The files of a record's folder, sorted."""
    return sorted(os.listdir(path(*parts)))


@contextlib.contextmanager
def noted():
    """The records read meanwhile, as a set that fills as they are read."""
    used = set()
    _noting.append(used)
    try:
        yield used
    finally:
        _noting.remove(used)
