"""The CPU's numbers: the layer's speed and memory against SDPA, with and without the paper's bias and dropout;
decoding a token at a time; training steps; and training beside another busy process."""

from benchmarks.pages import records
from benchmarks.pages.words import listed, ratio_span, seconds


def cpu_speed():
    """Layer time (speed_c_loop.json) / peak memory (speed_c_loop_memory.json) at each N, and the speed-up over SDPA
    (time record) / memory ratio (memory record) of EVA and causal EVA."""
    times, memory = records.load("speed_c_loop.json"), records.load("speed_c_loop_memory.json")
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
    times, memory = records.load("speed_c_loop.json"), records.load("speed_c_loop_memory.json")
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
    record = records.load("speed_paper_settings_r9.json")
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
    record = records.load("speed_paper_settings_memory.json")
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


def decoding(contexts=(256, 1024, 4096, 8192)):
    """Per-token latency and cache size of one layer (decoding.json), at the contexts the page shows."""
    lines = ["| context | mechanism | median ms a token | mean ms | cache (MiB) | of which chunk summaries (MiB) |",
             "|---|---|---|---|---|---|"]
    for r in records.load("decoding.json")["results"]:
        if r["context"] in contexts:
            lines.append(f"| {r['context']} | {r['mechanism']} | {1e3 * r['latency_median_s']:.2f} "
                         f"| {1e3 * r['latency_mean_s']:.2f} | {r['cache_bytes'] / 2**20:.2f} "
                         f"| {r['chunk_summary_bytes'] / 2**20:.2f} |")
    return "\n".join(lines)


def decoding_summary(context=8192):
    """Causal EVA's cache and latency a token against softmax's at the longest context the page names."""
    rows = {r["mechanism"]: r for r in records.load("decoding.json")["results"] if r["context"] == context}
    eva, kv, cat = rows["eva-causal"], rows["softmax-kv"], rows["softmax-kv-cat"]
    mib = 2**20
    return (f"Causal EVA decodes at a context of {context} with a cache of {eva['cache_bytes'] / kv['cache_bytes']:.2f}x "
            f"softmax's ({eva['cache_bytes'] / mib:.2f} MiB against {kv['cache_bytes'] / mib:.2f} MiB): its chunk "
            f"summaries, which grow with the context, are {eva['chunk_summary_bytes'] / mib:.2f} MiB of it, and the "
            f"rest, of constant size, {(eva['cache_bytes'] - eva['chunk_summary_bytes']) / mib:.2f} MiB. It takes "
            f"{1e3 * eva['latency_median_s']:.2f} ms a token there against {1e3 * kv['latency_median_s']:.2f} ms for "
            f"softmax with a preallocated cache and {1e3 * cat['latency_median_s']:.2f} ms with fairseq's "
            "concatenated one.")


def decoding_summaries():
    """The size of causal EVA's chunk summaries in decoding.json: 2 (keys and values) x the chunks of the tokens
    cached x d_model floats, where the tokens cached are the context and the timed tokens after it."""
    record = records.load("decoding.json")
    rows = [r for r in record["results"] if r["mechanism"] == "eva-causal"]
    chunk, d_model, floats = 8, 512, 4  # causal EVA's chunk size, d_model and float32 of the run (the text below)
    extra = {round(r["chunk_summary_bytes"] / (2 * d_model * floats) * chunk - r["context"]) for r in rows}
    (timed,) = extra  # the same number of tokens beyond the context at every length
    return (f"The summaries grow as 2 x (L + {timed}) / {chunk} x {d_model} floats at every context L of the record: "
            f"the cache's largest size, after the {timed} timed tokens.")


def training():
    """Training step time and target tokens/s of EVA and softmax (training.json)."""
    labels = {"translation": "translation", "lm-128": "LM, 128 tokens", "lm-1024": "LM, 1024 tokens"}
    rows = records.load("training.json")["results"]
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
    rows = {(r["setting"], r["attention"]): r for r in records.load("training.json")["results"]}
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


def busy_machine():
    """Training time of the README's LM command alone and beside another busy process (busy_machine/results.json)."""
    from benchmarks import busy_machine as bm

    def setting(name):
        return name if name == "default" else f"`{name}`"

    record = records.load("busy_machine", "results.json")
    lines = ["| setting of the training | the other process | training s "
             f"({record['updates']} updates) | x default alone | the other process's speed |",
             "|---|---|---|---|---|"]
    for r in record["rows"]:
        other = {bm.ALONE: "none", bm.BESIDE_DEFAULT: "default", bm.BESIDE_SAME: setting(r["setting"])}[r["machine"]]
        speed = f" {r['neighbour_rate_ratio']:.2f} of alone " if "neighbour_rate_ratio" in r else " "
        lines.append(f"| {setting(r['setting'])} | {other} | {r['median_s']:.1f} | {r['ratio_to_default_alone']:.2f} "
                     f"|{speed}|")
    return "\n".join(lines)


TABLES = {
    "cpu-speed": cpu_speed,
    "cpu-speed-summary": cpu_speed_summary,
    "paper-settings-cpu": paper_settings_cpu,
    "paper-settings-memory": paper_settings_memory,
    "decoding": decoding,
    "decoding-summary": decoding_summary,
    "decoding-summaries": decoding_summaries,
    "training": training,
    "training-summary": training_summary,
    "busy-machine": busy_machine,
}
