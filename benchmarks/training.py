"""Training throughput (target tokens per second) of the tiny fairseq configurations, EVA against softmax.

The models are the plugin's own (fairseq's task, model and criterion APIs, as fairseq-train builds them):
- translation: transformer_eva_tiny, EVA or softmax in encoder self-attention, batches of up to
  --max-tokens tokens of the bundled English-German sample (left-padded sources, as fairseq pads them);
- language model: transformer_lm_eva_tiny, causal EVA or softmax in decoder self-attention, blocks of
  --lm-lengths tokens of the bundled English prose (--lm-lengths 128 is the tiny configuration's).
Words are whitespace tokens (a dictionary built from the sample): throughput does not depend on the
tokenizer, only on the batch shapes. A step is forward, backward and an Adam update; EVA and softmax
steps alternate on the same batches (interleaved), and tokens per second = target tokens / median step.

    python -m benchmarks.training           # the run of docs/results.md (a few minutes)
"""

import argparse
import os
import statistics
import sys
import tempfile

import torch

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "data", "sample")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["translation", "lm"], choices=["translation", "lm"])
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch")
    parser.add_argument("--lm-lengths", type=int, nargs="+", default=[128, 1024], help="LM block lengths")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model (after 3 warm-up steps)")
    parser.add_argument("--vocab", type=int, default=8000, help="dictionary size (most frequent words)")
    parser.add_argument("--max-lines", type=int, default=4000, help="training lines read from the sample")
    common.add_common_args(parser, "benchmarks/results/training.json", "docs/img/training.png")
    return parser.parse_args(argv)


def read_lines(path, limit):
    with open(path, encoding="utf-8") as f:
        return [line.split() for _, line in zip(range(limit), f) if line.strip()]


def dictionary(corpora, size):
    from fairseq.data import Dictionary

    d = Dictionary()
    for lines in corpora:
        for words in lines:
            for w in words:
                d.add_symbol(w)
    d.finalize(nwords=size, padding_factor=8)
    return d


def build(fairseq_args, data_dir):
    from fairseq import options, tasks

    import fairseq_eva.plugin  # noqa: F401  (registers the models)

    parser = options.get_training_parser()
    user_dir = os.path.join(REPO, "fairseq_eva")
    args = options.parse_args_and_arch(parser, [data_dir, "--user-dir", user_dir, "--cpu", *fairseq_args])
    task = tasks.setup_task(args)
    model, criterion = task.build_model(args), task.build_criterion(args)
    return model, criterion


def translation_setups(args, tmp):
    from fairseq.data import LanguagePairDataset

    src = read_lines(os.path.join(SAMPLE, "po_en_de", "train.en"), args.max_lines)
    tgt = read_lines(os.path.join(SAMPLE, "po_en_de", "train.de"), args.max_lines)
    d = dictionary([src, tgt], args.vocab)
    for lang in ("en", "de"):
        d.save(os.path.join(tmp, f"dict.{lang}.txt"))
    encode = lambda words: d.encode_line(" ".join(words), add_if_not_exist=False).long()  # noqa: E731
    src_t, tgt_t = [encode(w) for w in src], [encode(w) for w in tgt]
    dataset = LanguagePairDataset(src_t, [len(t) for t in src_t], d, tgt_t, [len(t) for t in tgt_t], d, left_pad_source=True)
    batches = dataset.batch_by_size(dataset.ordered_indices(), max_tokens=args.max_tokens)
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(batches), generator=g).tolist()
    chosen = [batches[order[i % len(order)]] for i in range(args.steps + 3)]
    samples = [dataset.collater([dataset[i] for i in b]) for b in chosen]
    common_args = ["--task", "translation", "-s", "en", "-t", "de", "--arch", "transformer_eva_tiny", "--share-all-embeddings",
                   "--dropout", "0.1", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                   "--max-source-positions", "4096", "--max-target-positions", "4096"]
    eva, softmax = ([*common_args, "--encoder-attention", kind] for kind in ("eva", "softmax"))
    return {"translation": (eva, softmax, samples)}


