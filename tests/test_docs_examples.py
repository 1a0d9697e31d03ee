"""The README's example of the attention core in a PyTorch model runs as written in a process where fairseq
cannot be imported, and imports nothing of fairseq."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARKER = "<!-- runs without fairseq: tests/test_docs_examples.py -->"

# fairseq made unimportable (as where it is not installed): importlib finds no spec, and an import fails
RUN = """
import sys
sys.modules["fairseq"] = None
import torch
torch.set_num_threads(1)
exec(compile(sys.argv[1], "README.md", "exec"), {})
print("imported:", sorted(m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] == "fairseq"))
"""


def test_the_attention_core_example_runs_without_fairseq():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(re.escape(MARKER) + r"\n```python\n(.*?)\n```", readme, flags=re.S)
    assert "key_padding_mask" in code and "cache=cache" in code and "EVAAttention(embed_dim=64, num_heads=4)" in code
    proc = subprocess.run([sys.executable, "-c", RUN, code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "imported: []", proc.stdout


# fairseq installed: the README's code leaves fairseq, Python's excepthook and exit handlers as they were, and so
# does importing the package again after fairseq (it is not imported twice); fairseq's PathManager stays its own
UNCHANGED = """
import atexit, sys
import torch
torch.set_num_threads(1)
hook, handlers = sys.excepthook, atexit._ncallbacks()  # torch registers its own exit handlers on import
exec(compile(sys.argv[1], "README.md", "exec"), {})
assert sys.excepthook is hook and atexit._ncallbacks() == handlers
assert "fairseq" not in sys.modules and "fairseq_eva.fairseq_fixes" not in sys.modules, sorted(sys.modules)
from fairseq import checkpoint_utils  # (fairseq registers exit handlers of its own)
from fairseq.file_io import PathManager
import fairseq_eva
assert sys.excepthook is hook
assert "fairseq_eva.fairseq_fixes" not in sys.modules and "fairseq_eva.plugin" not in sys.modules
assert not hasattr(checkpoint_utils.load_checkpoint_to_cpu, "_fairseq_eva_chain")
assert not hasattr(PathManager.copy, "_fairseq_eva_chain")
print("unchanged")
"""

# what fairseq's tools do: import fairseq, then the --user-dir; and the plugin imported by name from Python
LOADED = """
import sys
hook = sys.excepthook
{imports}
from fairseq.file_io import PathManager
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq_eva.fairseq_fixes import checkpoint_safety
assert sys.excepthook is not hook and PathManager.copy is checkpoint_safety.atomic_copy
assert "transformer_eva_tiny" in ARCH_MODEL_REGISTRY
print("installed")
"""


def python(code, *args):
    """The last line that `python -c code args` prints, in a fresh interpreter (it must succeed)."""
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_the_attention_core_changes_nothing_of_fairseq_or_python_where_fairseq_is_installed():
    pytest.importorskip("fairseq")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(re.escape(MARKER) + r"\n```python\n(.*?)\n```", readme, flags=re.S)
    assert python(UNCHANGED, code) == "unchanged"


@pytest.mark.parametrize("imports", ["import fairseq\nimport fairseq_eva", "import fairseq_eva.plugin"])
def test_the_plugin_installs_when_fairseq_loads_it_or_when_imported_by_name(imports):
    pytest.importorskip("fairseq")
    assert python(LOADED.format(imports=imports)) == "installed"
