"""What every benchmark shares: the machine's description, interleaved timing, peak memory, output files.

Timing: the machine is shared, so a benchmark never compares numbers taken at different times. All the
candidates of one setting are timed in the same run, interleaved (one sample of each in turn, the order
rotating), several times; each sample averages enough calls to last `min_time`, and the median sample
is reported. Ratios are taken between medians of the same run.

On a shared machine the load changes from second to second, and with two threads OpenMP stalls at each
parallel region whenever one of its threads waits for a core, which penalises many short kernels more than
a few long ones. `--threads 1 --clock cpu` measures instead the CPU time of a one-thread process: the time
the core spent on the work, not the time it waited for the core (memory and cache contention from other
processes still show).

Peak memory (CPU): torch.profiler with profile_memory=True records every allocation and free of the CPU
allocator, so the peak of the bytes that the measured call allocates and has not yet freed is exact and
does not depend on the load or on the allocator's caching. It counts tensors (kernel scratch buffers that
torch allocates as tensors included), not the interpreter or library code. Frees of tensors allocated
before the call (a previous call's gradients, set to None at the start of the next) are not counted: the
profiler sizes only the blocks it saw allocated, so counting them would make a layer's number depend on
what was measured before it. CUDA: torch.cuda.max_memory_allocated above what was allocated at the start.
"""

import ctypes
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import time

import torch


def add_common_args(parser, json_path, plot_path):
    parser.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda when there is one)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--malloc", default="reuse", choices=["reuse", "default"],
                        help="reuse: keep freed memory in the heap (see common.keep_freed_memory); default: glibc's")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="wall time, or the process's CPU time (meaningful with --threads 1 on a CPU)")
    parser.add_argument("--json", default=json_path, help="where to write the results (JSON)")
    parser.add_argument("--plot", default=plot_path, help="where to write the plot (PNG); '' for none")


def keep_freed_memory():
    """glibc's malloc hands every block above 32 MB back to the OS when it is freed, and the next one
    faults its pages in again, one 4 KB page at a time, stalling every thread (at N = 16384 this took a
    third of EVA's layer time with two threads). Serving all sizes from the heap and never trimming it
    (mallopt M_MMAP_MAX = 0, M_TRIM_THRESHOLD = 2 GB) reuses freed memory, as the caching allocators of
    jemalloc, tcmalloc or CUDA do. Returns whether it applied (glibc only)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-4, 0)) and bool(libc.mallopt(-1, 2**31 - 1))
    except (OSError, AttributeError):
        return False


def setup(args):
    """Applies --threads, --seed and --malloc; returns the torch.device of --device."""
    if args.malloc == "reuse":
        args.malloc = "reuse" if keep_freed_memory() else "default (mallopt unavailable)"
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(args.device)


def machine(device):
    """The machine a result was measured on, and the commit and date it measured (the pages name both)."""
    info = {
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
        "device": str(device),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average_at_start": _load_average(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def commit():
    """The repository's commit, marked where tracked files differ from it; "unknown" without git."""
    git = ["git", "-C", os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    return (head + (" (with uncommitted changes)" if dirty else "")) or "unknown"


def _cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def _load_average():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on every platform
        return None


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(kind):
    """wall: time.perf_counter; cpu: the process's CPU time, which on one thread is the time the core
    spent on it, whatever it waited for the core (robust to a shared machine's load; module docstring)."""
    return time.process_time if kind == "cpu" else time.perf_counter


def time_interleaved(candidates, device, repeats=5, min_time=0.2, budget=float("inf"), timer=time.perf_counter):
    """candidates: name -> callable (one call = one measured operation). Returns name -> list of seconds
    per call, one entry per repeat, taken in turn with the other candidates (see the module docstring).
    Fewer repeats (3 at least) are taken where the slowest candidate would exceed `budget` seconds."""
    names = list(candidates)
    number, slowest = {}, 0.0
    for name in names:  # warm-up call, which also sets how many calls one sample averages
        start = timer()
        candidates[name]()
        synchronize(device)
        elapsed = timer() - start
        number[name] = max(1, math.ceil(min_time / max(elapsed, 1e-6)))
        slowest = max(slowest, elapsed * number[name])
    if slowest * repeats > budget:
        repeats = max(3, int(budget / slowest))
    samples = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = timer()
            for _ in range(number[name]):
                candidates[name]()
            synchronize(device)
            samples[name].append((timer() - start) / number[name])
    return samples


def median(values):
    return statistics.median(values)


def peak_memory(fn, device):
    """Peak bytes of the tensors fn allocates and holds at once (CPU; CUDA: above those live when it starts;
    module docstring)."""
    if device.type == "cuda":
        synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch._C._profiler import _EventType

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            events.append((event.start_time_ns, event.extra_fields.ptr, event.extra_fields.alloc_size))
    live, total, peak = {}, 0, 0
    for _, ptr, size in sorted(events, key=lambda e: (e[0], e[2] > 0)):  # at one time, a block is freed before reused
        if size > 0:
            live[ptr] = size
            total += size
            peak = max(peak, total)
        elif ptr in live:  # (a free of a block from before fn is not counted)
            total -= live.pop(ptr)
    return peak


def write_json(path, data):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def figure(ncols, width=5.0, height=3.8):
    """A row of matplotlib axes on a non-interactive backend."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's import sets the root logger to DEBUG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def save_figure(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)


def fairseq_json_records(log, kind):
    """The JSON records that fairseq logs with --log-format json for `kind` (train_inner, valid, train)."""
    records = []
    for line in log.splitlines():
        match = re.search(r"\|\s*" + kind + r"\s*\|\s*(\{.*\})\s*$", line) or re.search(
            r"\[" + kind + r"\]\[INFO\] - (\{.*\})\s*$", line
        )  # the second form: fairseq-hydra-train's logging
        if match:
            records.append({k: _number(v) for k, v in json.loads(match.group(1)).items()})
    return records


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value
