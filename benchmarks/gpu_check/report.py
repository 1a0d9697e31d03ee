"""The GPU check's report: gpu_check.json and gpu_check.md (the parts' tables, the speed targets they meet), and
whether anything failed."""

import json
import math
import os
import platform

import torch

from benchmarks import common
from benchmarks.gpu_check import parts
from benchmarks.gpu_check.plan import number

# the speed targets the table checks: (quantity, mechanism, baseline, N, bound, "min" or "max")
TARGETS = [
    ("speed-up", "eva", "sdpa", 8192, 5.0, "min"), ("speed-up", "eva", "sdpa", 32768, 15.0, "min"),
    ("speed-up", "eva-causal", "sdpa-causal", 8192, 2.0, "min"), ("speed-up", "eva-causal", "sdpa-causal", 32768, 3.0, "min"),
    *[("time ratio", m + "+rpe+dropout", m, N, 1.1, "max") for m in ("eva", "eva-causal") for N in (8192, 32768)],
    *[("memory ratio", m, base, N, 1.2, "max") for m, base in (("eva", "sdpa"), ("eva+rpe+dropout", "sdpa"),
                                                               ("eva-causal", "sdpa-causal"),
                                                               ("eva-causal+rpe+dropout", "sdpa-causal")) for N in (8192, 32768)],
    *[("time ratio, fastest mode, batch 1", m, base, 1024, 1.3, "max") for m, base in (("eva", "sdpa"),
                                                                                       ("eva-causal", "sdpa-causal"))],
    ("words/s ratio", "mlm_eva_4096", "mlm_softmax_4096", None, 1.5, "min"),
    ("words/s ratio", "wikitext103_eva_16l", "wikitext103_softmax_16l", None, 1.0, "min"),
    ("words/s ratio", "wmt14_en_de_eva16", "wmt14_en_de_softmax", None, 0.95, "min"),
]

# gpu_check.md's sections in order: the parts' tables, the profile after the layer tables whose time it explains
SECTIONS = ("correctness", "speed_tokens", "speed_batch1", "modes", "profile", "paper_configs", "clean_exit")


def versions():
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    return dict(torch=torch.__version__, triton=triton_version, python=platform.python_version(),
                commit=common.commit())


def targets(result):
    """The speed targets, from the 65,536-token table and the paper configs: value, bound, met."""
    found = {(s["mechanism"], s["baseline"], s["N"]): s for s in result.get("speed_tokens", {}).get("ratios", [])}
    wps = {r["run"]: r.get("words_per_second", float("nan")) for r in result.get("paper_configs", {}).get("rows", [])}
    out = []
    for quantity, mech, base, N, bound, kind in TARGETS:
        if quantity == "words/s ratio":
            value = wps.get(mech, float("nan")) / wps.get(base, float("nan"))
        elif quantity.startswith("time ratio, fastest mode"):
            found_modes = [r["vs_sdpa"] for r in result.get("modes", {}).get("ratios", [])
                           if (r["mechanism"], r["N"], r["batch"]) == (mech, N, 1) and r["vs_sdpa"]]
            value = min(found_modes, default=None)
        else:
            s = found.get((mech, base, N), {})
            value = {"speed-up": s.get("layer_speedup"), "memory ratio": s.get("memory_ratio"),
                     "time ratio": 1 / s["layer_speedup"] if s.get("layer_speedup") else None}[quantity]
        value = float("nan") if value is None else value
        met = (value >= bound if kind == "min" else value <= bound) if math.isfinite(value) else None
        out.append(dict(quantity=quantity, mechanism=mech, baseline=base, N=N, value=value, bound=bound, kind=kind, met=met))
    return out


def target_part(quantity):
    """The part whose table a speed target reads."""
    return {"words/s ratio": "paper_configs", "time ratio, fastest mode, batch 1": "modes"}.get(quantity, "speed_tokens")



def summary(result):
    v = result["versions"]
    chosen = result.get("plan", {})
    kind = "the quick profile (--quick)" if chosen.get("profile") == "quick" else "the full check"
    lines = [f"# GPU check on {result['device']}", "",
             f"torch {v['torch']}, Triton {v['triton']}, Python {v['python']}, commit {v['commit']}; {kind}"
             f"{', --smoke (the CPU, tiny sizes)' if result['smoke'] else ''}; {result['date']}", ""]
    if chosen.get("budgets"):
        lines += [f"Budgets on an H100 or H200: {' + '.join(f'{p} {b:.0f}' for p, b in chosen['budgets'].items())} s; "
                  f"the whole check {chosen['budget']:.0f} s" + (" (not applied on the CPU)." if result["smoke"] else "."), ""]
    lines += ["| part | seconds | budget | status |", "|---|---|---|---|"]
    for part, info in result["parts"].items():
        lines.append(f"| {part} | {info['seconds']:.0f} | {number(info['budget'], '.0f')} | {info['status']} |")
    lines.append("")
    for name in SECTIONS:
        lines += parts.PART[name].summary(result)
    shown = [t for t in targets(result) if target_part(t["quantity"]) in result["parts"] or not result["parts"]]
    if shown:  # the targets whose tables ran (--parts, --quick)
        lines += ["## Speed targets", "", "| measure | N | value | target | met |", "|---|---|---|---|---|"]
    for t in shown:
        met = "-" if t["met"] is None else ("yes" if t["met"] else "no")
        lines.append(f"| {t['quantity']}: {t['mechanism']} vs {t['baseline']} | {t['N'] or ''} | {number(t['value'], '.2f')} | "
                     f"{'>=' if t['kind'] == 'min' else '<='} {t['bound']} | {met} |")
    for part, info in result["parts"].items():
        if info.get("error"):
            lines.append(f"\n{part} FAILED:\n{info['error']}")
    return "\n".join(lines) + "\n"


def write(result, out):
    result["targets"] = targets(result)
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    with open(os.path.join(out, "gpu_check.md"), "w") as f:
        f.write(summary(result))


def failed(result):
    """Whether something is wrong (not merely unavailable, skipped or slow): a failed part or row, a run
    that did not exit 0 or logged a non-finite loss (the control of the clean-exit check aside)."""
    parts = any(info["status"] == "failed" for info in result["parts"].values())
    rows = any(r["status"] == "FAIL" for r in result.get("correctness", {}).get("rows", []))
    runs = [r for key in ("paper_configs", "clean_exit") for r in result.get(key, {}).get("rows", [])
            if "returncode" in r and "control" not in r["run"]]
    return parts or rows or any(r["returncode"] != 0 for r in runs)

