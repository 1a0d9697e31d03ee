"""The tables of README.md and docs/results.md, and the sentences with numbers around them, rendered from the
records under benchmarks/results/.

A table's place in a page is marked by `<!-- results: NAME -->` ... `<!-- end results -->`; this writes each
marked block again from its record (TABLES), so a number on the pages is one of a record's. A test renders
them and fails where the committed text differs.

    python -m benchmarks.results_tables          # = make results: rewrite the marked blocks in place
    python -m benchmarks.results_tables --check  # say which blocks differ, change nothing
"""

import argparse
import builtins
import contextlib
import json
import os
import re
import sys
from unittest import mock

from benchmarks import gpu_check, paper
from fairseq_eva.attention import registry

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")
PAGES = ("README.md", os.path.join("docs", "results.md"))
BLOCK = re.compile(r"(<!-- results: (\S+) -->\n)(.*?)(<!-- end results -->)", re.S)


def load(*path):
    with open(os.path.join(RESULTS, *path)) as f:
        return json.load(f)


def approximation_equal_cost(inputs):
    def render():
        from benchmarks import approximation

        return approximation.markdown(load("approximation.json")["results"][inputs]["equal_cost"], inputs).strip()

    return render


def listed(names):
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def approximation_summary():
    """EVA against each mechanism of the equal-cost tables, one line an input set and direction: those it is closer
    to softmax attention than at every setting, those it is further than at every setting, and the rest."""
    def name(mechanism):
        return "Performer-ReLU" if mechanism == "performer-relu" else BASELINE_NAMES.get(mechanism, mechanism)

    lines = []
    for inputs, label in (("model", "the trained model's inputs"), ("random", "random inputs")):
        rows = load("approximation.json")["results"][inputs]["equal_cost"]
        for causal in (False, True):
            error = {(r["mechanism"], tuple(r["eva"].values())): r["error"] for r in rows if r["causal"] == causal}
            settings = sorted({s for m, s in error if m == "eva"})
            closer, further, between = [], [], []
            for mechanism in dict.fromkeys(m for m, _ in error if m != "eva"):
                ahead = [error["eva", s] < error[mechanism, s] for s in settings if (mechanism, s) in error]
                (closer if all(ahead) else further if not any(ahead) else between).append(name(mechanism))
            parts = [f"closer to softmax attention than {listed(closer)} at every setting of the table" if closer else "",
                     f"further than {listed(further)} at every setting" if further else "",
                     f"closer than {listed(between)} at some settings and further at others" if between else ""]
            lines.append(f"- {label}, {'causal' if causal else 'bidirectional'}: EVA is "
                         f"{'; '.join(p for p in parts if p)}.")
    return "\n".join(lines)


def mechanisms_speed(setting, lengths):
    """One row a mechanism: time and peak memory against EVA's in the same run, at each length."""

    def render():
        rows = [r for name in sorted(os.listdir(os.path.join(RESULTS, "mechanisms")))
                if name.startswith(f"speed_{setting}") and name.endswith(".json")
                for r in load("mechanisms", name)["results"]]  # each run holds EVA, which its ratios are against
        names = list(dict.fromkeys(r["mechanism"] for r in rows))
        shown = [n for n in lengths if any(r["N"] == n for r in rows)]
        cells = {(r["mechanism"], r["N"]): r for r in rows}
        head = " | ".join(f"N = {n}: time, memory" for n in shown)
        lines = [f"| {setting}: mechanism (MACs/token at N = {shown[0]}) | {head} |", "|---" * (len(shown) + 1) + "|"]
        for name in names:
            first = cells.get((name, shown[0]))
            cost = f" ({first['macs_per_token'] / 768:.0f} D)" if first else ""
            values = [f"{c['time_vs_eva']:.2f}x, {c['memory_vs_eva']:.2f}x" if (c := cells.get((name, n))) else "-"
                      for n in shown]
            lines.append(f"| {name}{cost} | " + " | ".join(values) + " |")
        return "\n".join(lines)

    return render


# --- CPU records ----------------------------------------------------------------------------------------------------

def seconds(x):
    return f"{x:.2f} s" if x >= 10 else f"{x:.3f} s"


