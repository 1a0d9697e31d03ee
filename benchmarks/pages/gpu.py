"""The GPU's numbers (records under benchmarks/results/gpu/): correctness of each kernel, speed against flash
SDPA, the profile, the paper's configs' words/s; each names the commit it measured, since the layer has changed
since. And the operation counts, which stand in for a GPU run of the layer as it is now."""

from benchmarks import gpu_check
from benchmarks.pages import records
from benchmarks.pages.words import ratio_span

GPU_RECORDS = ("triton_check", "correctness_all_kernels", "correctness_triton", "profile_after_seed_fix",
               "clean_exit_and_profile", "before_triton")


def measured_at(record):
    """One line naming what a GPU record measured: its commit, device and date (meta.json), and that the layer has
    changed since without a GPU run."""
    meta = records.load("gpu", record, "meta.json")
    commit = meta["commit"].split()[0]
    at = "at an unrecorded commit" if commit in ("unknown", "not") else f"at commit {commit}"
    return (f"Measured {at} on an NVIDIA H200 ({meta['date']}; record `benchmarks/results/gpu/{record}/`); the layer "
            "has changed since, and the code as it is now has not run on a GPU.")


def gpu_note(record):
    return lambda: measured_at(record)


def gpu_json(record, name):
    return records.load("gpu", record, name)


SPEED_TOKENS = ("correctness_speed_tokens.json", "speed_tokens_long_paper_configs_wmt.json")  # the Triton check's two runs


def speed_tokens(key):
    """The rows (layer times) or ratios (speed-ups) of the Triton check's speed_tokens runs."""
    return [r for name in SPEED_TOKENS for r in gpu_json("triton_check", name)["speed_tokens"][key]]


