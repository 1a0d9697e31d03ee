"""Data-parallel training through fairseq's own distributed code, launched by torchrun, on the CPU (gloo).

Fast: the scripts' launch arithmetic and options (dry runs), the refusal of torchrun processes that are
not one group, atomic checkpoint copies. Slow (`make test-slow`): real 2-process and 2-"node" runs of the
training scripts for translation and the language model, their equality with 1 process and
update_freq 2, a rank killed mid-run, the rerun that resumes, and the plain torchrun command refused."""

import glob
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("fairseq")

from fairseq.file_io import PathManager  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401  (makes fairseq's checkpoint copies atomic)
from fairseq_eva.errors import UserError  # noqa: E402
from fairseq_eva.fairseq_fixes import checkpoint_safety  # noqa: E402
from fairseq_eva.fairseq_fixes.distributed import check_launch, launch_options  # noqa: E402
from fairseq_helpers import BIN, USER_DIR, cli_env, json_records, lm_data, translation_data  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**cli_env(), "PATH": str(BIN) + os.pathsep + os.environ["PATH"], "PYTHON": sys.executable, "NGPUS": "0"}


def script(name, *args, env=None, check=True, timeout=600):
    r = subprocess.run(["bash", f"scripts/{name}", *args], cwd=ROOT, env={**ENV, **(env or {})},
                       capture_output=True, text=True, timeout=timeout)
    r.log = r.stdout + r.stderr
    if check and r.returncode != 0:
        raise AssertionError(f"{name} {args} failed ({r.returncode}):\n{r.log[-6000:]}")
    return r


# --- fast: the launch arithmetic and options of the training scripts (dry runs) ---------------------------

@pytest.fixture
def fake_data(tmp_path):
    (tmp_path / "dict.txt").write_text("a 1\n")
    return str(tmp_path)


@pytest.mark.parametrize(
    "env, launcher, world, update_freq, cpu",
    [
        ({"NGPUS": "0"}, None, 1, 8, True),  # 4096 x 8 = 32768 tokens in one process
        ({"NGPUS": "0", "NPROC_PER_NODE": "2"}, "torchrun --standalone --nproc-per-node 2 ", 2, 4, True),
        ({"NGPUS": "0", "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1"},
         "torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29500 ", 2, 4, True),
        ({"NGPUS": "1"}, None, 1, 8, False),
        ({"NGPUS": "4", "NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"},
         "torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr 10.0.0.1 --master-port 1234 ", 8, 1, False),
    ],
)
def test_scripts_launch_one_process_group(env, launcher, world, update_freq, cpu, fake_data):
    out = script("train_wmt14.sh", "eva16", env={"DRY_RUN": "1", "DATA": fake_data, "SAVE_DIR": "/unused", **env}).stdout
    cmd = out.splitlines()[-1]
    assert f"{world} process(es)" in out and f"update_freq {update_freq}" in out
    assert f"distributed_world_size={world} " in cmd + " " and f"update_freq=[{update_freq}]" in cmd
    if launcher is None:  # one process: no torchrun, no process group
        assert cmd.startswith("+ fairseq-hydra-train ") and "env://" not in cmd
        return
    assert re.match(r"\+ " + re.escape(launcher) + r"\S*/fairseq-hydra-train --config-dir", cmd)
    # the options fairseq needs to join torchrun's processes: the same that the refusal names
    assert all(opt in shlex.split(cmd) for opt in launch_options(world, cpu))
    assert ("gloo" in cmd) == cpu and ("legacy_ddp" in cmd) == cpu


# --- fast: the refusal of torchrun processes that train separate copies -----------------------------------

