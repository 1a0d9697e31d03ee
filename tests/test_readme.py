"""The README's examples, read from README.md itself, so that they cannot drift.

The code blocks marked `<!-- runs on the demo data: tests/test_readme.py -->` are
- parsed by fairseq's own command-line parsers, and the fairseq-hydra-train command's overrides checked
  against its config and fairseq's config classes (fast: a misspelt or removed option fails here);
- run as written (slow: about 2.5 CPU minutes, mostly the tools' start-up) in a scratch folder laid out
  as the repository after `make demo`: `fairseq_eva` and `configs` (links into the repository) and
  `outputs/demo/data-bin/{mt,lm}`, built by the demo's own data-prep scripts from a cut of data/sample
  (fewer training lines, the whole 500-sentence test set). Each shell command must succeed, and what it
  prints is checked: fairseq-generate translates every test sentence, fairseq-interactive one line,
  fairseq-hydra-train trains and saves where its config's save_dir is overridden to, ...
"""

import math
import os
import re
import shlex
import subprocess
import sys

import pytest

pytest.importorskip("fairseq")

from fairseq_helpers import REPO, SAMPLE, cli_env  # noqa: E402

MARKER = "<!-- runs on the demo data: tests/test_readme.py -->"
TRAIN_LINES, VALID_LINES = 600, 60


