"""The GPU check's command line: the parts chosen (--parts, --quick) run one after the other, each within its
deadline, with what they share (Check); the result written after every row."""

import argparse
import concurrent.futures
import math
import os
import sys
import time
import traceback

import torch

from benchmarks import common
from benchmarks.gpu_check import parts
from benchmarks.gpu_check.fairseq_runs import PAPER_CONFIGS, prepare_data
from benchmarks.gpu_check.layers import auto_kernel
from benchmarks.gpu_check.parts import PARTS, profile
from benchmarks.gpu_check.plan import BUDGETS, QUICK_BUDGETS, QUICK_CALL, QUICK_PARTS, REPO, number, settings
from benchmarks.gpu_check.report import failed, summary, versions, write


class Check:
    """What the parts share: the command's arguments, the settings, the device and dtype, the result (written
    again after every row) and the folders; the sample binarised once, by the first part that needs it."""

    def __init__(self, args, settings, device, dtype, result, out, work, binarising):
        self.args, self.settings, self.device, self.dtype = args, settings, device, dtype
        self.result, self.out, self.work, self.binarising = result, out, work, binarising
        self._data = {}

    def table(self, key, derive=None, **fields):
        """A part's table in the result, result[key] = {**fields, "rows": [], "ratios": [] with derive}; returns
        emit(rows): the rows (and derive(rows), the ratios) into it, and the result written."""
        part = self.result[key] = {**fields, "rows": [], **({"ratios": []} if derive else {})}

        def emit(rows):
            part.update(rows=rows, **({"ratios": derive(rows)} if derive else {}))
            write(self.result, self.out)

        return emit

    def data(self):
        """{"mt": folder, "lm": folder}: the binarised sample."""
        if not self._data:
            self._data.update(prepare_data(self.work) if self.binarising is None else self.binarising.result())
        return self._data

    def lengths(self, default):
        """The speed tables' N: `default`, or those of --lengths among them."""
        return [N for N in default if N in self.args.lengths] if self.args.lengths else default


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=sys.modules[__package__].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/gpu", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--work", default=os.path.join(REPO, "work", "gpu_check"),
                        help="folder for the binarised sample, the fairseq logs and run folders (default: work/gpu_check)")
    parser.add_argument("--smoke", action="store_true", help="every part on the CPU at tiny sizes (the tests run this)")
    parser.add_argument("--quick", action="store_true",
                        help=f"the quick profile, one job of {QUICK_CALL // 60} minutes: {', '.join(QUICK_PARTS)} "
                             "(the Triton kernel in float32 and bfloat16); with --smoke, on the CPU")
    parser.add_argument("--parts", nargs="+", choices=PARTS, help="the parts to run (default: all, or the quick profile's)")
    parser.add_argument("--budget", type=float,
                        help="seconds for the whole check; no part starts a row after it (default: the parts' budgets, "
                             f"{sum(BUDGETS.values())} s, or {sum(QUICK_BUDGETS.values())} s with --quick)")
    parser.add_argument("--speed-kernel", default="auto", help="the EVA kernel of the speed tables (default: auto)")
    parser.add_argument("--lengths", type=int, nargs="+", help="only these N in the speed tables (default: all)")
    parser.add_argument("--configs", nargs="+", choices=[c for pair in PAPER_CONFIGS for c in (pair[0], pair[2])],
                        help="the paper configs to train (default: all)")
    args = parser.parse_args(argv)
    parts, budgets = profile(args.quick)
    outside = [p for p in args.parts or () if p not in parts]
    if outside:
        parser.error(f"--quick runs {', '.join(parts)}; not {', '.join(outside)}")
    args.parts = [p for p in parts if p in (args.parts or parts)]  # the profile's order
    if args.budget is None:
        args.budget = float(sum(budgets[p] for p in args.parts))
    return args



def main(argv=None):
    args = parse_args(argv)
    s = settings(args.smoke, args.quick)
    _, budgets = profile(args.quick)
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device is visible to torch (torch.cuda.is_available() is False); "
                 "--smoke runs every part on the CPU at tiny sizes")
    started = time.monotonic()
    out = os.path.abspath(args.out)
    work = os.path.abspath(args.work)
    os.makedirs(out, exist_ok=True)
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    device, dtype = torch.device(s["device"]), getattr(torch, s["dtype"])
    machine = common.machine(device)
    result = dict(device=machine["gpu"] if device.type == "cuda" else machine["cpu"],
                  versions=versions(), smoke=args.smoke, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  plan=dict(profile="quick" if args.quick else "full", parts=list(args.parts),
                               budgets={p: budgets[p] for p in args.parts}, budget=args.budget),
                  settings={k: v for k, v in s.items() if k not in ("train", "hydra")}, parts={},
                  auto_kernel={"eva": auto_kernel(device, dtype, 0.0, False),
                               "eva+rpe+dropout": auto_kernel(device, dtype, 0.1, True)})
    binarising = None
    if args.parts[0] == "correctness" and {"paper_configs", "clean_exit"} & set(args.parts):
        # the sample is binarised (fairseq-preprocess, CPU) while correctness runs, which times nothing
        binarising = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="binarise").submit(prepare_data, work)
    check = Check(args, s, device, dtype, result, out, work, binarising)
    for name in args.parts:
        start = time.monotonic()
        # --smoke has no budgets: a loaded CPU is slow, and the tests check the budgets on their own
        deadline = math.inf if args.smoke else min(start + budgets[name], started + args.budget)
        info = result["parts"][name] = dict(budget=deadline - start, seconds=0.0, status="running")
        try:
            if binarising is not None and name != "correctness":
                binarising.exception()  # the next parts time the GPU, or need the data: the binarising ends first
            info["status"] = parts.PART[name].run(check, deadline)
        except Exception:  # one failing part must not hide the others' results
            info.update(status="failed", error=traceback.format_exc()[-3000:])
        info["seconds"] = time.monotonic() - start
        if info["seconds"] > info["budget"]:
            info["status"] += ", over budget"
        print(f"[gpu_check] {name}: {info['seconds']:.0f} s of {number(info['budget'], '.0f')} ({info['status']}); "
              f"{time.monotonic() - started:.0f} s in all", flush=True)
        write(result, out)
    print(summary(result))
    return 1 if failed(result) else 0

