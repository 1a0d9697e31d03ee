"""A process that stops while fairseq's prefetching thread is making a batch exits 0 (fairseq_eva/fairseq_fixes/clean_exit.py):
without the plugin the same script aborts with "terminate called without an active exception"."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# fairseq's BufferedIterator over batches made by torch operations (which release the GIL), as its collaters
# make them; the script takes one batch and exits while the thread is still filling its queue of 20
SCRIPT = """
import sys, torch
if sys.argv[1] == "plugin":
    import fairseq_eva.plugin  # noqa: F401
from fairseq.data import iterators

class Batches:
    def __len__(self):
        return 1000

    def __iter__(self):
        a = torch.randn(200, 200)
        for _ in range(1000):
            for _ in range(20):
                a = torch.tanh(a @ a)
            yield a

batches = iterators.BufferedIterator(20, Batches())
next(batches)
print("took a batch", flush=True)
"""


def run(mode):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=120)


def test_exit_with_a_busy_prefetching_thread_is_clean():
    proc = run("plugin")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "took a batch" in proc.stdout and "terminate called" not in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info >= (3, 14), reason="Python 3.14 hangs such threads at exit instead of ending them")
def test_without_the_plugin_the_same_exit_aborts():
    """The failure the plugin removes, so that the test above can fail."""
    proc = run("none")
    assert proc.returncode != 0 and "terminate called without an active exception" in proc.stderr
