"""fairseq_eva/fairseq_fixes/quiet_logs.py, and the plugin's other lines: importing the plugin prints nothing and
leaves the caller's logging as it was,
fairseq-train and the hub interface print none of fairseq's batch-iterator lines and keep the rest of fairseq's
log, and the C loop's warning where no compiler is found names no cache."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("fairseq")

from fairseq_eva.attention.kernels.c_loop import build  # noqa: E402
from fairseq_helpers import REPO, USER_DIR, cli_env, run, translation_data  # noqa: E402

TENSORBOARDX = "Please install tensorboardX"
BATCH_LINES = ("can_reuse_epoch_itr", "reuse_dataloader", "rebuild_batches", "creating new batches")


def python(code, env=None):
    """`python -c code` in a fresh process from the repository root; its merged output."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**cli_env(), "PYTHONPATH": str(REPO), **(env or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


# fairseq's import configures the root logger as a side effect; a user who logs at INFO configures it the same way
AFTER_IMPORT = """
import logging
logging.basicConfig(level=logging.INFO, force=True)
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.criterions import CRITERION_REGISTRY
assert "transformer_eva_tiny" in ARCH_MODEL_REGISTRY and "adaptive_loss_fp32_sum" in CRITERION_REGISTRY
logging.getLogger("fairseq.tasks.text_to_speech").info("another line of that task")
logging.getLogger("fairseq.tasks.fairseq_task").warning("a warning of FairseqTask")
logging.getLogger("fairseq.tasks.fairseq_task").info("an INFO line of FairseqTask")
logging.getLogger("fairseq_cli.train").info("an INFO line of the training loop")
"""


@pytest.mark.slow
def test_importing_the_plugin_prints_nothing_and_registers_everything():
    assert TENSORBOARDX in python("import fairseq")  # what fairseq prints without the plugin
    assert python("from fairseq_eva.attention import EVAAttention") == ""
    unconfigured = "import logging, fairseq_eva.plugin; root = logging.getLogger(); print(root.handlers, root.level)"
    assert python(unconfigured) == "[] 30\n"  # fairseq's import configured the root logger (DEBUG, stderr)
    out = python("import fairseq_eva.plugin" + AFTER_IMPORT)
    lines = out.splitlines()
    assert TENSORBOARDX not in out and "an INFO line of FairseqTask" not in out, out
    for kept in ("another line of that task", "a warning of FairseqTask", "an INFO line of the training loop"):
        assert sum(kept in line for line in lines) == 1, out


HUB = """
import logging, sys
import fairseq_eva.plugin
from fairseq.models.transformer import TransformerModel
logging.basicConfig(level=logging.INFO, force=True)
save, data, spm = sys.argv[1:]
model = TransformerModel.from_pretrained(save, checkpoint_file="checkpoint_last.pt", data_name_or_path=data,
                                         bpe="sentencepiece", sentencepiece_model=spm)
print("TRANSLATION", model.translate("Open the file"), flush=True)
logging.getLogger("fairseq.tasks.fairseq_task").setLevel(logging.NOTSET)  # as without the plugin
print("WITHOUT", flush=True)
model.translate("Open the file")
"""


@pytest.mark.slow
def test_training_and_the_hub_print_no_batch_iterator_lines(tmp_path_factory, tmp_path):
    data = translation_data(tmp_path_factory)
    proc = run("fairseq-train", data["bin"], "--user-dir", USER_DIR, "--cpu", "--task", "translation",
               "--arch", "transformer_eva_tiny", "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3",
               "--max-tokens", "1024", "--max-update", 2, "--log-interval", 1, "--save-dir", tmp_path,
               "--no-epoch-checkpoints", "--save-interval-updates", 1, "--validate-interval-updates", 1,
               "--max-tokens-valid", "4096", cwd=tmp_path)
    assert [line for line in proc.log.splitlines() if any(b in line for b in BATCH_LINES)] == [], proc.log
    for kept in ("begin training epoch 1", "| valid on 'valid' subset |", "Saved checkpoint", "done training"):
        assert kept in proc.log, proc.log

    script = tmp_path / "hub.py"
    script.write_text(HUB)
    out = run("python", script, tmp_path, data["bin"], data["spm"], env={"PYTHONPATH": str(REPO)}).log
    with_plugin, _, without = out.partition("WITHOUT")
    assert "TRANSLATION" in with_plugin and TENSORBOARDX not in out, out
    assert not any(b in with_plugin for b in BATCH_LINES), with_plugin
    assert all(b in without for b in BATCH_LINES[1:]), without  # fairseq's own lines, for the same call


def test_no_compiler_warns_once_and_names_no_cache(tmp_path):
    """CC names no compiler and the cache folder is new: one warning says so and what runs instead; nothing was
    cached, so it names no cache, and no cache folder is made."""
    code = (f"import importlib.util, warnings; spec = importlib.util.spec_from_file_location('build', {build.__file__!r})\n"
            "build = importlib.util.module_from_spec(spec); spec.loader.exec_module(build)\n"
            "assert build.library() is None and build.library() is None")
    out = python(code, env={"CC": "/nonexistent/cc", "XDG_CACHE_HOME": str(tmp_path), "PYTHONWARNINGS": "default"})
    warnings = [line for line in out.splitlines() if "fairseq_eva:" in line]
    assert len(warnings) == 1, out
    assert "no C compiler: '/nonexistent/cc' is not on the PATH" in warnings[0]
    assert "runs the blockwise kernel" in warnings[0] and "cache" not in warnings[0].lower(), warnings[0]
    assert os.listdir(tmp_path) == []
