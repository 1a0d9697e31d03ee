"""docs/usage.md's example of the attention core without fairseq runs as written in a process where fairseq
cannot be imported, and imports nothing of fairseq."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = "<!-- runs without fairseq: tests/test_docs_examples.py -->"

# fairseq made unimportable (as where it is not installed): importlib finds no spec, and an import fails
RUN = """
import sys
sys.modules["fairseq"] = None
import torch
torch.set_num_threads(1)
exec(compile(sys.argv[1], "docs/usage.md", "exec"), {})
print("imported:", sorted(m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] == "fairseq"))
"""


def test_the_attention_core_example_runs_without_fairseq():
    usage = (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
    (code,) = re.findall(re.escape(MARKER) + r"\n```python\n(.*?)\n```", usage, flags=re.S)
    assert "key_padding_mask" in code and "cache=cache" in code and "EVAAttention(embed_dim=64, num_heads=4)" in code
    proc = subprocess.run([sys.executable, "-c", RUN, code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "imported: []", proc.stdout