def test_check_launch_refuses_processes_that_are_not_one_group(tmp_path):
    check_launch({})  # not launched by torchrun
    check_launch({"WORLD_SIZE": "1"})
    with pytest.raises(RuntimeError) as e:
        check_launch({"WORLD_SIZE": "2"})
    msg = str(e.value)
    assert "torchrun started 2 processes" in msg and "group of 1" in msg
    for opt in launch_options(2, cpu=True):  # what to pass, as the scripts pass it
        assert opt in msg
    assert "--distributed-world-size 2 --distributed-init-method env:// --distributed-rank -1" in msg
    assert isinstance(e.value, UserError)  # one line on the command line, no traceback
    # the node's other processes stop without repeating it
    with pytest.raises(SystemExit) as e:
        check_launch({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}, wait=0)
    assert e.value.code == 1
    with pytest.raises(RuntimeError, match="torchrun started 4 processes"):  # the first of the second node
        check_launch({"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0"})
    # a real (one-process) group: fine when torchrun started one process, refused when it started three
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        check_launch({"WORLD_SIZE": "1"})
        with pytest.raises(RuntimeError, match="torchrun started 3 processes .* group of 1"):
            check_launch({"WORLD_SIZE": "3"})
    finally:
        dist.destroy_process_group()


# --- fast: checkpoint copies are atomic -------------------------------------------------------------------

def test_checkpoint_copies_are_atomic(tmp_path, monkeypatch):
    assert PathManager.copy is checkpoint_safety.atomic_copy  # what fairseq's save_checkpoint calls
    src, dst = tmp_path / "checkpoint_1_2.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"new" * 1000)
    dst.write_bytes(b"old")
    assert PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == src.read_bytes() and not list(tmp_path.glob("*.tmp"))

    def killed_midway(a, b):  # writes part of the file, then fails (a full disk, a kill)
        with open(b, "wb") as f:
            f.write(open(a, "rb").read()[:10])
        raise OSError("interrupted")

    dst.write_bytes(b"old")
    monkeypatch.setattr(shutil, "copyfile", killed_midway)
    with pytest.raises(OSError):
        PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"old"  # the previous checkpoint, whole
    assert not PathManager.copy(str(src), str(dst))  # fairseq's semantics: no overwrite unless asked


# --- slow: real multi-process runs of the training scripts ------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TINY = {
    "wmt14": ["lr_scheduler.warmup_updates=2", "+model.encoder_layers=1", "+model.decoder_layers=1",
              "+model.encoder_embed_dim=32", "+model.decoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64",
              "+model.decoder_ffn_embed_dim=64", "+model.encoder_attention_heads=2", "+model.decoder_attention_heads=2"],
    "wikitext103": ["lr_scheduler.warmup_updates=2", "task.tokens_per_sample=64", "+model.decoder_layers=2",
                    "+model.decoder_embed_dim=32", "+model.decoder_input_dim=32", "+model.decoder_output_dim=32",
                    "+model.decoder_ffn_embed_dim=64", "+model.decoder_attention_heads=2",
                    "+model.adaptive_input_cutoff='200,500'", "+model.adaptive_softmax_cutoff='200,500'"],
}
EVA = {"wmt14": ("eva16", ["model.eva_window_size=4", "model.eva_num_chunks=2"]),
       "wikitext103": ("eva_16l", ["model.eva_window_size=16", "model.eva_chunk_size=4"])}
SOFTMAX = {"wmt14": "softmax", "wikitext103": "softmax_16l"}
NO_DROPOUT = {"wmt14": ["model.dropout=0", "model.attention_dropout=0"],
              "wikitext103": ["model.dropout=0", "model.attention_dropout=0", "+model.activation_dropout=0",
                              "+model.adaptive_softmax_dropout=0"]}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return {"wmt14": translation_data(tmp_path_factory)["bin"], "wikitext103": lm_data(tmp_path_factory)["bin"]}


def train(task, variant, save, data, overrides, **env):
    """The task's training script, 512 tokens a process and step, an effective batch of 1024 tokens."""
    env = {"DATA": str(data[task]), "SAVE_DIR": str(save), "MAX_TOKENS": "512", "TOTAL_TOKENS": "1024", **env}
    return script(f"train_{task}.sh", variant, "common.log_interval=1", *TINY[task], *overrides, env=env)