def marked_blocks(language):
    """The marked code blocks of README.md in `language`, as text."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(re.escape(MARKER) + r"\n```(\w+)\n(.*?)\n```", readme, flags=re.S)
    return [code for lang, code in blocks if lang == language]


def shell_commands(block):
    """The commands of a bash block: comments dropped, backslash-continued lines joined."""
    commands, current = [], ""
    for line in block.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            commands.append(current)
            current = ""
    assert not current, "a command ends with a backslash"
    return commands


def test_the_readme_marks_its_examples():
    bash, python = marked_blocks("bash"), marked_blocks("python")
    assert len(bash) == 1 and len(python) == 1
    tools = [command.split(" | ")[-1].split()[0] for command in shell_commands(bash[0])]
    assert tools == ["fairseq-train", "fairseq-generate", "fairseq-interactive", "fairseq-train", "fairseq-eval-lm",
                     "fairseq-hydra-train"]


PARSERS = {"fairseq-train": "get_training_parser", "fairseq-generate": "get_generation_parser",
           "fairseq-interactive": "get_interactive_generation_parser", "fairseq-eval-lm": "get_eval_lm_parser"}


def check_hydra_command(args):
    """The config exists, and every override is valid hydra syntax and names a key that the config or
    fairseq's config classes have (the `model.` and `task.` groups are free dicts: the config's keys)."""
    import dataclasses

    import yaml
    from fairseq.dataclass.configs import FairseqConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser

    assert args[:2] == ["--config-dir", "configs"] and args[2] == "--config-name", args
    config = yaml.safe_load((REPO / "configs" / f"{args[3]}.yaml").read_text(encoding="utf-8"))
    defaults = FairseqConfig()  # its groups' defaults are the groups' dataclasses
    for override in OverridesParser.create().parse_overrides(args[4:]):
        group, key = override.key_or_group.split(".", 1)
        if group in ("model", "task"):
            assert key == "_name" or key in config[group], override.key_or_group
        else:
            assert key in {f.name for f in dataclasses.fields(getattr(defaults, group))}, override.key_or_group
    return config


def test_readme_commands_parse(monkeypatch):
    from fairseq import options

    monkeypatch.chdir(REPO)  # --user-dir fairseq_eva, as from the repository root
    for command in shell_commands(marked_blocks("bash")[0]):
        tool, *args = shlex.split(command.split(" | ")[-1])
        if tool == "fairseq-hydra-train":
            assert check_hydra_command(args)["common"]["user_dir"] == "fairseq_eva"
            continue
        parsed = options.parse_args_and_arch(getattr(options, PARSERS[tool])(), args)
        assert parsed.user_dir == "fairseq_eva" and parsed.data.startswith("outputs/demo/data-bin/")
        if tool == "fairseq-train":
            assert parsed.arch in ("transformer_eva_tiny", "transformer_lm_eva_tiny")


@pytest.fixture(scope="module")
def demo_layout(tmp_path_factory):
    """A folder laid out as the repository after `make demo`, with small data made by the demo's recipes."""
    root = tmp_path_factory.mktemp("readme")
    (root / "fairseq_eva").symlink_to(REPO / "fairseq_eva")
    (root / "configs").symlink_to(REPO / "configs")
    env = {**cli_env(), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
           "PYTHON": sys.executable, "WORKERS": "1",
           # `import fairseq_eva` finds the linked folder, which the checkpoints name as their user dir
           "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    cut = root / "sample"
    for name, lines in (("train", TRAIN_LINES), ("valid", VALID_LINES), ("test", None)):
        for folder, suffixes in (("po_en_de", (".en", ".de")), ("doc_en", (".txt",))):
            (cut / folder).mkdir(parents=True, exist_ok=True)
            for suffix in suffixes:
                text = (SAMPLE / folder / f"{name}{suffix}").read_text(encoding="utf-8").splitlines()[:lines]
                (cut / folder / f"{name}{suffix}").write_text("\n".join(text) + "\n", encoding="utf-8")
    data = root / "outputs" / "demo" / "data-bin"
    for script, dest, extra in (("prepare_wmt14_en_de.sh", "mt", {"BPE_TOKENS": "300"}),
                                ("prepare_wikitext103.sh", "lm", {"THRESHOLD": "2"})):
        subprocess.run(["bash", str(REPO / "data_prep" / script), "--raw", str(cut / ("po_en_de" if dest == "mt" else "doc_en"))],
                       cwd=root, env={**env, "WORK": str(root / "work" / dest), "DEST": str(data / dest), **extra},
                       check=True, capture_output=True, timeout=600)
    return root, env


def run_in(layout, args, **kwargs):
    root, env = layout
    proc = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=900, **kwargs)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_readme_commands_run_as_written(demo_layout):
    root, _ = demo_layout
    test_sentences = len((root / "sample" / "po_en_de" / "test.en").read_text().splitlines())
    assert test_sentences == 500
    for command in shell_commands(marked_blocks("bash")[0]):
        proc = run_in(demo_layout, ["bash", "-o", "pipefail", "-c", command])
        out = proc.stdout + proc.stderr
        tool = command.split(" | ")[-1].split()[0]
        save = re.search(r"(?:--save-dir |checkpoint\.save_dir=)(\S+)", command)
        if tool == "fairseq-train":
            assert (root / save.group(1) / "checkpoint_best.pt").is_file()
            # also a checkpoint every N updates within an epoch (Ctrl-C loses at most N), the latest one kept
            every = int(re.search(r"--save-interval-updates (\d+)", command).group(1))
            kept = [int(p.stem.split("_")[2]) for p in (root / save.group(1)).glob("checkpoint_*_*.pt")]
            assert len(kept) == 1 and kept[0] % every == 0, kept
        elif tool == "fairseq-generate":  # every sentence of the test set, each once
            ids = sorted(int(line.split("\t")[0][2:]) for line in proc.stdout.splitlines() if line.startswith("H-"))
            assert ids == list(range(test_sentences))
            assert re.search(r"Generate test with beam=4: BLEU4 = \d+\.\d+", out)
        elif tool == "fairseq-interactive":
            hypotheses = re.findall(r"^D-0\t(\S+)\t(.*)$", proc.stdout, flags=re.M)
            assert len(hypotheses) == 1 and float(hypotheses[0][0]) < 0
            assert "@@" not in hypotheses[0][1]  # BPE undone
        elif tool == "fairseq-hydra-train":  # the override's save dir, the config's log beside it
            assert (root / save.group(1) / "checkpoint_last.pt").is_file()
            log = (root / save.group(1) / "hydra_train.log").read_text()
            updates = int(re.search(r"optimization\.max_update=(\d+)", command).group(1))
            assert "done training" in log and f'"train_num_updates": "{updates}"' in log, log[-2000:]
        elif tool == "fairseq-eval-lm":
            ppl = re.search(r"Perplexity: (\d+\.\d+)", out)
            assert ppl and 1 < float(ppl.group(1)) < 1e6
    # the hub example, after the commands that trained its models
    lines = run_in(demo_layout, [sys.executable, "-c", marked_blocks("python")[0]]).stdout.strip().splitlines()
    assert len(lines) == 4, lines
    one, batch, sample, ppl = lines
    assert one.strip() and "@@" not in one
    assert batch.startswith("[") and batch.count("'") + batch.count('"') >= 4  # a list of two strings
    assert sample.startswith("The file")
    assert math.isfinite(float(ppl)) and float(ppl) > 1
