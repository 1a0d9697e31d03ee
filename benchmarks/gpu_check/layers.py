"""The speed tables (one layer, forward + backward: time, peak memory, the attention's TFLOPS) and the profile
(where a layer's time goes: host, GPU, the costliest kernels)."""

import time

import torch

from benchmarks import baselines, common, speed
from benchmarks.gpu_check.plan import OUT_OF_TIME, number

# the speed tables' layers: d_model, heads; bidirectional EVA abs(E) and C; causal EVA window and chunk size
D_MODEL, HEADS, WINDOW, CHUNKS, CAUSAL_WINDOW, CHUNK_SIZE = 512, 8, 256, 128, 128, 8
LAYERS = {
    "sdpa": lambda kernel: baselines.MECHANISMS["sdpa"][0](D_MODEL, HEADS),
    "eva": lambda kernel: baselines.eva(D_MODEL, HEADS, WINDOW, CHUNKS, kernel=kernel),
    "eva+rpe+dropout": lambda kernel: baselines.eva(D_MODEL, HEADS, WINDOW, CHUNKS, use_rpe=True, dropout=0.1, kernel=kernel),
    "sdpa-causal": lambda kernel: baselines.MECHANISMS["sdpa-causal"][0](D_MODEL, HEADS),
    "eva-causal": lambda kernel: baselines.eva_causal(D_MODEL, HEADS, CAUSAL_WINDOW, CHUNK_SIZE, kernel=kernel),
    "eva-causal+rpe+dropout": lambda kernel: baselines.eva_causal(D_MODEL, HEADS, CAUSAL_WINDOW, CHUNK_SIZE, use_rpe=True,
                                                                  dropout=0.1, kernel=kernel),
}
# the profile's layers: the speed tables' EVA layers, and the bias and dropout apart, to tell their costs apart
PROFILE_LAYERS = {
    **{name: build for name, build in LAYERS.items() if name.startswith("eva")},
    "eva+rpe": lambda kernel: baselines.eva(D_MODEL, HEADS, WINDOW, CHUNKS, use_rpe=True, kernel=kernel),
    "eva+dropout": lambda kernel: baselines.eva(D_MODEL, HEADS, WINDOW, CHUNKS, dropout=0.1, kernel=kernel),
    "eva-causal+rpe": lambda kernel: baselines.eva_causal(D_MODEL, HEADS, CAUSAL_WINDOW, CHUNK_SIZE, use_rpe=True, kernel=kernel),
    "eva-causal+dropout": lambda kernel: baselines.eva_causal(D_MODEL, HEADS, CAUSAL_WINDOW, CHUNK_SIZE, dropout=0.1,
                                                              kernel=kernel),
}


