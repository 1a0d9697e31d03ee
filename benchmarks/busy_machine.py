"""Training on a shared CPU: how much a second busy process slows the README's language-model command, and
which OpenMP setting avoids the slowdown.

torch runs its CPU operators on OpenMP threads, one per core, and the C loop kernel shares them. A training
step is thousands of short parallel regions, each ending when its slowest thread is done. With GNU OpenMP's
default wait policy a thread that has finished its share spins (GOMP_SPINCOUNT, 300,000 iterations) before it
sleeps: on a free machine that saves a wake-up, but when another process wants a core the spinning threads
of both processes take the cores the working threads need, and every region waits for a time slice.
OMP_WAIT_POLICY=PASSIVE makes a waiting thread sleep at once; OMP_NUM_THREADS=1 has no region to wait in.
Both are read when OpenMP starts (when torch is imported), so they are set in the environment of the
command, not by the plugin.

The run: the README's language-model command (transformer_lm_eva_tiny, causal EVA, blocks of 128 tokens,
batches of 2048) for --updates updates on the bundled English prose, under each setting: alone; beside a
neighbour, another torch process that multiplies and normalises 256 x 256 matrices in a loop (what a second
training run or a test suite does) with OpenMP's defaults; and beside the same neighbour under the same
setting (every process on the machine started with it). Runs interleave (setting, machine state) pairs,
the order rotating; the medians of --repeats runs are reported, as ratios to the default setting alone in
the same run. The neighbour's rate (loops a second) is reported too, against its rate alone: a setting that
only takes the cores from the neighbour is not a fix.

    python -m benchmarks.busy_machine --repeats 3   # the record of docs/results.md (15 minutes on 2 cores)
"""

import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
SETTINGS = {  # name -> environment added to the training command's
    "default": {},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
}
ALONE, BESIDE_DEFAULT, BESIDE_SAME = "alone", "beside a busy torch process", "beside one with the same setting"
STATES = (ALONE, BESIDE_DEFAULT, BESIDE_SAME)
NEIGHBOUR = """
import signal, sys, time, torch
loops, start = 0, time.perf_counter()
def report(*_):
    print(loops / (time.perf_counter() - start), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, report)
a = torch.randn(256, 256)
print("ready", flush=True)
while True:
    torch.softmax(a @ a, -1).sum()
    loops += 1
"""


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="binarised LM data (fairseq-preprocess output); default: the bundled "
                        "prose, prepared as the demo prepares it, in a temporary folder")
    parser.add_argument("--updates", type=int, default=60, help="updates per training run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per (setting, machine state)")
    parser.add_argument("--neighbour-seconds", type=float, default=10.0,
                        help="how long the neighbour's rate alone is measured, before and after the runs")
    parser.add_argument("--out", default="benchmarks/results/busy_machine", help="record folder ('' for none)")
    return parser.parse_args(argv)


def environment(extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    return {**env, **extra}


def prepare(work):
    """The bundled prose as the demo prepares it (Wikitext-103 recipe, words seen twice or more)."""
    dest = os.path.join(work, "lm")
    env = environment({"WORK": os.path.join(work, "prep"), "DEST": dest, "THRESHOLD": "2"})
    subprocess.run(["bash", os.path.join(REPO, "data_prep", "prepare_wikitext103.sh"), "--raw",
                    os.path.join(REPO, "data", "sample", "doc_en")], env=env, check=True, capture_output=True)
    return dest


def train_command(data, updates):
    """The README's language-model command, stopped after `updates` updates, saving nothing."""
    return ["fairseq-train", data, "--user-dir", os.path.join(REPO, "fairseq_eva"), "--task", "language_modeling",
            "--arch", "transformer_lm_eva_tiny", "--tokens-per-sample", "128", "--share-decoder-input-output-embed",
            "--optimizer", "adam", "--lr", "0.002", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "60",
            "--max-tokens", "2048", "--max-update", str(updates), "--no-save", "--disable-validation",
            "--log-format", "simple", "--log-interval", "1000"]


def start_neighbour(extra=None):
    """The neighbour, once it computes (torch imported, its SIGTERM report in place)."""
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], env=environment(extra or {}), stdout=subprocess.PIPE,
                            text=True)
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"the neighbour process did not start (exit status {proc.wait()})")
    return proc


