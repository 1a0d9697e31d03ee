"""The README's Results section: its sentences with numbers and its summary of the learning, each from the records
that docs/results.md shows in full."""

from benchmarks.experiments import paper_table
from benchmarks.pages import records
from benchmarks.pages.gpu import correctness_rows, measured_at, paper_config_ratios, speed_tokens
from benchmarks.pages.learning import MLM_H200_ROWS, RECALL_ROWS, causal_lm, cost_an_update, eva_cost_against_local, recall_shares
from benchmarks.pages.words import ratio_span


def readme_exact():
    """The GPU check's correctness in one sentence: rows passed and the largest error of each precision."""
    rows = correctness_rows("correctness_all_kernels")
    checked = [r for r in rows if "dropout" not in r["check"]]

    def largest(*precisions):
        errors = [e for r in checked if r["precision"] in precisions
                  for e in (r["output_error"], r["gradient_error"]) if e == e]  # NaN: not measured
        return f"{max(errors):.1e}".replace("e-0", "e-")

    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    passed = sum(r["status"] == "ok" for r in rows)
    outcome = f"all {passed}" if passed == len(rows) else f"{passed} of the {len(rows)}"
    return (f"On an NVIDIA H200 the {', '.join(kernels[:-1])} and {kernels[-1]} kernels passed {outcome} "
            f"rows of the GPU check against the float64 CPU reference (largest errors, output and "
            f"gradients: float32 {largest('float32')}, float16 {largest('float16', 'autocast-float16')}, bfloat16 "
            f"{largest('bfloat16', 'autocast-bfloat16')}). " + measured_at("correctness_all_kernels"))


def readme_cpu_speed():
    """Speed-up and memory ratio over SDPA at 8192 and 16384, and the cost of the paper's bias and dropout."""
    up = {(s["N"], s["mechanism"]): s["layer_speedup"] for s in records.load("speed_c_loop.json")["speedups"]}
    memory = {(s["N"], s["mechanism"]): s["memory_ratio"] for s in records.load("speed_c_loop_memory.json")["speedups"]}
    settings = [1 / s["layer_speedup"] for s in records.load("speed_paper_settings_r9.json")["speedups"]
                if s["mechanism"].endswith("+rpe+dropout")]
    return (f"At N = 8192, EVA is {up[8192, 'eva']:.2f}x faster than `scaled_dot_product_attention` and causal EVA "
            f"{up[8192, 'eva-causal']:.2f}x faster than causal SDPA, with {memory[8192, 'eva']:.2f}x and "
            f"{memory[8192, 'eva-causal']:.2f}x its peak memory; at N = 16384, {up[16384, 'eva']:.2f}x and "
            f"{up[16384, 'eva-causal']:.2f}x. With the trainable bias and attention dropout 0.1 of the paper's configs "
            f"the layer takes {min(settings):.2f}x to {max(settings):.2f}x the time of the same layer without them (the "
            "median of the ratios of interleaved rounds, as every ratio here).")


def readme_gpu_speed():
    """The Triton check's speed-ups over flash SDPA, the cost of the bias and dropout, the configs' words/s."""
    up = {(r["N"], r["mechanism"], r["baseline"]): r["layer_speedup"] for r in speed_tokens("ratios")}
    ms = [r["layer_s"] * 1000 for r in speed_tokens("rows") if r["mechanism"] == "eva" and "layer_s" in r]
    faster = min(n for (n, m, b), x in up.items() if (m, b) == ("eva", "sdpa") and x >= 1)
    longest = max(n for n, _, _ in up)
    settings = [1 / up[8192, f"{m}+rpe+dropout", m] for m in ("eva", "eva-causal")]
    configs = {eva: ratio_span(r) for eva, r in paper_config_ratios().items()}
    return "\n".join([
        f"- bidirectional EVA runs at {up[8192, 'eva', 'sdpa']:.2f}x flash SDPA's speed at N = 8192 and "
        f"{up[longest, 'eva', 'sdpa']:.2f}x at {longest}, and is slower below N = {faster}: the layer costs "
        f"{min(ms):.1f}-{max(ms):.1f} ms a call at every length, a fixed per-call cost;",
        f"- causal EVA runs at {up[8192, 'eva-causal', 'sdpa-causal']:.2f}x flash causal SDPA at 8192 and "
        f"{up[longest, 'eva-causal', 'sdpa-causal']:.2f}x at {longest};",
        f"- with the trainable bias and dropout 0.1 a layer takes {ratio_span(sorted(settings))} the time at N = 8192;",
        f"- the paper's configs train at {configs['wikitext103_eva_16l']} (wikitext103), {configs['wmt14_en_de_eva16']} "
        f"(wmt14) and {configs['mlm_eva_4096']} (mlm_eva_4096) softmax's words/s.",
        "", measured_at("triton_check")])