def lm_setups(args, tmp):
    lines = read_lines(os.path.join(SAMPLE, "doc_en", "train.txt"), args.max_lines)
    d = dictionary([lines], args.vocab)
    d.save(os.path.join(tmp, "dict.txt"))
    stream = torch.cat([d.encode_line(" ".join(w), add_if_not_exist=False).long() for w in lines])
    setups = {}
    for T in args.lm_lengths:
        B = max(1, args.max_tokens // T)
        samples = []
        for step in range(args.steps + 3):
            start = (step * B * (T + 1)) % max(1, len(stream) - B * (T + 1))
            block = stream[start : start + B * (T + 1)].view(B, T + 1)
            samples.append({"id": torch.arange(B), "nsentences": B, "ntokens": B * T, "target": block[:, 1:].contiguous(),
                            "net_input": {"src_tokens": block[:, :-1].contiguous(), "src_lengths": torch.full((B,), T)}})
        common_args = ["--task", "language_modeling", "--arch", "transformer_lm_eva_tiny", "--tokens-per-sample", str(T),
                       "--share-decoder-input-output-embed", "--dropout", "0.1", "--criterion", "cross_entropy"]
        eva, softmax = ([*common_args, "--decoder-attention", kind] for kind in ("eva", "softmax"))
        setups[f"lm-{T}"] = (eva, softmax, samples)
    return setups


def train_steps(models, samples, timer, warmup=3):
    """Alternates one step of each model over the same samples; returns name -> seconds per step."""
    optimizers = {name: torch.optim.Adam(model.parameters(), lr=1e-4) for name, (model, _) in models.items()}
    times = {name: [] for name in models}
    for i, sample in enumerate(samples):
        names = list(models) if i % 2 == 0 else list(models)[::-1]
        for name in names:
            model, criterion = models[name]
            model.train()
            start = timer()
            loss, _, _ = criterion(model, sample)
            optimizers[name].zero_grad()
            loss.backward()
            optimizers[name].step()
            if i >= warmup:
                times[name].append(timer() - start)
    return times


def main(argv=None):
    args = parse_args(argv)
    device = common.setup(args)
    if device.type != "cpu":
        print("note: this benchmark runs on the CPU (the batches are built there); --device is ignored")
    info = common.machine(torch.device("cpu"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            setups = translation_setups(args, tmp) if task == "translation" else lm_setups(args, tmp)
            for name, (eva_args, softmax_args, samples) in setups.items():
                torch.manual_seed(args.seed)
                models = {"eva": build(eva_args, tmp), "softmax": build(softmax_args, tmp)}
                times = train_steps(models, samples, common.clock(args.clock))
                tokens = statistics.mean(s["ntokens"] for s in samples[3:])
                for attention, ts in times.items():
                    step = statistics.median(ts)
                    rows.append(dict(setting=name, attention=attention, step_s=step, tokens_per_step=tokens,
                                     tokens_per_s=tokens / step, step_samples=ts))
                    print(f"{name:12s} {attention:8s} {tokens / step:9.0f} target tokens/s"
                          f"  (median step {step:.3f} s, {tokens:.0f} tokens)", flush=True)
    info["load_average_at_end"] = common.machine(torch.device("cpu"))["load_average_at_start"]
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    command = "python -m benchmarks.training " + " ".join(sys.argv[1:] if argv is None else argv)
    common.write_json(args.json, {"benchmark": "training", "command": command,
                                  "machine": info, "settings": settings, "results": rows})
    if args.plot:
        plot(rows, args.plot)
    return rows


def plot(rows, path):
    fig, axes = common.figure(1, width=6.0)
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    for offset, attention in ((-0.2, "eva"), (0.2, "softmax")):
        values = [next(r["tokens_per_s"] for r in rows if r["setting"] == s and r["attention"] == attention) for s in settings]
        axes[0].bar([i + offset for i in range(len(settings))], values, width=0.4, label=attention)
    axes[0].set_xticks(range(len(settings)))
    axes[0].set_xticklabels(settings)
    axes[0].set_ylabel("target tokens / s (training)")
    axes[0].set_title("tiny configurations: training throughput", fontsize=10)
    axes[0].legend(fontsize=8)
    common.save_figure(fig, path)


if __name__ == "__main__":
    main()