def start_two_nodes(task, variant, save, data, overrides):
    """Two "nodes" of one process each on this machine, as on two machines: NNODES=2 NODE_RANK=0|1."""
    port = str(free_port())
    env = {**ENV, "DATA": str(data[task]), "SAVE_DIR": str(save), "MAX_TOKENS": "512", "TOTAL_TOKENS": "1024",
           "NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    args = ["bash", f"scripts/train_{task}.sh", variant, "common.log_interval=1", *TINY[task], *overrides]
    return [subprocess.Popen(args, cwd=ROOT, env={**env, "NODE_RANK": str(r)}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for r in (0, 1)]


def two_nodes(*args):
    nodes = start_two_nodes(*args)
    logs = [p.communicate(timeout=600)[0] for p in nodes]
    assert all(p.returncode == 0 for p in nodes), "\n".join(log[-4000:] for log in logs)
    return logs


def checkpoint(save):
    return torch.load(os.path.join(save, "checkpoint_last.pt"), weights_only=True)


def parameters(save):
    model = checkpoint(save)["model"]  # (a positional embedding's empty _float_tensor holds no value)
    return {k: v for k, v in model.items() if v.is_floating_point() and not k.endswith("_float_tensor")}


def num_updates(save):
    return checkpoint(save)["optimizer_history"][-1]["num_updates"]


def assert_same_parameters(a, b):
    pa, pb = parameters(a), parameters(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        torch.testing.assert_close(pa[k], pb[k], rtol=1e-5, atol=1e-7, msg=k)


def joined(log, world):
    """Every process of the run joined one gloo group of `world` processes."""
    return all(f"initialized host {socket.gethostname()} as rank {r}" in log for r in range(world))


@pytest.mark.slow
@pytest.mark.parametrize("task", ["wmt14", "wikitext103"])
def test_two_processes_and_two_nodes_train_like_one_process_with_update_freq_2(task, data, tmp_path):
    # Without EVA's sampling and without dropout the three runs must be the same computation: the
    # same batches (rank r takes batches r, r+2, ...; update_freq 2 groups them in pairs), the gradients
    # summed over both and normalised by the total sample size.
    plain = ["optimization.max_update=4", *NO_DROPOUT[task]]
    one = train(task, SOFTMAX[task], tmp_path / "one", data, plain, NPROC_PER_NODE="1")
    two = train(task, SOFTMAX[task], tmp_path / "two", data, plain, NPROC_PER_NODE="2")
    nodes = two_nodes(task, SOFTMAX[task], tmp_path / "nodes", data, plain)
    assert "1 process(es)" in one.stdout and "update_freq 2" in one.stdout
    assert "2 process(es) (2 per node x 1 node(s)" in two.stdout and "update_freq 1" in two.stdout
    assert "2 process(es) (1 per node x 2 node(s)" in nodes[1] and "update_freq 1" in nodes[1]
    assert joined(two.log, 2) and joined(nodes[0] + nodes[1], 2) and "initialized host" not in one.log
    for save in ("one", "two", "nodes"):
        assert num_updates(tmp_path / save) == 4
        assert not glob.glob(str(tmp_path / save / "*.tmp"))
    # the same loss at every update, and the same parameters at the end
    losses = {name: [r["loss"] for r in json_records(log, "train_inner")]
              for name, log in (("one", one.log), ("two", two.log), ("nodes", nodes[0]))}
    assert len(losses["one"]) == 4 and losses["one"] == losses["two"] == losses["nodes"]
    assert_same_parameters(tmp_path / "one", tmp_path / "two")
    assert_same_parameters(tmp_path / "two", tmp_path / "nodes")

    # EVA samples noise in training (and the configs' dropout): fairseq seeds every rank's draws with
    # seed + updates, so 2 processes on one node and 2 nodes draw the same and give the same parameters
    variant, eva = EVA[task]
    train(task, variant, tmp_path / "eva_two", data, ["optimization.max_update=4", *eva], NPROC_PER_NODE="2")
    two_nodes(task, variant, tmp_path / "eva_nodes", data, ["optimization.max_update=4", *eva])
    assert_same_parameters(tmp_path / "eva_two", tmp_path / "eva_nodes")


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def worker(launcher_pid, rank):
    """The training process of global rank `rank` below a training script's process."""
    for pid in descendants(launcher_pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and any(e.startswith(b"LOCAL_RANK=") for e in environ):
            return pid
    raise AssertionError(f"no worker of rank {rank} below {launcher_pid}")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the worker processes through /proc")
def test_a_dead_rank_stops_the_run_and_a_rerun_resumes(data, tmp_path):
    save = tmp_path / "ckpt"
    every2 = ["checkpoint.save_interval_updates=2", "checkpoint.keep_interval_updates=1", *EVA["wmt14"][1]]
    nodes = start_two_nodes("wmt14", "eva16", save, data, ["optimization.max_update=100000", *every2])
    try:
        deadline = time.time() + 300
        while not (save / "checkpoint_last.pt").exists():  # (copied into place whole: see checkpoint_safety)
            assert time.time() < deadline and all(p.poll() is None for p in nodes), "no checkpoint"
            time.sleep(0.2)
        os.kill(worker(nodes[1].pid, 1), signal.SIGKILL)  # the process of node 1 dies
        killed = time.time()
        logs = [p.communicate(timeout=120)[0] for p in nodes]  # bounded: no silent hang
        stopped = time.time() - killed
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
    assert nodes[0].returncode != 0 and nodes[1].returncode != 0
    # gloo's error in node 0's process (closed or reset, depending on where the peer's socket was)
    assert re.search(r"gloo.*Connection (closed|reset) by peer", logs[0]), logs[0][-3000:]
    assert stopped < 60, stopped
    assert not glob.glob(str(save / "*.tmp"))

    # started again, the same command resumes from checkpoint_last.pt at the update it holds
    k = num_updates(save)
    assert k >= 2
    logs = two_nodes("wmt14", "eva16", save, data, [f"optimization.max_update={k + 2}", *every2])
    assert re.search(rf"Loaded checkpoint {save}/checkpoint_last.pt \(epoch \d+ @ {k} updates\)", logs[0])
    assert [int(r["num_updates"]) for r in json_records(logs[0], "train_inner")] == [k + 1, k + 2]
    assert num_updates(save) == k + 2


@pytest.mark.slow
def test_plain_torchrun_is_refused_and_the_suggested_flags_train(data, tmp_path):
    # the command of a new user: torchrun around fairseq-train, no distributed options
    plain = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(BIN / "fairseq-train"),
             str(data["wmt14"]), "--user-dir", USER_DIR, "--arch", "transformer_eva_tiny", "--cpu",
             "--distributed-backend", "gloo", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1024",
             "--max-update", "3", "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "1"]
    r = subprocess.run([*plain, "--save-dir", str(tmp_path / "plain")], env=ENV, capture_output=True, text=True,
                       timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode != 0
    # said once, as one line (not a traceback per process inside torchrun's report)
    said = [line for line in log.splitlines() if "torchrun started 2 processes" in line]
    assert len(said) == 1 and said[0].startswith("fairseq-train: error: torchrun started 2 processes (WORLD_SIZE=2) "
                                                 "but this one trains in a group of 1"), said
    assert "fairseq_eva/fairseq_fixes/distributed.py" not in log
    assert not (tmp_path / "plain").exists()  # nothing trained, no empty save dir left
    # the fairseq-train flags that the message names make one group of 2
    flags = ["--distributed-world-size", "2", "--distributed-init-method", "env://", "--distributed-rank", "-1",
             "--distributed-no-spawn", "--ddp-backend", "legacy_ddp", "--load-checkpoint-on-all-dp-ranks"]
    r = subprocess.run([*plain, *flags, "--save-dir", str(tmp_path / "fixed")], env=ENV, capture_output=True,
                       text=True, timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:]
    assert num_updates(tmp_path / "fixed") == 3
    assert log.count("initialized host") == 2  # both processes joined the group (it needs both to start)