def gpu_speed_tokens():
    """Layer milliseconds at 65,536 tokens a call, from the Triton check's two speed_tokens runs."""
    rows = [r for r in speed_tokens("rows") if "layer_s" in r]
    layers = ["sdpa", "eva", "eva+rpe+dropout", "sdpa-causal", "eva-causal", "eva-causal+rpe+dropout", "projections"]
    heads = ["sdpa", "eva", "eva+rpe+dropout", "sdpa causal", "eva causal", "eva causal+rpe+dropout", "projections"]
    cells = {(r["N"], r["mechanism"]): r for r in rows}
    lines = ["| N x batch | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for n, batch in sorted({(r["N"], r["batch"]) for r in rows}):
        values = [f"{cells[n, m]['layer_s'] * 1000:.2f}" if (n, m) in cells else "-" for m in layers]
        lines.append(f"| {n} x {batch} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n\n" + measured_at("triton_check")


PROFILE_ORDER = ["eva", "eva+rpe", "eva+dropout", "eva+rpe+dropout", "eva-causal", "eva-causal+rpe",
                 "eva-causal+dropout", "eva-causal+rpe+dropout"]


def gpu_profile():
    rows = {r["mechanism"]: r for r in gpu_json("profile_after_seed_fix", "gpu_check.json")["profile"]["rows"]
            if "wall_ms" in r}
    lines = ["| layer | ms a call | host ms | GPU ms | bound by |", "|---|---|---|---|---|"]
    for name in (n for n in PROFILE_ORDER if n in rows):
        r = rows[name]
        lines.append(f"| {name.replace('+', ' + ')} | {r['wall_ms']:.2f} | {r['host_ms']:.2f} | {r['gpu_ms']:.2f} "
                     f"| {r['bound']} |")
    return "\n".join(lines) + "\n\n" + measured_at("profile_after_seed_fix")


def paper_config_runs():
    """{config: [words/s of each run]} of the Triton check's paper_configs parts."""
    runs = {}
    for name in ("speed_batch1_paper_configs_clean_exit.json", "paper_configs_mlm.json",
                 "speed_tokens_long_paper_configs_wmt.json"):
        for r in gpu_json("triton_check", name)["paper_configs"]["rows"]:
            if r.get("words_per_second"):
                runs.setdefault(r["run"], []).append(r["words_per_second"])
    return runs


# (EVA's config, its softmax twin), as the GPU check trains them
PAPER_PAIRS = [(eva, softmax) for eva, _, softmax in gpu_check.PAPER_CONFIGS]


def paper_config_ratios():
    runs = paper_config_runs()
    return {eva: sorted(e / s for e in runs[eva] for s in runs[softmax]) for eva, softmax in PAPER_PAIRS}


def gpu_paper_configs():
    runs, ratios = paper_config_runs(), paper_config_ratios()
    lines = ["| config (60 updates each, on the bundled sample) | EVA words/s | softmax words/s | EVA / softmax |",
             "|---|---|---|---|"]
    for eva, softmax in PAPER_PAIRS:
        sm = " and ".join(f"{w:,.0f}" for w in runs[softmax]) + (" (two runs)" if len(runs[softmax]) == 2 else "")
        lines.append(f"| {eva} vs {softmax} | {runs[eva][0]:,.0f} | {sm} | {ratio_span(ratios[eva])} |")
    return "\n".join(lines) + "\n\n" + measured_at("triton_check")


def correctness_rows(record):
    return gpu_json(record, "gpu_check.json")["correctness"]["rows"]


def gpu_correctness():
    """Largest relative errors of each kernel against the float64 reference, by precision, with the bounds."""
    rows = correctness_rows("correctness_all_kernels")

    def largest(kernel, precisions, key, dropout=False):
        xs = [r[key] for r in rows if r["kernel"] == kernel and r["precision"] in precisions
              and ("dropout" in r["check"]) == dropout and r[key] == r[key]]  # NaN: not measured
        return max(xs)

    def dropout_cell(kernel, what):
        found = {r["check"].split(",")[0]: r["output_error"] for r in rows
                 if r["kernel"] == kernel and what in r["check"]}
        return found

    def error(x):
        return "0" if x == 0 else f"{x:.2e}"

    def bounds(test):
        found = sorted({f"{r['bound']:.0e}" for r in rows if test(r)})
        return " or ".join(found)

    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    lines = ["| kernel | float32: output / gradient | float16 | bfloat16 | dropout, same seed: bidirectional, causal "
             "| dropout, mean of 400 draws: bidirectional, causal |", "|---|---|---|---|---|---|"]
    for k in kernels:
        cells = []
        for precisions in (("float32",), ("float16", "autocast-float16"), ("bfloat16", "autocast-bfloat16")):
            cells.append(f"{largest(k, precisions, 'output_error'):.2e} / {largest(k, precisions, 'gradient_error'):.2e}")
        for what in ("same seed", "mean of 400"):
            found = dropout_cell(k, what)
            cells.append(f"{error(found['bidirectional'])}, {error(found['causal'])}")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines.append("| bound | " + " | ".join(
        [bounds(lambda r, p=p: r["precision"] in p and "dropout" not in r["check"])
         for p in (("float32",), ("float16", "autocast-float16"), ("bfloat16", "autocast-bfloat16"))]
        + [bounds(lambda r, w=w: w in r["check"]) for w in ("same seed", "mean of 400")]) + " |")
    passed = sum(r["status"] == "ok" for r in rows)
    latest = correctness_rows("correctness_triton")
    latest_ok = sum(r["status"] == "ok" for r in latest if r["status"] != "skipped")
    latest_run = sum(r["status"] != "skipped" for r in latest)
    return ("\n".join(lines) + f"\n\n{passed} of {len(rows)} rows pass. " + measured_at("correctness_all_kernels")
            + f"\nThe latest check ran the Triton kernel's {latest_run} rows and {latest_ok} passed. "
            + measured_at("correctness_triton"))


def op_count():
    """The op_count record's table (benchmarks/results/op_count/), and the commit it counted."""
    meta = records.load("op_count", "meta.json")
    rows = [line.split("|")[1:4] for line in records.text("op_count", "op_count.md").splitlines()
            if line.startswith("| ") and not line.startswith("| layer")]
    lines = ["| layer, one forward + backward | operations | new tensors |", "|---|---|---|"]
    lines += [f"| {name.strip()} | {ops.strip()} | {new.strip()} |" for name, ops, new in rows]
    return "\n".join(lines) + (f"\n\nCounted at commit {meta['commit']} ({meta['date']}; {meta['device']}; record "
                                "`benchmarks/results/op_count/`).")


TABLES = {
    "gpu-correctness": gpu_correctness,
    "gpu-speed-tokens": gpu_speed_tokens,
    "gpu-profile": gpu_profile,
    "gpu-paper-configs": gpu_paper_configs,
    "op-count": op_count,
    **{f"gpu-measured-{record}": gpu_note(record) for record in GPU_RECORDS},
}