def attention_flops(mechanism, batch, N, heads=HEADS, head_dim=D_MODEL // HEADS):
    """FLOPs of the attention alone, forward + backward (the count the targets use): per head 14 d N times the keys a
    query sees, N for softmax (N / 2 causal), abs(E) + C for EVA, about w / 2 + N / (2 s) for causal EVA."""
    if mechanism.startswith("sdpa"):
        keys = N / 2 if "causal" in mechanism else N
    elif "causal" in mechanism:
        keys = CAUSAL_WINDOW / 2 + N / (2 * CHUNK_SIZE)
    else:
        keys = WINDOW + CHUNKS
    return 14 * head_dim * N * keys * batch * heads


def auto_kernel(device, dtype, dropout, bias_grad):
    """The kernel that kernel="auto" picks for a training call, where the kernel registry says (else None)."""
    try:
        from fairseq_eva.attention import kernels

        q = torch.empty(1, HEADS, 64, D_MODEL // HEADS, device=device, dtype=dtype)
        return kernels.choose("auto", q, needs_grad=True, dropout=dropout, bias_grad=bias_grad).name
    except Exception:  # no registry, or none of its kernels takes the call
        return None


def measure_speed(N, batch, kernel, device, dtype, repeats, min_time):
    """Rows (benchmarks/speed.py's fields, plus batch, FLOPs, TFLOPS, or an error) of every layer at (N, batch)."""
    torch.manual_seed(0)
    H, d = HEADS, D_MODEL // HEADS
    x = torch.randn(batch, N, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x)
    q, k, v = (torch.randn(batch, N, H, d, device=device, dtype=dtype).transpose(1, 2).requires_grad_() for _ in range(3))
    grad_heads = torch.randn(batch, N, H, d, device=device, dtype=dtype).transpose(1, 2)
    layers, rows = {}, []
    for name, build in LAYERS.items():
        try:
            layer = build(kernel).to(device, dtype).train()
            speed.layer_call(layer, x, grad)()  # runs, and compiles what it compiles, before the timing
            speed.attention_call(layer, q, k, v, grad_heads)()
            layers[name] = layer
        except Exception as error:  # one failing layer (out of memory, a refusal) does not cost the others
            rows.append(dict(N=N, batch=batch, mechanism=name, error=(str(error).splitlines() or [repr(error)])[0][:300]))
            layers.pop(name, None)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    timed = {**layers, "projections": baselines.ProjectedAttention(D_MODEL, H, lambda q, k, v: q + k + v).to(device, dtype)}
    clock = common.clock("wall")
    layer_times = common.time_interleaved({n: speed.layer_call(m, x, grad) for n, m in timed.items()}, device, repeats,
                                          min_time, 20.0, clock)
    attention_times = common.time_interleaved({n: speed.attention_call(m, q, k, v, grad_heads) for n, m in layers.items()},
                                              device, repeats, min_time, 20.0, clock)
    for name, layer in timed.items():
        row = dict(N=N, batch=batch, mechanism=name, layer_s=common.median(layer_times[name]), layer_samples=layer_times[name],
                   peak_bytes=common.peak_memory(speed.layer_call(layer, x, grad), device))
        if name in attention_times:
            row.update(attention_s=common.median(attention_times[name]), attention_samples=attention_times[name],
                       flops=attention_flops(name, batch, N))
            row["tflops"] = row["flops"] / row["attention_s"] / 1e12
        rows.append(row)
    return rows


def speed_part(shapes, kernel, device, dtype, repeats, min_time, deadline, emit):
    """Measures (N, batch) after (N, batch) while the budget lasts; emit(rows) after each."""
    rows = []
    for N, batch in shapes:
        if time.monotonic() > deadline:
            rows.append(dict(N=N, batch=batch, mechanism="all", error=OUT_OF_TIME))
            emit(rows)
            continue
        try:
            rows += measure_speed(N, batch, kernel, device, dtype, repeats, min_time)
        except Exception as error:  # out of memory while timing, say: the next shape still runs
            rows.append(dict(N=N, batch=batch, mechanism="all", error=(str(error).splitlines() or [repr(error)])[0][:300]))
            if device.type == "cuda":
                torch.cuda.empty_cache()
        emit(rows)
    return rows


def ratios(rows):
    """benchmarks/speed.py's speed-ups and memory ratios of the rows that were measured."""
    return speed.ratios([r for r in rows if "layer_s" in r])


def profile_part(N, batch, kernel, device, dtype, deadline, emit):
    """Rows of the profile: each layer of PROFILE_LAYERS at (N, batch), or why it has none."""
    torch.manual_seed(0)
    x = torch.randn(batch, N, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x)
    rows = []
    for name, build in PROFILE_LAYERS.items():
        row = dict(N=N, batch=batch, mechanism=name)
        if time.monotonic() > deadline:
            row["error"] = OUT_OF_TIME
        else:
            try:
                row.update(profile_layer(build(kernel).to(device, dtype).train(), x, grad, device))
            except Exception as error:  # one failing layer does not cost the others
                row["error"] = (str(error).splitlines() or [repr(error)])[0][:300]
        rows.append(row)
        emit(rows)
    return rows


def profile_layer(layer, x, grad, device, calls=3, top=6):
    """Milliseconds per forward + backward: wall (synchronised), host (the process's CPU time, all threads:
    launching and Python, which runs ahead of the GPU) and GPU (the kernels' time, torch.profiler); the
    costliest kernels, or host operators where there is no GPU."""
    call = speed.layer_call(layer, x, grad)
    for _ in range(2):  # compiles and warms the allocator
        call()
    common.synchronize(device)
    wall, host = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call()
    host = time.process_time() - host
    common.synchronize(device)
    wall = time.perf_counter() - wall
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        call()
        common.synchronize(device)
    gpu, costliest = kernel_times(prof.events())
    if gpu is None:
        costliest = {e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()}
    costliest = sorted(costliest.items(), key=lambda kv: -kv[1])[:top]
    return dict(wall_ms=1e3 * wall / calls, host_ms=1e3 * host / calls, gpu_ms=gpu,
                bound=None if gpu is None else ("host" if 1e3 * host / calls >= gpu else "GPU"), costliest=costliest)


def kernel_times(events):
    """(total milliseconds of the GPU's kernels and copies, milliseconds by kernel name); (None, {}) with none.
    Only device-side events: an operator's own "device time" would count its kernels twice."""
    by_name = {}
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.elapsed_us() / 1e3
    return (sum(by_name.values()), by_name) if by_name else (None, {})


def run_speed(check, deadline, key, shapes):
    """A speed table: (N, batch) after (N, batch), its rows and ratios into the result."""
    s = check.settings
    emit = check.table(key, kernel=check.args.speed_kernel, derive=ratios)
    speed_part(shapes, check.args.speed_kernel, check.device, check.dtype, s["repeats"], s["min_time"], deadline, emit)
    return "ok"


def run_tokens(check, deadline):
    s = check.settings
    return run_speed(check, deadline, "speed_tokens", [(N, s["tokens"] // N) for N in check.lengths(s["token_lengths"])])


def run_batch1(check, deadline):
    return run_speed(check, deadline, "speed_batch1", [(N, 1) for N in check.lengths(check.settings["batch1_lengths"])])


def run_profile(check, deadline):
    emit = check.table("profile", kernel=check.args.speed_kernel)
    N, batch = check.settings["profile_shape"]
    profile_part(N, batch, check.args.speed_kernel, check.device, check.dtype, deadline, emit)
    return "ok"


def speed_summary(result, key, title):
    """A speed table's section of gpu_check.md."""
    lines = []
    part = result.get(key)
    if not part:
        return lines
    picks = ", ".join(f"{layer}: {name}" for layer, name in result["auto_kernel"].items() if name)
    kernel = part["kernel"] + (f" ({picks})" if part["kernel"] == "auto" and picks else "")
    lines += [f"## One layer, forward + backward, {result['settings']['dtype']}, {title} (EVA kernel: {kernel})", "",
              "| N | batch | layer | fwd+bwd ms | attention ms | attention TFLOPS | peak MiB |",
              "|---|---|---|---|---|---|---|"]
    for r in part["rows"]:
        if "error" in r:
            lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {r['error']} | | | |")
            continue
        attention_ms = 1e3 * r["attention_s"] if "attention_s" in r else None
        lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {1e3 * r['layer_s']:.2f} | "
                     f"{number(attention_ms, '.2f')} | {number(r.get('tflops'), '.3g')} | {r['peak_bytes'] / 2**20:.0f} |")
    lines += ["", "| N | layer vs baseline | speed-up | memory ratio |", "|---|---|---|---|"]
    for s in part["ratios"]:
        lines.append(f"| {s['N']} | {s['mechanism']} vs {s['baseline']} | {s['layer_speedup']:.2f}x | "
                     f"{number(s.get('memory_ratio'), '.2f')} |")
    lines.append("")
    return lines


def tokens_summary(result):
    return speed_summary(result, "speed_tokens", f"{result['settings']['tokens']} tokens a call")


def batch1_summary(result):
    return speed_summary(result, "speed_batch1", "batch 1")


def profile_summary(result):
    lines = []
    part = result.get("profile")
    if part:
        lines += [f"## Where a layer's time goes (forward + backward, {result['settings']['dtype']})", "",
                  "host: the process's CPU time a call (launching, Python); GPU: its kernels' time (torch.profiler). "
                  "The larger bounds the time a call.", "",
                  "| N | batch | layer | ms a call | host ms | GPU ms | bound by | costliest (ms) |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in part["rows"]:
            if "error" in r:
                lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {r['error']} | | | | |")
                continue
            costliest = "; ".join(f"{name[:50]} {ms:.2f}" for name, ms in r["costliest"])
            lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {r['wall_ms']:.2f} | {r['host_ms']:.2f} | "
                         f"{number(r['gpu_ms'], '.2f')} | {r['bound'] or '-'} | {costliest} |")
        lines.append("")
    return lines