def cpu_speed():
    """Layer time (speed_c_loop.json) / peak memory (speed_c_loop_memory.json) at each N, and the speed-up over SDPA
    (time record) / memory ratio (memory record) of EVA and causal EVA."""
    times, memory = load("speed_c_loop.json"), load("speed_c_loop_memory.json")
    names = ["eva", "eva-causal", "local", "sdpa", "sdpa-causal", "projections"]
    pairs = [("eva", "sdpa"), ("eva-causal", "sdpa-causal")]
    t = {(r["N"], r["mechanism"]): r["layer_s"] for r in times["results"]}
    m = {(r["N"], r["mechanism"]): r["peak_bytes"] for r in memory["results"]}
    up = {(s["N"], s["mechanism"], s["baseline"]): s["layer_speedup"] for s in times["speedups"]}
    ratio = {(s["N"], s["mechanism"], s["baseline"]): s["memory_ratio"] for s in memory["speedups"]}
    head = names + [f"{a} vs {b} (median of the rounds' ratios / memory)" for a, b in pairs]
    lines = ["| N | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for n in sorted({r["N"] for r in times["results"]}):
        cells = [f"{seconds(t[n, name])} / {m[n, name] / 2**20:.0f} MiB" for name in names]
        cells += [f"{up[n, a, b]:.2f}x / {ratio[n, a, b]:.2f}" for a, b in pairs]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_speed_summary():
    """The CPU section's first sentences: EVA's and causal EVA's speed-ups over SDPA and memory ratios, as the
    medians of the rounds' ratios, and what the table's median times give."""
    times, memory = load("speed_c_loop.json"), load("speed_c_loop_memory.json")
    up = {(s["N"], s["mechanism"]): s["layer_speedup"] for s in times["speedups"]}
    mem = {(s["N"], s["mechanism"]): s["memory_ratio"] for s in memory["speedups"]}
    t = {(r["N"], r["mechanism"]): r["layer_s"] for r in times["results"]}
    n = sorted({r["N"] for r in times["results"]})
    long, longest = n[-2], n[-1]

    def span(mechanism):
        return ratio_span(sorted(mem[x, mechanism] for x in (long, longest)))

    return (f"On one CPU core, an EVA layer (|E| 256, C 128) is {up[long, 'eva']:.2f}x faster than SDPA at N = {long} "
            f"and {up[longest, 'eva']:.2f}x at {longest}, and causal EVA (window 128, chunks of 8) "
            f"{up[long, 'eva-causal']:.2f}x and {up[longest, 'eva-causal']:.2f}x faster than causal SDPA, with "
            f"{span('eva')} and {span('eva-causal')} their peak memory; at N = {n[0]} EVA's speed-up is "
            f"{up[n[0], 'eva']:.2f}x. Each speed-up is the median of the ratios of interleaved rounds; the table's "
            f"median times give {t[long, 'sdpa'] / t[long, 'eva']:.2f}x and {t[longest, 'sdpa'] / t[longest, 'eva']:.2f}x "
            f"for EVA, {t[long, 'sdpa-causal'] / t[long, 'eva-causal']:.2f}x and "
            f"{t[longest, 'sdpa-causal'] / t[longest, 'eva-causal']:.2f}x for causal EVA.")


def paper_settings_cpu():
    """Layer time of EVA with and without the paper's bias and dropout (speed_paper_settings_r9.json)."""
    record = load("speed_paper_settings_r9.json")
    rows = record["results"]
    names = list(dict.fromkeys(r["mechanism"] for r in rows))
    t = {(r["N"], r["mechanism"]): r["layer_s"] for r in rows}
    # with / without the bias and dropout: the median of the rounds' ratios (the medians of the times come from
    # different rounds of a shared machine, and their ratio can differ from it)
    ratio = {(s["N"], s["mechanism"]): 1 / s["layer_speedup"] for s in record["speedups"]
             if s["mechanism"].endswith("+rpe+dropout")}
    paired = list(dict.fromkeys(m for _, m in ratio))
    head = names + [f"{m} / {m.removesuffix('+rpe+dropout')}, median of the rounds' ratios" for m in paired]
    lines = ["| N | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for n in sorted({r["N"] for r in rows}):
        cells = [seconds(t[n, name]) for name in names] + [f"{ratio[n, m]:.2f}" for m in paired]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paper_settings_memory(n=8192):
    """Peak memory of a training step with and without the paper's bias and dropout, against SDPA's
    (speed_paper_settings_memory.json)."""
    record = load("speed_paper_settings_memory.json")
    peak = {(r["N"], r["mechanism"]): r["peak_bytes"] for r in record["results"]}
    longest = max(N for N, _ in peak)

    def mib(m):
        return f"{peak[n, m] / 2**20:.0f}"

    def of_sdpa(m):
        return f"{peak[n, m] / peak[n, 'sdpa-causal' if 'causal' in m else 'sdpa']:.2f}"

    growth = " and ".join(f"{peak[longest, m] / peak[n, m]:.2f}x" for m in ("eva+rpe+dropout", "eva-causal+rpe+dropout"))
    return (f"Peak memory of a training step at N = {n}, measured in a run of its own: {mib('eva+rpe+dropout')} MiB "
            f"with the bias and dropout ({mib('eva')} without), and {mib('eva-causal+rpe+dropout')} MiB causal "
            f"({mib('eva-causal')} without), against SDPA's {mib('sdpa')} MiB: {of_sdpa('eva+rpe+dropout')} and "
            f"{of_sdpa('eva-causal+rpe+dropout')} of it ({of_sdpa('eva')} and {of_sdpa('eva-causal')} without), "
            f"growing {growth} from {n} to {longest}.")


def approximation_grid(causal):
    """EVA's error against softmax attention on the model inputs: rows the window, columns C (bidirectional) or the
    chunk size (causal), from approximation.json."""

    def render():
        rows = [r for r in load("approximation.json")["results"]["model"]["rows"]
                if r["mechanism"] == "eva" and r["causal"] == causal]
        error = {(r["window"], r.get("chunk_size") if causal else r["chunks"]): r["error"] for r in rows}
        windows = sorted({r["window"] for r in rows})
        if causal:
            sizes = sorted({r["chunk_size"] for r in rows}, key=lambda s: (s != 0, -s))
            chunks = {r["chunk_size"]: r["chunks"] for r in rows}
            head = ["s = 0 (C = 0)"] + [f"{s} ({chunks[s]})" for s in sizes if s]
            lines = ["| causal, model inputs (columns: chunk size s, C = N / s) | " + " | ".join(head) + " |"]
            columns = sizes
        else:
            columns = sorted({r["chunks"] for r in rows})
            head = [f"C = {columns[0]}"] + [str(c) for c in columns[1:]]
            lines = ["| bidirectional, model inputs | " + " | ".join(head) + " |"]
        lines.append("|---" * (len(columns) + 1) + "|")
        for i, w in enumerate(windows):
            cells = [f"{error[w, c]:.3f}" if (w, c) in error else "-" for c in columns]
            lines.append(f"| {f'abs(E) = {w}' if i == 0 else w} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    return render


def decoding(contexts=(256, 1024, 4096, 8192)):
    """Per-token latency and cache size of one layer (decoding.json), at the contexts the page shows."""
    lines = ["| context | mechanism | median ms a token | mean ms | cache (MiB) | of which chunk summaries (MiB) |",
             "|---|---|---|---|---|---|"]
    for r in load("decoding.json")["results"]:
        if r["context"] in contexts:
            lines.append(f"| {r['context']} | {r['mechanism']} | {1e3 * r['latency_median_s']:.2f} "
                         f"| {1e3 * r['latency_mean_s']:.2f} | {r['cache_bytes'] / 2**20:.2f} "
                         f"| {r['chunk_summary_bytes'] / 2**20:.2f} |")
    return "\n".join(lines)


def decoding_summary(context=8192):
    """Causal EVA's cache and latency a token against softmax's at the longest context the page names."""
    rows = {r["mechanism"]: r for r in load("decoding.json")["results"] if r["context"] == context}
    eva, kv, cat = rows["eva-causal"], rows["softmax-kv"], rows["softmax-kv-cat"]
    mib = 2**20
    return (f"Causal EVA decodes at a context of {context} with a cache of {eva['cache_bytes'] / kv['cache_bytes']:.2f}x "
            f"softmax's ({eva['cache_bytes'] / mib:.2f} MiB against {kv['cache_bytes'] / mib:.2f} MiB): its chunk "
            f"summaries, which grow with the context, are {eva['chunk_summary_bytes'] / mib:.2f} MiB of it, and the "
            f"rest, of constant size, {(eva['cache_bytes'] - eva['chunk_summary_bytes']) / mib:.2f} MiB. It takes "
            f"{1e3 * eva['latency_median_s']:.2f} ms a token there against {1e3 * kv['latency_median_s']:.2f} ms for "
            f"softmax with a preallocated cache and {1e3 * cat['latency_median_s']:.2f} ms with fairseq's "
            "concatenated one.")


def training():
    """Training step time and target tokens/s of EVA and softmax (training.json)."""
    labels = {"translation": "translation", "lm-128": "LM, 128 tokens", "lm-1024": "LM, 1024 tokens"}
    rows = load("training.json")["results"]
    rate = {(r["setting"], r["attention"]): r["tokens_per_s"] for r in rows}
    lines = ["| setting | attention | target tokens a step | median step (s) | target tokens/s | EVA / softmax |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        vs = (f" {rate[r['setting'], 'eva'] / rate[r['setting'], 'softmax']:.2f} " if r["attention"] == "eva"
              else " ")
        lines.append(f"| {labels.get(r['setting'], r['setting'])} | {r['attention']} | {r['tokens_per_step']:.0f} "
                     f"| {r['step_s']:.3f} | {r['tokens_per_s']:.0f} |{vs}|")
    return "\n".join(lines)


def training_summary():
    """EVA's median step time against softmax's in each setting of training.json, and the tokens/s ratio."""
    rows = {(r["setting"], r["attention"]): r for r in load("training.json")["results"]}
    settings = list(dict.fromkeys(setting for setting, _ in rows))

    def step(setting):
        return f"{rows[setting, 'eva']['step_s'] / rows[setting, 'softmax']['step_s']:.2f}x"

    def rate(setting):
        return f"{rows[setting, 'eva']['tokens_per_s'] / rows[setting, 'softmax']['tokens_per_s']:.2f}x"

    labels = {"translation": "translation (sentences of a few dozen tokens)", "lm-128": "LM blocks of 128 tokens",
              "lm-1024": "LM blocks of 1,024 tokens"}
    return ("For the tiny configurations on the CPU, an EVA step takes " + listed(
        [f"{step(s)} softmax's time in {labels.get(s, s)}" for s in settings]) + " (the median step), so EVA trains "
        + listed([f"{rate(s)}" for s in settings]) + " softmax's target tokens a second. One timed run, no seeds.")


def decoding_summaries():
    """The size of causal EVA's chunk summaries in decoding.json: 2 (keys and values) x the chunks of the tokens
    cached x d_model floats, where the tokens cached are the context and the timed tokens after it."""
    record = load("decoding.json")
    rows = [r for r in record["results"] if r["mechanism"] == "eva-causal"]
    chunk, d_model, floats = 8, 512, 4  # causal EVA's chunk size, d_model and float32 of the run (the text below)
    extra = {round(r["chunk_summary_bytes"] / (2 * d_model * floats) * chunk - r["context"]) for r in rows}
    (timed,) = extra  # the same number of tokens beyond the context at every length
    return (f"The summaries grow as 2 x (L + {timed}) / {chunk} x {d_model} floats at every context L of the record: "
            f"the cache's largest size, after the {timed} timed tokens.")


def busy_machine():
    """Training time of the README's LM command alone and beside another busy process (busy_machine/results.json)."""
    from benchmarks import busy_machine as bm

    def setting(name):
        return name if name == "default" else f"`{name}`"

    record = load("busy_machine", "results.json")
    lines = ["| setting of the training | the other process | training s "
             f"({record['updates']} updates) | x default alone | the other process's speed |",
             "|---|---|---|---|---|"]
    for r in record["rows"]:
        other = {bm.ALONE: "none", bm.BESIDE_DEFAULT: "default", bm.BESIDE_SAME: setting(r["setting"])}[r["machine"]]
        speed = f" {r['neighbour_rate_ratio']:.2f} of alone " if "neighbour_rate_ratio" in r else " "
        lines.append(f"| {setting(r['setting'])} | {other} | {r['median_s']:.1f} | {r['ratio_to_default_alone']:.2f} "
                     f"|{speed}|")
    return "\n".join(lines)


# --- GPU records: every table and figure says the commit it measured ---------------------------------------------

GPU_RECORDS = ("triton_check", "correctness_all_kernels", "correctness_triton", "profile_after_seed_fix",
               "clean_exit_and_profile", "before_triton")


def measured_at(record):
    """One line naming what a GPU record measured: its commit, device and date (meta.json), and that the layer has
    changed since without a GPU run."""
    meta = load("gpu", record, "meta.json")
    commit = meta["commit"].split()[0]
    at = "at an unrecorded commit" if commit in ("unknown", "not") else f"at commit {commit}"
    return (f"Measured {at} on an NVIDIA H200 ({meta['date']}; record `benchmarks/results/gpu/{record}/`); the layer "
            "has changed since, and the code as it is now has not run on a GPU.")


def gpu_note(record):
    return lambda: measured_at(record)


def gpu_json(record, name):
    return load("gpu", record, name)


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


def ratio_span(ratios):
    low, high = f"{ratios[0]:.2f}", f"{ratios[-1]:.2f}"
    return f"{low}x" if low == high else f"{low}-{high}x"


def gpu_paper_configs():
    runs, ratios = paper_config_runs(), paper_config_ratios()
    lines = ["| config (60 updates each, on the bundled sample) | EVA words/s | softmax words/s | EVA / softmax |",
             "|---|---|---|---|"]
    for eva, softmax in PAPER_PAIRS:
        sm = " and ".join(f"{w:,.0f}" for w in runs[softmax]) + (" (two runs)" if len(runs[softmax]) == 2 else "")
        lines.append(f"| {eva} vs {softmax} | {runs[eva][0]:,.0f} | {sm} | {ratio_span(ratios[eva])} |")
    return "\n".join(lines) + "\n\n" + measured_at("triton_check")


def quoted(table, *rows):
    """The paper's measures of the rows (benchmarks/paper.json), as the README quotes them."""
    return ", ".join(str(paper.measure(table, row)) for row in rows)


MLM_SAMPLE = ("at the sample's scale (2 layers of 128, blocks of 512, 256 pieces; [the table](docs/results.md#the-masked-"
              "lm-table-at-the-samples-scale)), {mlm_seeds} seeds: test perplexity ")

# The README's configs table: the paper's numbers as the paper quotes them (not measured here), and what has been
# run of each config; the words/s ratios come from the Triton check's paper_configs runs.
README_CONFIGS = [
    ("`wmt14_en_de_eva16`", f"BLEU {quoted('mt', 'eva16')}",
     "at the sample's scale ({mt_scale}; \\|E\\| = 4, C = 4), {mt_seeds} seeds: "
     "test BLEU {mt_eva16}; 60 fp16 updates on the sample, one H200: {wmt14_en_de_eva16} softmax's words/s"),
    ("`wmt14_en_de_eva32`", f"BLEU {quoted('mt', 'eva32')}",
     "at the sample's scale (\\|E\\| = 8, C = 4, as `make demo`): test BLEU {mt_eva32}"),
    ("`wmt14_en_de_eva64`", f"BLEU {quoted('mt', 'eva64')}",
     "at the sample's scale (\\|E\\| = 16, C = 4): test BLEU {mt_eva64}"),
    ("`wmt14_en_de_softmax`", f"BLEU {quoted('mt', 'softmax')}",
     "at the sample's scale: test BLEU {mt_softmax}; words/s on the H200"),
    ("`wikitext103_eva_16l`", f"test perplexity {quoted('lm', 'eva_16l')}", "only in `make demo`, at 2 layers of 64 on "
     "the sample ([the demo's table](#quick-start)); 60 fp16 updates, one H200: {wikitext103_eva_16l} softmax's words/s"),
    ("`wikitext103_softmax_16l`", "baseline", "words/s on the H200"),
    ("`wikitext103_eva_32l`", f"test perplexity {quoted('lm', 'eva_32l')}", "not run"),
    ("`wikitext103_softmax_32l`", "baseline", "not run"),
    ("`mlm_eva_2048`", f"validation perplexity {quoted('mlm', 'eva_2048')}", MLM_SAMPLE + "{mlm_eva_2048}"),
    ("`mlm_eva_4096`", f"validation perplexity {quoted('mlm', 'eva_4096')}",
     "60 fp16 updates on the sample, one H200: {mlm_eva_4096} softmax's words/s"),
    ("`mlm_softmax_2048`", quoted("mlm", "softmax_2048"), MLM_SAMPLE + "{mlm_softmax_2048}"),
    ("`mlm_softmax_4096`", quoted("mlm", "softmax_4096"), "words/s on the H200"),
    ("`mlm_local_2048`, `mlm_performer_2048`, `mlm_linformer_2048`, `mlm_reformer_2048`, `mlm_lara_2048`, "
     "`mlm_combiner_2048`, `mlm_long_short_2048`",
     f"the masked-LM table's baselines (Combiner {quoted('mlm', 'combiner_2048')}, Transformer-LS "
     f"{quoted('mlm', 'long_short_2048')}, Reformer {quoted('mlm', 'reformer_2048')})",
     MLM_SAMPLE + "{mlm_local_2048}, {mlm_performer_2048}, {mlm_linformer_2048}, {mlm_reformer_2048}, "
     "{mlm_lara_2048}, {mlm_combiner_2048}, {mlm_long_short_2048}; not run at size"),
    ("`wmt14_en_de_performer128`, `wmt14_en_de_lara16`, `wmt14_en_de_lara32`, `wmt14_en_de_lara64`",
     f"BLEU {quoted('mt', 'performer128', 'lara16', 'lara32', 'lara64')} (from the LARA paper)",
     "at the sample's scale (32 features; 4, 8, 16 landmarks): test BLEU {mt_performer128}, {mt_lara16}, "
     "{mt_lara32}, {mt_lara64} ([the table](docs/results.md#the-translation-table-at-the-samples-scale)); not run at "
     "size"),
    ("`wikitext103_elu_16l`, `wikitext103_rfa_16l`, `wikitext103_t2r_16l`",
     "the Wikitext-103 table's baselines (quoted there at 32 layers)",
     "not run at size; each trains and is scored by fairseq-eval-lm on the sample in `make test-slow`"),
]


def translation_cells():
    """The translation table at the sample's scale, for the configs table: {mt_ROW: its test BLEU, the mean over
    seeds (lowest-highest)}, the number of seeds and the model's size."""
    from benchmarks.common import script

    paper_table = script("paper_table")
    runs = paper_table.collect("mt", os.path.join(RESULTS, "translation_table"))
    seeds = {len(rs) for rs in runs.values()}
    return {**{f"mt_{row}": paper_table.spread_text([r["result"]["bleu"] for r in rs]) for row, rs in runs.items()},
            "mt_seeds": "/".join(map(str, sorted(seeds))), "mt_scale": "2+2 layers of 64"}


def mlm_cells():
    """The masked-LM table at the sample's scale, for the configs table: {mlm_ROW: its test perplexity, the mean over
    seeds (lowest-highest)} and the number of seeds."""
    from benchmarks.common import script

    runs, _ = mlm_table_runs()
    spread = script("paper_table").spread_text
    return {**{f"mlm_{row}": spread([r["result"]["ppl"] for r in rs]) for row, rs in runs.items()},
            "mlm_seeds": "/".join(map(str, sorted({len(rs) for rs in runs.values()})))}


def readme_paper_configs():
    ratios = {**{eva: ratio_span(r) for eva, r in paper_config_ratios().items()}, **translation_cells(), **mlm_cells()}
    meta = load("fidelity", "meta.json")
    lines = ["| config | paper | parameters at full size (the paper's) | measured here |", "|---|---|---|---|"]
    lines += [f"| {config} | {paper} | {fidelity_params(config)} | {measured.format(**ratios)} |"
              for config, paper, measured in README_CONFIGS]
    return "\n".join(lines) + (
        f"\n\nThe parameters: counted at commit {meta['commit']} ({meta['date']}) with the paper's dictionaries "
        "([the table](docs/results.md#the-papers-configs-at-full-size); record "
        "`benchmarks/results/fidelity/`). The words/s: " + measured_at("triton_check"))


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


# --- learning records ---------------------------------------------------------------------------------------------

def curve(*path):
    with open(os.path.join(RESULTS, *path, "curve.jsonl")) as f:
        return [json.loads(line) for line in f]


def cost_an_update(*path):
    last = curve(*path)[-1]
    return last["cpu_s"] / last["updates"]


MLM_H200_UPDATES = (3000, 4750, 6250, 8750)  # the masked LM on an H200: the points of equal updates the page shows
MLM_H200_ROWS = {"exact": [("mlm_h200_eva_exact", "mlm-exact-seed2")],
                 "EVA": [("mlm_h200_eva_exact", "mlm-eva-32-16"), ("mlm_h200_eva_exact", "mlm-eva-32-16-seed2")],
                 "local": [("mlm_h200_local", "mlm-local-32"), ("mlm_h200_local", "mlm-local-32-seed2")]}


def mlm_h200():
    """valid_small perplexity at equal updates (the curve files, rounded once) and test, as benchmarks.mlm_table reads them."""
    from benchmarks import mlm_table

    updates = MLM_H200_UPDATES
    rows = [("exact, seed 2", [("mlm_h200_eva_exact", "mlm-exact-seed2")]),
            ("EVA (32, 16)", [("mlm_h200_eva_exact", "mlm-eva-32-16"), ("mlm_h200_eva_exact", "mlm-eva-32-16-seed2")]),
            ("local (32)", [("mlm_h200_local", "mlm-local-32"), ("mlm_h200_local", "mlm-local-32-seed2")])]
    head = [f"{updates[0]:,} updates", *(f"{u:,}" for u in updates[1:])]
    lines = ["| row | " + " | ".join(head) + " | test (masked tokens) |", "|---" * 6 + "|"]
    for label, runs in rows:
        curves = [mlm_table.from_curve(*run) for run in runs]
        cells = [", ".join(f"{c[u]:.2f}" for c in curves) for u in updates]
        tests = ", ".join(f"{load(*run, 'test_ppl.json')['test']:.2f}" for run in runs)
        at = ", ".join(f"{curve(*run)[-1]['updates']:,}" for run in runs)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {tests} at {at} updates |")
    warm = mlm_table.from_progress(os.path.join(RESULTS, "mlm_h200_warmup1000", "progress_exact_6.5.log"))
    cells = [f"{warm[u]:.1f}" if u in warm else "" for u in updates]
    lines.append("| exact, seed 1, warm-up 1000 (the progress log: one decimal) | " + " | ".join(cells) + " | "
                 + exact_warmup1000_test() + " |")
    return "\n".join(lines)


def exact_warmup1000_test():
    """The warm-up 1000 exact row's test perplexity and updates, from its report."""
    with open(os.path.join(RESULTS, "mlm_h200_warmup1000", "results_exact.md")) as f:
        row = next(line for line in f if line.startswith("| exact | 1 |"))
    cells = [c.strip() for c in row.strip("|\n").split("|")]
    return f"{float(cells[6]):.2f} at {int(cells[3]):,} updates"


def causal_lm_updates():
    """valid_small perplexity of the causal LM's six runs at equal updates, as benchmarks.lm_tables reads them."""
    from benchmarks import lm_tables

    head = ["updates", *lm_tables.ROWS, "local minus EVA", "EVA's share (means)", "EVA's share (seeds)"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for p in lm_tables.UPDATES:
        v = {name: lm_tables.at_updates(c, p) for name, c in lm_tables.curves().items()}
        cells = [f"{p:,}", *("-" if x is None else f"{x:.2f}" for x in v.values()), *lm_tables.comparison(v)[3:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def causal_lm_cpu_time(minutes=(30, 90, 180), test=180):
    """valid_small perplexity at equal CPU time (interpolated) and test at context 0 / 256, as benchmarks.lm_tables
    reads them; the comparison columns compare valid, and context 256 on test."""
    from benchmarks import lm_tables

    head = ["CPU minutes", *lm_tables.ROWS, "local minus EVA", "EVA's share (means)"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for m in minutes:
        v = {name: lm_tables.at_minutes(c, m) for name, c in lm_tables.curves().items()}
        cells = [f"{m}, valid", *("-" if x is None else f"{x:.2f}" for x in v.values()), *lm_tables.comparison(v)[3:5]]
        lines.append("| " + " | ".join(cells) + " |")
    tests = {name: lm_tables.test_at(d, test) for name, d in lm_tables.ROWS.items()}
    cells = [f"{t['0']:.2f} / {t['256']:.2f}" for t in tests.values()]
    at256 = {name: t["256"] for name, t in tests.items()}
    lines.append(f"| {test}, test | " + " | ".join(cells + lm_tables.comparison(at256)[3:5]) + " |")
    return "\n".join(lines)


RECALL_ROWS = [("exact", [("recall_10000_updates", "exact")]),
               ("exact, seed 2", [("recall_by_chunk_size", "exact-seed2")]),
               ("EVA, chunks of 4 (seeds 1, 2)", [("recall_10000_updates", "eva4"), ("recall_by_chunk_size", "eva4-seed2")]),
               ("EVA, chunks of 8", [("recall_by_chunk_size", "eva8")]),
               ("EVA, chunks of 16", [("recall_by_chunk_size", "eva16")]),
               ("local (window 64)", [("recall_7000_updates", "local")])]


def recall_shares(ppl):
    """The share of exact attention's recall against local attention's (seed 1 of each) of each recall report,
    as scripts/recall.py's report computes it."""
    from benchmarks.common import script

    exact, local = (load(*RECALL_ROWS[i][1][0], "recall.json")["repeated"] for i in (0, -1))
    return [script("recall").recall_share(p["repeated"], local, exact) for p in ppl]


def recall():
    """Test perplexity on the first half and the repeated part of the recall blocks, and the share of exact
    attention's recall against local attention's (recall_shares)."""
    lines = ["| row | updates | test, first half A | repeated part B | share | B without the chunks at test |",
             "|---|---|---|---|---|---|"]
    for label, runs in RECALL_ROWS:
        ppl = [load(*run, "recall.json") for run in runs]
        updates = ", ".join(dict.fromkeys(f"{curve(*run)[-1]['updates']:,}" for run in runs))
        shares = recall_shares(ppl)
        bold = "**" if label.startswith("EVA") or label.startswith("exact") else ""
        bold_share = "**" if label.startswith("EVA") else ""
        repeated = bold + ", ".join(f"{p['repeated']:.2f}" for p in ppl) + bold
        share = bold_share + ", ".join(f"{s:.0%}" for s in shares) + bold_share
        cut = ", ".join(f"{p['without chunks']['repeated']:.2f}" for p in ppl if "without chunks" in p) or "-"
        first = ", ".join(f"{p['first half']:.2f}" for p in ppl)
        lines.append(f"| {label} | {updates} | {first} | {repeated} | {share} | {cut} |")
    return "\n".join(lines)


def eva_cost_against_local():
    """The causal LM's CPU time an update of EVA against local attention, seeds 1 and 2, over each whole run."""
    return [cost_an_update("causal_lm_v2k_180min", f"eva{s}") / cost_an_update("causal_lm_v2k_180min", f"local{s}")
            for s in ("", "-seed2")]


def causal_lm_costs():
    """CPU time an update of EVA against local attention and of exact attention against EVA, each seed over its
    whole run (180 CPU minutes)."""
    eva = eva_cost_against_local()
    exact = [cost_an_update("causal_lm_v2k", f"exact{s}") / cost_an_update("causal_lm_v2k_180min", f"eva{s}")
             for s in ("", "-seed2")]
    return (f"- Over the first 180 CPU minutes EVA costs {eva[0]:.2f}x and {eva[1]:.2f}x local attention's CPU time an "
            f"update (seeds 1 and 2), exact attention {exact[0]:.2f}x and {exact[1]:.2f}x EVA's.")


def chunks_of_4():
    """CPU time an update of chunks of 4 against chunks of 8 (and local), at equal updates up to the shorter run's
    end and over each whole run."""
    record = "causal_lm_chunks_of_4"
    c8 = {r["updates"]: r["cpu_s"] for r in curve(record, "eva")}
    lines = ["| row | updates | CPU s | CPU s an update | against chunks of 8: whole run, at equal updates |",
             "|---|---|---|---|---|"]
    for row, label in (("eva-128-4", "chunks of 4, seed 1"), ("eva-128-4-seed2", "chunks of 4, seed 2"),
                       ("eva", "chunks of 8"), ("local", "local")):
        points = curve(record, row)
        last = points[-1]
        whole = cost_an_update(record, row) / cost_an_update(record, "eva")
        equal = [r["cpu_s"] / c8[r["updates"]] for r in points if r["updates"] in c8 and r["updates"] >= 1000]
        compare = f"{whole:.2f}x, {min(equal):.2f}-{max(equal):.2f}x" if row != "eva" else "-"
        lines.append(f"| {label} | {last['updates']:,} | {last['cpu_s']:.0f} | {last['cpu_s'] / last['updates']:.3f} "
                     f"| {compare} |")
    return "\n".join(lines)


def learning_summary():
    """README's table: test perplexity of exact, EVA and local in the three settings, EVA's share of local's gap and
    its cost an update, each from its record."""
    import math

    from benchmarks import lm_tables

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
    test = {row: [load(*run, "test_ppl.json")["test"] for run in rs] for row, rs in runs.items()}
    mean = {row: sum(xs) / len(xs) for row, xs in test.items()}
    tokens = ", ".join(f"{curve(*run)[-1]['updates'] * 128 * 512 / 1e6:.0f}M" for run in runs["eva"])
    costs = [cost_an_update(*e) / cost_an_update(*lo) for e, lo in zip(runs["eva"], runs["local"])]
    lines.append(f"| masked LM on an H200, 128 blocks of 512 an update (EVA: {tokens} tokens) | {fmt(test['exact'], ': seed 2')} "
                 f"| {fmt(test['eva'])} | {fmt(test['local'])} "
                 f"| {100 * lm_tables.share(mean['exact'], mean['eva'], mean['local']):.0f}% "
                 f"| {ratio_span(sorted(costs))} local's (two seeds) |")
    # recall: perplexity on the repeated part, share in log perplexity
    recall = {"exact": [("recall_10000_updates", "exact")],
              "eva": [("recall_10000_updates", "eva4"), ("recall_by_chunk_size", "eva4-seed2")],
              "local": [("recall_7000_updates", "local")]}
    b = {row: [load(*run, "recall.json")["repeated"] for run in rs] for row, rs in recall.items()}
    shares = [lm_tables.share(math.log(b["exact"][0]), math.log(e), math.log(b["local"][0])) for e in b["eva"]]
    costs = [cost_an_update(*e) / cost_an_update(*recall["local"][0]) for e in recall["eva"]]
    lines.append(f"| recall of a span beyond the window (perplexity on it), "
                 f"{curve(*recall['eva'][0])[-1]['updates']:,} updates (local: "
                 f"{curve(*recall['local'][0])[-1]['updates']:,}), chunks of 4 | {fmt(b['exact'])} "
                 f"| {fmt(b['eva'])} | {fmt(b['local'])} | {', '.join(f'{100 * s:.0f}%' for s in shares)} "
                 f"in log perplexity | {', '.join(f'{c:.2f}x' for c in costs)} local's (seed 1, seed 2) |")
    return "\n".join(lines)


# --- the paper's configs at full size ------------------------------------------------------------------------------

PARAMS_TOLERANCE, FLOPS_TOLERANCE = 0.01, 0.05  # beyond these a difference is fixed in the config or explained


def fidelity_rows():
    """{row: the fidelity record's row}: each config's parameters and layer multiply-adds beside the paper's."""
    return {r["config"]: r for r in load("fidelity", "fidelity.json")["results"]}


def millions(n):
    return f"{n / 1e6:.2f}M" if n < 1e8 else f"{n / 1e6:.1f}M"


def difference(ours, paper):
    percent = f"{100 * (ours / paper - 1):+.1f}%"
    return "0.0%" if percent[1:] == "0.0%" else percent


def beyond_tolerance(r):
    """Which of the row's two numbers differ from the paper's by more than the tolerances."""
    found = []
    if r["paper_params_m"] and abs(r["params"] / (r["paper_params_m"] * 1e6) - 1) > PARAMS_TOLERANCE:
        found.append("parameters")
    if r["paper_flops_g"] and abs(r["macs"] / (r["paper_flops_g"] * 1e9) - 1) > FLOPS_TOLERANCE:
        found.append("multiply-adds")
    return found


def fidelity():
    """Every config at full size: parameters and the layers' multiply-adds of one sequence, beside the paper's
    #Params and FLOPs, and the rows whose difference is beyond the tolerances."""
    meta = load("fidelity", "meta.json")
    lines = ["| config | parameters | paper's #Params | difference | multiply-adds of the layers, one sequence "
             "(length) | paper's FLOPs | difference | the paper's numbers from |", "|---" * 8 + "|"]
    for name, r in fidelity_rows().items():
        params, flops = r["paper_params_m"], r["paper_flops_g"]
        macs = f"{r['macs'] / 1e9:.1f}G ({r['length']})" if "macs" in r else "-"
        lines.append(
            f"| `{name}` | {millions(r['params'])} | {f'{params:g}M' if params else '-'} "
            f"| {difference(r['params'], params * 1e6) if params else '-'} | {macs} | {f'{flops:g}G' if flops else '-'} "
            f"| {difference(r['macs'], flops * 1e9) if flops else '-'} | {r['paper_source'] or '-'} |")
    beyond = [f"`{name}` ({' and '.join(found)})" for name, r in fidelity_rows().items()
              if (found := beyond_tolerance(r))]
    lines += ["", f"Beyond 1% in parameters or 5% in multiply-adds: {', '.join(beyond) or 'none'}; each is explained "
              "in [docs/design.md](design.md#the-papers-configs-at-full-size). Counted at commit "
              f"{meta['commit']} ({meta['date']}, {meta['device']}; record `benchmarks/results/fidelity/`)."]
    return "\n".join(lines)


def fidelity_params(configs):
    """The README's cell for a row of configs: each one's parameters at full size, with the paper's in brackets."""
    rows = fidelity_rows()
    cells = []
    for name in re.findall(r"`(\w+)`", configs):
        r = rows[name]
        paper = f" ({r['paper_params_m']:g}M)" if r["paper_params_m"] else ""
        cells.append(millions(r["params"]) + paper)
    return ", ".join(cells)


# --- operation counts -----------------------------------------------------------------------------------------------

def op_count():
    """The op_count record's table (benchmarks/results/op_count/), and the commit it counted."""
    meta = load("op_count", "meta.json")
    with open(os.path.join(RESULTS, "op_count", "op_count.md")) as f:
        rows = [line.split("|")[1:4] for line in f if line.startswith("| ") and not line.startswith("| layer")]
    lines = ["| layer, one forward + backward | operations | new tensors |", "|---|---|---|"]
    lines += [f"| {name.strip()} | {ops.strip()} | {new.strip()} |" for name, ops, new in rows]
    return "\n".join(lines) + (f"\n\nCounted at commit {meta['commit']} ({meta['date']}; {meta['device']}; record "
                                "`benchmarks/results/op_count/`).")


def baselines_small(task, record="baselines_small", tables=3):
    """The paper's baselines learning beside EVA at small scale (a record of scripts/long_context.py's rows): the
    first `tables` tables of the harness's report for the task (each row at the end of its CPU-time budget, then
    valid perplexity at equal updates and at equal CPU time), rendered by the harness's own code from the record."""

    def render():
        from benchmarks.common import script

        long_context = script("long_context")
        rows = long_context.row_results(os.path.join(RESULTS, record), task)
        lines = long_context.task_tables(rows, task, 256)
        blank = [i for i, line in enumerate(lines) if not line and i > 2]  # each table ends at a blank line
        return "\n".join(lines[:blank[2 * tables - 2]]).strip()

    return render


BASELINE_NAMES = {name: mechanism.display_name for name, mechanism in registry.MECHANISMS.items()}


def baselines_summary(task, record="baselines_small"):
    """The rows of a baselines record in order, as sentences: at the end of the CPU-time budget (validation and
    test), at the most updates every run reached, and the updates each made; with two seeds, their largest spread."""

    def render():
        from benchmarks.common import script

        rows = {}
        for (row, _), r in script("long_context").row_results(os.path.join(RESULTS, record), task).items():
            rows.setdefault(row, []).append(r)

        def mean(xs):
            return sum(xs) / len(xs)

        def ordered(values, fmt="{:.1f}", reverse=False):
            return ", ".join(f"{BASELINE_NAMES.get(row, row)} {fmt.format(v)}"
                             for row, v in sorted(values.items(), key=lambda item: item[1], reverse=reverse))

        runs = [r for rs in rows.values() for r in rs]
        common = max(u for u in {p["updates"] for p in runs[0]["curve"]}
                     if all(any(p["updates"] == u for p in r["curve"]) for r in runs))

        def at(r, u):
            return next(p["ppl"] for p in r["curve"] if p["updates"] == u)

        test_key = "256" if task == "lm" else "test"
        budget = mean([r["budget"] for r in runs])
        end = {row: mean([r["last"]["ppl"] for r in rs]) for row, rs in rows.items()}
        test = {row: mean([r["test"][test_key] for r in rs]) for row, rs in rows.items()}
        equal = {row: mean([at(r, common) for r in rs]) for row, rs in rows.items()}
        updates = {row: mean([r["last"]["updates"] for r in rs]) for row, rs in rows.items()}
        seeds = max(len(rs) for rs in rows.values())
        of = f" (the mean of {seeds} seeds)" if seeds > 1 else " (one seed)"
        lines = [f"- After {budget:g} CPU minutes{of}, valid_small perplexity: {ordered(end)}; test perplexity"
                 f"{' at context 256' if task == 'lm' else ' on the masked tokens'}: {ordered(test)}.",
                 f"- At {common:,} updates, the most that every run reached: {ordered(equal)}.",
                 f"- Updates in the {budget:g} CPU minutes: {ordered(updates, '{:.0f}', reverse=True)}."]
        if seeds > 1:
            pairs = [rs for rs in rows.values() if len(rs) == 2]
            spread_end = max(abs(a["last"]["ppl"] - b["last"]["ppl"]) for a, b in pairs)
            spread_equal = max(abs(at(a, common) - at(b, common)) for a, b in pairs)
            lines.append(f"- The largest gap between a row's two seeds: {spread_end:.1f} at the end of the budget, "
                         f"{spread_equal:.1f} at {common:,} updates.")
        return "\n".join(lines)

    return render


def demo():
    """The README's demo table: what a fresh `make demo` gave (benchmarks/results/demo/, its results.json)."""
    record, meta = load("demo", "results.json"), load("demo", "meta.json")
    lines = ["| `make demo` | updates | test BLEU, compound-split | sacreBLEU | first test sentences: hypothesis (reference) |",
             "|---|---|---|---|---|"]
    for row in record["translation"].values():
        first = "; ".join(f"{t['hypothesis']} ({t['reference']})" for t in row["first_test_translations"])
        lines.append(f"| translation, {row['label']} | {row['updates']} | {row['bleu_compound_split']:.2f} "
                     f"| {row['sacrebleu']:.2f} | {first.replace('|', '&#124;')} |")
    for row in record["language_model"].values():
        ppl = ", ".join(f"{r['ppl']:.1f} (context {r['context']})" for r in row["ppl"] if r["subset"] == "test")
        lines.append(f"| language model, {row['label']} | {row['updates']} | test perplexity {ppl} | | |")
    commit = meta["commit"]
    millions = [int(str(row["params"]).replace(",", "")) / 1e6 for row in record["translation"].values()]  # "337,344"
    params = " and ".join(dict.fromkeys(f"{m:.2f}M" for m in millions))
    lines += ["", f"Translation models of {params} parameters. Demo wall time {record['wall_seconds']} s on "
              f"{meta['device']}; {meta['date']}, commit {commit} (record `benchmarks/results/demo/`)."]
    return "\n".join(lines)



def translation_table():
    """The paper's translation table at the sample's scale (scripts/paper_table.py's record): each row's test BLEU,
    the mean over seeds with their range, and the orderings the seeds' spread decides."""
    from benchmarks.common import script

    paper_table = script("paper_table")
    runs = paper_table.collect("mt", os.path.join(RESULTS, "translation_table"))
    meta = load("translation_table", "meta.json")
    return "\n".join(paper_table.table_lines("mt", "sample", runs)) + f"\n\nCommand: `{meta['command']}`."


MLM_SEARCH = [  # setting, record of its runs, its rows, the perplexity of predicting by frequency (its plateau)
    ("2,000 pieces, 8 blocks an update, warm-up 100 (the baselines above)", "baselines_small", ("softmax", "eva"),
     "frequency_v2000.json"),
    ("256 pieces, 4 blocks an update, warm-up 500", "mlm_plateau_search", ("softmax", "eva"), "frequency_v256.json"),
]


def mlm_plateau_search():
    """The masked-LM search on the CPU (scripts/long_context.py's records beside the perplexity of predicting by
    frequency, scripts/frequency_baseline.py): where each row goes below that plateau and below 3/4 of it."""
    from benchmarks.common import script

    def first_below(curve, level):
        point = next((p for p in curve if p["ppl"] < level), None)
        return "-" if point is None else f"{point['updates']:,} updates, {point['cpu_s'] / 60:.1f} CPU min"

    lines = ["| setting (blocks of 512, 2 layers of 128) | row | plateau: frequency ppl | below it from | below 3/4 "
             "of it from | at the end: updates, CPU min, valid_small ppl | test ppl (masked tokens) |",
             "|---|---|---|---|---|---|---|"]
    for setting, record, names, frequency in MLM_SEARCH:
        plateau = load("mlm_plateau_search", frequency)["perplexity"]
        for (row, seed), r in script("long_context").row_results(os.path.join(RESULTS, record), "mlm").items():
            if row not in names:
                continue
            last = r["last"]
            lines.append(f"| {setting} | {row}{'' if seed == 1 else f', seed {seed}'} | {plateau:.1f} | "
                         f"{first_below(r['curve'], plateau)} | {first_below(r['curve'], 0.75 * plateau)} | "
                         f"{last['updates']:,}, {last['cpu_s'] / 60:.1f}, {last['ppl']:.1f} | {r['test']['test']:.1f} |")
    meta = load("mlm_plateau_search", "meta.json")
    return "\n".join(lines) + f"\n\nCommand (the second setting): `{meta['command']}`."


def rule_pairs(scores, higher=False):
    """[(better, worse)] of the pairs of rows that the tables' rule orders (scripts/paper_table.py's beyond_spread:
    every seed of one better than every seed of the other; never a row of one seed), from {row: [each seed's
    value]}."""
    from benchmarks.common import script

    beyond = script("paper_table").beyond_spread
    return [(a, b) for a in scores for b in scores if a != b and beyond(scores[a], scores[b], higher)]


def rule_sentence(scores, higher=False):
    """The rule's verdict on rows {name: [each seed's value]} as words: 'A below B and C; B and C within the
    spread' (below: lower is better; above: higher), and the rows of one seed, which it orders against none."""
    word = "above" if higher else "below"
    pairs = rule_pairs(scores, higher)
    single = [row for row, values in scores.items() if len(values) < 2]
    mean = {row: sum(v) / len(v) for row, v in scores.items()}
    order = sorted((row for row in scores if row not in single), key=lambda row: -mean[row] if higher else mean[row])
    parts = [f"{a} {word} {listed([b for x, b in pairs if x == a])}" for a in order if any(x == a for x, _ in pairs)]
    within = [f"{a} and {b}" for i, a in enumerate(order) for b in order[i + 1:]
              if (a, b) not in pairs and (b, a) not in pairs]
    if within:
        parts.append(("every other pair" if parts and len(within) > 2 else listed(within)) + " within the spread")
    if single:
        parts.append(f"{listed(single)} (one seed) ordered against no row")
    return "; ".join(parts)


def rule_over(points, unit, higher=False):
    """For each pair of rows, the points of [(point, {row: [each seed's value]})] at which the rule orders it: 'A
    below B from P on' (at every point from P to the last), 'at P, Q', or within the spread at every point."""
    single = [row for row in points[-1][1] if all(len(values[row]) < 2 for _, values in points)]
    rows = [row for row in points[-1][1] if row not in single]
    words = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            found = []
            for x, y in ((a, b), (b, a)):
                hits = [p for p, values in points if (x, y) in rule_pairs({x: values[x], y: values[y]}, higher)]
                if hits and hits == [p for p, _ in points][-len(hits):]:
                    found.append(f"{x} {'above' if higher else 'below'} {y} from {hits[0]:,} {unit} on")
                elif hits:
                    found.append(f"{x} {'above' if higher else 'below'} {y} at {listed([f'{h:,}' for h in hits])} "
                                 f"{unit}")
            words.append(" and ".join(found) if found else f"{a} and {b} within the spread at every point")
    if single:
        words.append(f"{listed(single)} (one seed) ordered against no row")
    return "; ".join(words)


def causal_lm_rule():
    """The causal LM's exact, EVA and local rows (two seeds each) by the rule: at each point of equal updates and
    of equal CPU time (valid_small), and on test at context 256 at the end."""
    from benchmarks import lm_tables

    curves = lm_tables.curves()

    def by_row(values):
        return {row: lm_tables.seeds(values, row) for row in ("exact", "EVA", "local")}

    updates = [(u, by_row({n: lm_tables.at_updates(c, u) for n, c in curves.items()})) for u in lm_tables.UPDATES]
    minutes = [(m, by_row({n: lm_tables.at_minutes(c, m) for n, c in curves.items()})) for m in lm_tables.MINUTES]
    test = by_row({name: lm_tables.test_at(d, 180)["256"] for name, d in lm_tables.ROWS.items()})
    return updates, minutes, test


def causal_lm_orderings():
    """The causal LM's orderings by the rule at each point of its two tables and on test."""
    updates, minutes, test = causal_lm_rule()
    return (f"- By the rule of the tables (every seed of one row below every seed of the other), valid_small perplexity "
            f"at equal updates ({updates[0][0]:,} to {updates[-1][0]:,}): {rule_over(updates, 'updates')}.\n"
            f"- At equal CPU time ({minutes[0][0]} to {minutes[-1][0]} minutes): {rule_over(minutes, 'minutes')}.\n"
            f"- On test at context 256 after 180 CPU minutes: {rule_sentence(test)}.")


def mlm_h200_rule(updates=MLM_H200_UPDATES):
    """{row: [each seed's value]} of the masked LM on an H200 at each of `updates` (valid_small) and on test."""
    from benchmarks import mlm_table

    points = [(u, {row: [mlm_table.from_curve(*run)[u] for run in runs] for row, runs in MLM_H200_ROWS.items()})
              for u in updates]
    test = {row: [load(*run, "test_ppl.json")["test"] for run in runs] for row, runs in MLM_H200_ROWS.items()}
    return points, test


def mlm_h200_orderings():
    """The masked LM on an H200 by the rule, at equal updates (valid_small) and on test."""
    points, test = mlm_h200_rule()
    return (f"- By the rule of the tables, valid_small perplexity at equal updates: {rule_over(points, 'updates')}; on "
            f"test: {rule_sentence(test)}.")


def learning_orderings():
    """The learning section's answer as the rule orders it: the causal LM on test and at its last point of equal
    updates, the masked LM on an H200 on test, EVA and local in the baselines' comparison on test, and recall."""
    from benchmarks.common import script

    updates, _, test = causal_lm_rule()
    _, mlm_test = mlm_h200_rule()
    small = {}
    for (row, _), r in script("long_context").row_results(os.path.join(RESULTS, "baselines_small"), "lm").items():
        if row in ("eva", "local"):
            small.setdefault(BASELINE_NAMES[row], []).append(r["test"]["256"])
    return "\n".join([
        "By the rule of the tables (every seed of one row below every seed of the other in perplexity):", "",
        f"- causal LM, test at context 256 after 180 CPU minutes: {rule_sentence(test)}.",
        f"- causal LM, valid_small at {updates[-1][0]:,} updates: {rule_sentence(updates[-1][1])}.",
        f"- masked LM on an H200, test: {rule_sentence(mlm_test)}.",
        f"- the baselines' causal LM, test at context 256 after 10 CPU minutes: {rule_sentence(small)}.",
        "- recall: exact and local attention have one seed each, which the rule orders against no row."])


def translation_places():
    """Each row of the translation table by the rule (test BLEU): the rows it is above and below beyond the
    seeds' spread; the rest within it."""
    from benchmarks.common import script

    runs = script("paper_table").collect("mt", os.path.join(RESULTS, "translation_table"))
    scores = {row: [r["result"]["bleu"] for r in rs] for row, rs in runs.items()}
    pairs = rule_pairs(scores, higher=True)
    lines = []
    for row in scores:
        above = [b for a, b in pairs if a == row]
        below = [a for a, b in pairs if b == row]
        within = [r for r in scores if r != row and r not in above + below]
        parts = ([f"above {listed(above)}"] if above else []) + ([f"below {listed(below)}"] if below else [])
        parts.append(f"within the spread of {listed(within)}" if within else "within the spread of no row")
        lines.append(f"- {row}: " + "; ".join(parts) + ".")
    return "By the rule of the tables, test BLEU at the demo's 8 epochs:\n\n" + "\n".join(lines)


def baselines_orderings(task, record="baselines_small"):
    """A baselines record by the rule: at the end of the CPU-time budget (validation and test), at equal CPU time
    (each half budget) and at the most updates every run reached."""

    def render():
        from benchmarks.common import script

        long_context = script("long_context")
        rows = {}
        for (row, _), r in long_context.row_results(os.path.join(RESULTS, record), task).items():
            rows.setdefault(BASELINE_NAMES.get(row, row), []).append(r)
        runs = [r for rs in rows.values() for r in rs]
        common = max(u for u in {p["updates"] for p in runs[0]["curve"]}
                     if all(any(p["updates"] == u for p in r["curve"]) for r in runs))
        budget = min(r["budget"] for r in runs)
        test_key = "256" if task == "lm" else "test"

        def scores(value):
            """{row: [value of each seed]}; a seed without a value there (its curve starts later) left out."""
            found = {row: [v for v in map(value, rs) if v is not None] for row, rs in rows.items()}
            return {row: values for row, values in found.items() if values}

        minutes = [budget * k / 4 for k in (1, 2, 3)]
        timed = [(f"{m:g} CPU minute{'' if m == 1 else 's'}", scores(lambda r, m=m: long_context.ppl_at_cpu(r["curve"], m * 60)))
                 for m in minutes]
        lines = [f"- By the rule of the tables (every seed of one row below every seed of the other), valid_small "
                 f"perplexity after {budget:g} CPU minutes: {rule_sentence(scores(lambda r: r['last']['ppl']))}.",
                 f"- Test perplexity{' at context 256' if task == 'lm' else ' on the masked tokens'} after {budget:g} "
                 f"CPU minutes: {rule_sentence(scores(lambda r: r['test'][test_key]))}.",
                 *(f"- At {label} (valid_small): {rule_sentence(v)}." for label, v in timed),
                 f"- At {common:,} updates (valid_small): "
                 f"{rule_sentence(scores(lambda r: next(p['ppl'] for p in r['curve'] if p['updates'] == common)))}."]
        return "\n".join(lines)

    return render


def mlm_table_runs():
    """The masked-LM table at the sample's scale (scripts/long_context.py's rows, recorded in mlm_table/):
    {config row: [each seed's run, as scripts/paper_table.py's orderings take it]}, and the plateau."""
    from benchmarks.common import script

    rows = script("long_context").row_results(os.path.join(RESULTS, "mlm_table"), "mlm")
    runs = {}
    for (row, _), r in rows.items():
        runs.setdefault(f"{row}_2048", []).append({"result": {"ppl": r["test"]["test"]}, "last": r["last"]})
    return runs, load("mlm_table", "frequency_v256.json")["perplexity"]


MLM_MEASURE = "test perplexity (masked tokens)"


def whole_spread(values):
    """The mean of whole numbers (updates), and their lowest and highest in brackets where they differ."""
    mean = f"{sum(values) / len(values):.0f}"
    return mean if min(values) == max(values) else f"{mean} ({min(values)}-{max(values)})"


def mlm_table():
    """The paper's masked-LM table at the sample's scale: each row's test perplexity over the masked tokens (the
    masks fixed by the seed, the same for every row), the mean over seeds with their range, beside the paper's
    validation perplexity; where the rows end; and the orderings the seeds' spread decides."""
    from benchmarks.common import script

    paper_table = script("paper_table")
    runs, plateau = mlm_table_runs()
    lines = [f"| row | paper (validation ppl) | {MLM_MEASURE} | seeds | valid_small ppl at the end | of the plateau | "
             "updates | CPU min |", "|---|---|---|---|---|---|---|---|"]
    for row, rs in runs.items():
        measure = paper.measure("mlm", row)
        last = [r["last"] for r in rs]
        lines.append(f"| {row} | {'-' if measure is None else measure} | "
                     f"{paper_table.spread_text([r['result']['ppl'] for r in rs])} | {len(rs)} | "
                     f"{paper_table.spread_text([p['ppl'] for p in last])} | "
                     f"{paper_table.spread_text([p['ppl'] / plateau for p in last])} | "
                     f"{whole_spread([p['updates'] for p in last])} | "
                     f"{paper_table.spread_text([p['cpu_s'] / 60 for p in last])} |")
    meta = load("mlm_table", "meta.json")
    return "\n".join([*lines, "", *(f"- {line}" for line in paper_table.orderings("mlm", runs, MLM_MEASURE))]) + (
        f"\n\nThe plateau: {plateau:.1f}, the perplexity of predicting each masked token by its training frequency "
        f"(scripts/frequency_baseline.py). Command: `{meta['command']}`.")


def readme_translation_table():
    """The translation table's orderings at the sample's scale, as sentences (the table is on the results page)."""
    from benchmarks.common import script

    paper_table = script("paper_table")
    runs = paper_table.collect("mt", os.path.join(RESULTS, "translation_table"))
    by_mean, apart, *_ = paper_table.orderings("mt", runs)  # the pairs within the spread: on the results page
    return f"- {by_mean}\n- {apart}"

# --- the README's summaries: the sentences with numbers of its Results section, each from its record ---------------

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
    up = {(s["N"], s["mechanism"]): s["layer_speedup"] for s in load("speed_c_loop.json")["speedups"]}
    memory = {(s["N"], s["mechanism"]): s["memory_ratio"] for s in load("speed_c_loop_memory.json")["speedups"]}
    settings = [1 / s["layer_speedup"] for s in load("speed_paper_settings_r9.json")["speedups"]
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


def readme_learning():
    """What the far context gives each row of the causal LM (test at context 256 against 0), and recall by chunk size."""
    from benchmarks import lm_tables

    def gain(row):
        tests = [lm_tables.test_at(d, 180) for name, d in lm_tables.ROWS.items() if name.split()[0] == row]
        return [1 - t["256"] / t["0"] for t in tests]

    def percents(xs):
        return " and ".join(dict.fromkeys(f"{100 * x:.1f}%" for x in xs))

    share = {label: recall_shares([load(*run, "recall.json") for run in runs])
             for label, runs in RECALL_ROWS if label.startswith("EVA")}
    (first, shares), *others = [(label.split()[3], " and ".join(f"{100 * x:.0f}%" for x in xs))
                                for label, xs in share.items()]  # (chunk size, shares): 4 first
    chunks = [f"chunks of {first} keep {shares} of exact attention's", *(f"chunks of {c} {x}" for c, x in others)]
    return (f"- Exact attention's own gain from the far context (test at context 256 against 0) is "
            f"{percents(gain('exact'))} (two seeds) at 180 CPU minutes with 2,000 pieces; EVA gains "
            f"{percents(gain('EVA'))} and local attention {percents(gain('local'))}.\n"
            f"- The chunk size decides recall: {', '.join(chunks)}.")


def readme_busy_machine():
    """How much slower the README's LM command trained beside a busy process, with and without the fix."""
    rows = {(r["setting"], r["machine"]): r["ratio_to_default_alone"] for r in load("busy_machine", "results.json")["rows"]}
    return ("On a CPU that other jobs share, start them with `OMP_WAIT_POLICY=PASSIVE` (the scripts set it): beside one "
            f"other busy process the language-model command took {rows['default', 'beside a busy torch process']:.2f}x "
            "its time alone on 2 cores, and "
            f"{rows['OMP_WAIT_POLICY=PASSIVE', 'beside a busy torch process']:.2f}x with it "
            "([results](docs/results.md#on-a-shared-cpu)).")


TABLES = {
    "approximation-equal-cost-model": approximation_equal_cost("model"),
    "approximation-equal-cost-random": approximation_equal_cost("random"),
    "approximation-summary": approximation_summary,
    "mechanisms-speed-paper": mechanisms_speed("paper", (1024, 4096, 16384)),
    "mechanisms-speed-equal-cost": mechanisms_speed("equal-cost", (1024, 4096, 16384)),
    "gpu-correctness": gpu_correctness,
    "gpu-speed-tokens": gpu_speed_tokens,
    "gpu-profile": gpu_profile,
    "gpu-paper-configs": gpu_paper_configs,
    "gpu-paper-configs-readme": readme_paper_configs,
    "fidelity": fidelity,
    "mlm-h200": mlm_h200,
    "causal-lm-chunks-of-4": chunks_of_4,
    "causal-lm-costs": causal_lm_costs,
    "learning-summary": learning_summary,
    "op-count": op_count,
    "demo": demo,
    "translation-table": translation_table,
    "readme-translation-table": readme_translation_table,
    "translation-places": translation_places,
    "causal-lm-orderings": causal_lm_orderings,
    "mlm-h200-orderings": mlm_h200_orderings,
    "learning-orderings": learning_orderings,
    "baselines-orderings-lm": baselines_orderings("lm"),
    "baselines-orderings-mlm": baselines_orderings("mlm"),
    "training-summary": training_summary,
    "decoding-summaries": decoding_summaries,
    "mlm-plateau-search": mlm_plateau_search,
    "mlm-table": mlm_table,
    "baselines-small-lm": baselines_small("lm"),
    "baselines-small-mlm": baselines_small("mlm"),
    "baselines-summary-lm": baselines_summary("lm"),
    "rpe-table-lm": baselines_small("lm", record="rpe_table_lm", tables=1),
    "rpe-table-summary": baselines_summary("lm", record="rpe_table_lm"),
    "baselines-summary-mlm": baselines_summary("mlm"),
    "cpu-speed": cpu_speed,
    "cpu-speed-summary": cpu_speed_summary,
    "gpu-readme-exact": readme_exact,
    "readme-cpu-speed": readme_cpu_speed,
    "gpu-readme-speed": readme_gpu_speed,
    "readme-learning": readme_learning,
    "readme-busy-machine": readme_busy_machine,
    "paper-settings-cpu": paper_settings_cpu,
    "paper-settings-memory": paper_settings_memory,
    "approximation-bidirectional": approximation_grid(False),
    "approximation-causal": approximation_grid(True),
    "decoding": decoding,
    "decoding-summary": decoding_summary,
    "training": training,
    "busy-machine": busy_machine,
    "causal-lm-updates": causal_lm_updates,
    "causal-lm-cpu-time": causal_lm_cpu_time,
    "recall": recall,
    **{f"gpu-measured-{record}": gpu_note(record) for record in GPU_RECORDS},
}


@contextlib.contextmanager
def records_read():
    """The records (a top-level file or folder of benchmarks/results/, or gpu/FOLDER) that files opened meanwhile
    belong to: what a block was rendered from, whichever helper read it."""
    used, opened = set(), builtins.open

    def watching(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            path = os.path.abspath(os.fspath(file))
            if path.startswith(RESULTS + os.sep):
                parts = os.path.relpath(path, RESULTS).split(os.sep)
                used.add("/".join(parts[:2]) if parts[0] == "gpu" and len(parts) > 2 else parts[0])
        return opened(file, *args, **kwargs)

    with mock.patch("builtins.open", watching), mock.patch("io.open", watching):
        yield used


def record_meta(record):
    """(commit, date) a record measured: its meta.json's, or a top-level JSON file's machine block."""
    if record.endswith(".json"):
        meta = load(record)["machine"]
    else:
        meta = load(*record.split("/"), "meta.json")
    return meta.get("commit", "not recorded"), meta.get("date", "not recorded")


def provenance(records, body):
    """A line naming the commit and date of each record a block was rendered from, but those the block names."""
    named = []
    for record in sorted(records):
        commit, date = record_meta(record)
        if f"commit {commit.split()[0]}" not in body:
            path = f"benchmarks/results/{record}" + ("" if record.endswith(".json") else "/")
            named.append(f"`{path}` (commit: {commit}; date: {date})")
    return f"\n\nMeasured: {', '.join(named)}." if named else ""


def render_page(text):
    """The page with every marked block rendered again, each ending with the commit and date of the records it
    comes from; unknown names raise KeyError naming them."""
    def block(match):
        name = match.group(2)
        if name not in TABLES:
            raise KeyError(f"no table named {name!r} (benchmarks/results_tables.py TABLES)")
        with records_read() as records:
            body = TABLES[name]()
        return match.group(1) + body + provenance(records, body) + "\n" + match.group(4)

    return BLOCK.sub(block, text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report the blocks that differ; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        path = os.path.join(REPO, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = render_page(text)
        if new != text:
            stale.append(page)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    for page in stale:
        print(f"{page}: {'differs from its records' if args.check else 'tables written again'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