def learning_summary():
    """README's table: test perplexity of exact, EVA and local in the three settings, EVA's share of local's gap and
    its cost an update, each from its record."""
    import math

    lm_tables = causal_lm()

    def fmt(xs, seed=""):
        """The values of a row's seeds; a lone value says it is one seed's (and which, if not the first)."""
        return ", ".join(f"{x:.2f}" for x in xs) + (f" (one seed{seed})" if len(xs) == 1 else "")

    lines = ["| setting | exact (seeds) | EVA (seeds) | local (seeds) | EVA's share | EVA's cost an update |",
             "|---|---|---|---|---|---|"]
    # causal LM, 2,000 pieces: test at context 256 after 180 CPU minutes
    tests = {name: lm_tables.test_at(d, 180)["256"] for name, d in lm_tables.ROWS.items()}
    cells = lm_tables.comparison(tests)
    costs = eva_cost_against_local()
    group = lm_tables.seeds
    lines.append(f"| causal LM, 2,000 pieces, 180 CPU minutes, context 256 | {fmt(group(tests, 'exact'))} "
                 f"| {fmt(group(tests, 'EVA'))} | {fmt(group(tests, 'local'))} | {cells[4]} ({cells[5]} over the seeds) "
                 f"| {ratio_span(sorted(costs))} local's (two seeds) |")
    # masked LM on an H200: test after the same wall-clock budget
    runs = {row.lower(): rs for row, rs in MLM_H200_ROWS.items()}
    test = {row: [records.load(*run, "test_ppl.json")["test"] for run in rs] for row, rs in runs.items()}
    mean = {row: sum(xs) / len(xs) for row, xs in test.items()}
    tokens = ", ".join(f"{records.curve(*run)[-1]['updates'] * 128 * 512 / 1e6:.0f}M" for run in runs["eva"])
    costs = [cost_an_update(*e) / cost_an_update(*lo) for e, lo in zip(runs["eva"], runs["local"])]
    lines.append(f"| masked LM on an H200, 128 blocks of 512 an update (EVA: {tokens} tokens) | {fmt(test['exact'], ': seed 2')} "
                 f"| {fmt(test['eva'])} | {fmt(test['local'])} "
                 f"| {100 * lm_tables.share(mean['exact'], mean['eva'], mean['local']):.0f}% "
                 f"| {ratio_span(sorted(costs))} local's (two seeds) |")
    # recall: perplexity on the repeated part, share in log perplexity
    recall = {"exact": [("recall_10000_updates", "exact")],
              "eva": [("recall_10000_updates", "eva4"), ("recall_by_chunk_size", "eva4-seed2")],
              "local": [("recall_7000_updates", "local")]}
    b = {row: [records.load(*run, "recall.json")["repeated"] for run in rs] for row, rs in recall.items()}
    shares = [lm_tables.share(math.log(b["exact"][0]), math.log(e), math.log(b["local"][0])) for e in b["eva"]]
    costs = [cost_an_update(*e) / cost_an_update(*recall["local"][0]) for e in recall["eva"]]
    lines.append(f"| recall of a span beyond the window (perplexity on it), "
                 f"{records.curve(*recall['eva'][0])[-1]['updates']:,} updates (local: "
                 f"{records.curve(*recall['local'][0])[-1]['updates']:,}), chunks of 4 | {fmt(b['exact'])} "
                 f"| {fmt(b['eva'])} | {fmt(b['local'])} | {', '.join(f'{100 * s:.0f}%' for s in shares)} "
                 f"in log perplexity | {', '.join(f'{c:.2f}x' for c in costs)} local's (seed 1, seed 2) |")
    return "\n".join(lines)


def readme_learning():
    """What the far context gives each row of the causal LM (test at context 256 against 0), and recall by chunk size."""
    lm_tables = causal_lm()

    def gain(row):
        tests = [lm_tables.test_at(d, 180) for name, d in lm_tables.ROWS.items() if name.split()[0] == row]
        return [1 - t["256"] / t["0"] for t in tests]

    def percents(xs):
        return " and ".join(dict.fromkeys(f"{100 * x:.1f}%" for x in xs))

    share = {label: recall_shares([records.load(*run, "recall.json") for run in runs])
             for label, runs in RECALL_ROWS if label.startswith("EVA")}
    (first, shares), *others = [(label.split()[3], " and ".join(f"{100 * x:.0f}%" for x in xs))
                                for label, xs in share.items()]  # (chunk size, shares): 4 first
    chunks = [f"chunks of {first} keep {shares} of exact attention's", *(f"chunks of {c} {x}" for c, x in others)]
    return (f"- Exact attention's own gain from the far context (test at context 256 against 0) is "
            f"{percents(gain('exact'))} (two seeds) at 180 CPU minutes with 2,000 pieces; EVA gains "
            f"{percents(gain('EVA'))} and local attention {percents(gain('local'))}.\n"
            f"- The chunk size decides recall: {', '.join(chunks)}.")


def readme_translation_table():
    """The translation table's orderings at the sample's scale, as sentences (the table is on the results page)."""

    runs = paper_table.collect("mt", records.folder("translation_table"))
    by_mean, apart, *_ = paper_table.orderings("mt", runs)  # the pairs within the spread: on the results page
    return f"- {by_mean}\n- {apart}"


def readme_busy_machine():
    """How much slower the README's LM command trained beside a busy process, with and without the fix."""
    record = records.load("busy_machine", "results.json")
    rows = {(r["setting"], r["machine"]): r["ratio_to_default_alone"] for r in record["rows"]}
    return ("On a CPU that other jobs share, start them with `OMP_WAIT_POLICY=PASSIVE` (the scripts set it): beside one "
            f"other busy process the language-model command took {rows['default', 'beside a busy torch process']:.2f}x "
            "its time alone on 2 cores, and "
            f"{rows['OMP_WAIT_POLICY=PASSIVE', 'beside a busy torch process']:.2f}x with it "
            "([results](docs/results.md#on-a-shared-cpu)).")


TABLES = {
    "gpu-readme-exact": readme_exact,
    "readme-cpu-speed": readme_cpu_speed,
    "gpu-readme-speed": readme_gpu_speed,
    "learning-summary": learning_summary,
    "readme-learning": readme_learning,
    "readme-translation-table": readme_translation_table,
    "readme-busy-machine": readme_busy_machine,
}
