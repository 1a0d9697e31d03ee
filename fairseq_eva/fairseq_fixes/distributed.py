"""Refusing the silent-duplicate launch: torchrun starts N processes, fairseq trains N separate copies.

fairseq 0.12 takes the world size from torchrun's environment only when its own
`distributed_world_size` already says more than 1, and that option defaults to the number of visible
GPUs: 1 on the CPU (or on a one-GPU node), so `infer_init_method` returns before it looks at
WORLD_SIZE/RANK and every process trains alone as rank 0, writing the same checkpoints. (Passing the
world size alone does not help on the CPU either: fairseq then computes `rank % torch.cuda.device_count()`.)

fairseq's own options do work with torchrun: an explicit `env://` init method skips the inference, and
torch then reads MASTER_ADDR/MASTER_PORT from the environment (see `launch_options`; the training scripts
pass them). What fairseq cannot do is notice that it was launched by torchrun and is not using it:
`check_launch` does, and the plugin's models call it when they are built, which happens in every
process after fairseq has (or has not) joined the process group, for fairseq-train and
fairseq-hydra-train alike (the plugin module itself is imported before that by fairseq-train but after
it by fairseq-hydra-train, so importing is not the place). Every process meets the same refusal; the first
of each node (LOCAL_RANK 0) says it, as one line (a `UserError`), and the others wait silently for torchrun
to stop them when it fails (exiting with status 1 themselves after `wait` seconds), so that the message is
said once, and said: a process that exited at once could have torchrun stop the first before it speaks.
"""

import os
import signal
import sys
import time

import torch.distributed as dist

from ..errors import UserError


class LaunchError(UserError, RuntimeError):
    """torchrun's processes do not form one data-parallel group."""


def launcher_world_size(environ=os.environ):
    """The number of processes torchrun (or torch.distributed.launch) started, 1 outside such a launch."""
    return int(environ.get("WORLD_SIZE", "1") or 1)


def launch_options(world_size, cpu):
    """fairseq-hydra-train overrides that make each torchrun process join one data-parallel group."""
    opts = [
        f"distributed_training.distributed_world_size={world_size}",
        "distributed_training.distributed_init_method=env://",
        "distributed_training.distributed_rank=${oc.env:RANK}",
        "distributed_training.distributed_no_spawn=true",
    ]
    if cpu:  # NCCL needs GPUs; PyTorch's DDP wrapper as fairseq calls it (device_ids=[i]) needs them too
        opts += ["distributed_training.distributed_backend=gloo", "distributed_training.ddp_backend=legacy_ddp"]
    return opts


def check_launch(environ=os.environ, wait=120):
    """Stop with a clear error when a launcher started several processes that are not one group."""
    launched = launcher_world_size(environ)
    if launched <= 1:
        return
    joined = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if joined == launched:
        return
    if environ.get("LOCAL_RANK", "0") != "0":
        # the node's first process says why, and torchrun then stops this one with SIGTERM: exit through
        # Python's exit handlers (they remove the empty --save-dir, fairseq_eva/fairseq_fixes/save_dir.py)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        time.sleep(wait)
        raise SystemExit(1)
    opts = " ".join(f"'{o}'" if "$" in o else o for o in launch_options(launched, cpu=True))
    raise LaunchError(
        f"torchrun started {launched} processes (WORLD_SIZE={launched}) but this one trains in a group of "
        f"{joined}: each process would train its own copy of the model as rank 0 and write the same "
        f"checkpoints. fairseq ignores torchrun's environment when distributed_world_size is 1 (its default "
        f"on the CPU or on a single GPU). Pass, to fairseq-hydra-train: {opts} (the last two only on the "
        f"CPU), as scripts/train_*.sh do; to fairseq-train: --distributed-world-size {launched} "
        f"--distributed-init-method env:// --distributed-rank -1 (torch then reads torchrun's RANK) "
        f"--distributed-no-spawn, and on the CPU --distributed-backend gloo --ddp-backend legacy_ddp."
    )