def stop_neighbour(proc):
    """Its loops a second since it started."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return float(out.strip())


def neighbour_alone(seconds):
    proc = start_neighbour()
    time.sleep(seconds)
    return stop_neighbour(proc)


def train_seconds(data, updates, setting, state):
    """fairseq's "done training in X seconds" (the training loop, without start-up), and the neighbour's
    rate during the run (None when alone)."""
    neighbour = None if state == ALONE else start_neighbour(SETTINGS[setting] if state == BESIDE_SAME else {})
    try:
        proc = subprocess.run(train_command(data, updates), env=environment(SETTINGS[setting]), cwd=REPO,
                              capture_output=True, text=True)
    finally:
        rate = stop_neighbour(neighbour) if neighbour else None
    match = re.search(r"done training in ([0-9.]+) seconds", proc.stderr + proc.stdout)
    if proc.returncode != 0 or not match:
        raise SystemExit(f"fairseq-train failed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}")
    return float(match.group(1)), rate


def measure(data, updates, repeats, neighbour_seconds):
    pairs = [(setting, state) for state in STATES for setting in SETTINGS
             if not (setting == "default" and state == BESIDE_SAME)]  # the same as beside the default neighbour
    seconds = {pair: [] for pair in pairs}
    rates = {pair: [] for pair in pairs}
    alone = [neighbour_alone(neighbour_seconds)]
    for r in range(repeats):
        for pair in pairs[r % len(pairs):] + pairs[: r % len(pairs)]:
            s, rate = train_seconds(data, updates, *pair)
            seconds[pair].append(s)
            if rate is not None:
                rates[pair].append(rate)
            print(f"  {pair[0]:<24} {pair[1]:<33} {s:6.1f} s" + (f"  neighbour {rate:.0f} loops/s" if rate else ""),
                  flush=True)
    alone.append(neighbour_alone(neighbour_seconds))
    return seconds, rates, alone


def rows(seconds, rates, alone):
    base = common.median(seconds[("default", ALONE)])
    neighbour_alone_rate = common.median(alone)
    out = []
    for (setting, state), values in seconds.items():
        row = {"setting": setting, "machine": state, "seconds": [round(v, 2) for v in values],
               "median_s": round(common.median(values), 2),
               "ratio_to_default_alone": round(common.median(values) / base, 2)}
        if rates[(setting, state)]:
            row["neighbour_rate_ratio"] = round(common.median(rates[(setting, state)]) / neighbour_alone_rate, 2)
        out.append(row)
    return out


def table(result_rows, updates):
    lines = [f"| setting | machine | training s ({updates} updates) | x default alone | neighbour's speed |",
             "|---|---|---|---|---|"]
    for row in result_rows:
        rate = f"{row['neighbour_rate_ratio']:.2f} of alone" if "neighbour_rate_ratio" in row else "-"
        lines.append(f"| {row['setting']} | {row['machine']} | {row['median_s']:.1f} | "
                     f"{row['ratio_to_default_alone']:.2f} | {rate} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        data = args.data or prepare(work)
        print(f"{(len(SETTINGS) * len(STATES) - 1) * args.repeats} training runs of {args.updates} updates", flush=True)
        seconds, rates, alone = measure(data, args.updates, args.repeats, args.neighbour_seconds)
    result_rows = rows(seconds, rates, alone)
    print(table(result_rows, args.updates))
    if args.out:
        import torch

        command = "python -m benchmarks.busy_machine " + " ".join(argv if argv is not None else sys.argv[1:])
        info = common.machine(torch.device("cpu"))
        common.write_json(os.path.join(args.out, "meta.json"), {
            "command": command.strip(), "commit": common.commit(), "date": datetime.date.today().isoformat(),
            "device": f"{info['cpu']}, {info['cpu_count']} cores; torch {info['torch']}"})
        common.write_json(os.path.join(args.out, "results.json"), {
            "updates": args.updates, "repeats": args.repeats, "neighbour_alone_loops_per_s": alone,
            "machine": info, "rows": result_rows})


if __name__ == "__main__":
    main()
