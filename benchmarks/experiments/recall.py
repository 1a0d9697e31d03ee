"""The long-range recall diagnostic (scripts/recall.py): rotated blocks, the rows' training, the recall on the
repeated half, the report."""

import argparse
import json
import logging
import math
import os
import re
import sys

from . import long_context as lc  # its trainer and its rows' folders
from . import worker
from .processes import log
from .reports import plot_perplexity

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROW = re.compile(r"softmax|exact|local|eva([1-9][0-9]*)")
RUN = re.compile(rf"({ROW.pattern})(?:-seed([1-9][0-9]*))?")  # a run's folder: ROW or ROW-seedN (lc.row_dir)
SPLITS = {"train": ("train",), "valid": ("valid_small", "valid"), "test": ("test",)}  # ours: theirs, first found


def rotated_blocks(stream, length, rng):
    """Blocks of `length` tokens from a 1-D numpy token stream: A + A[o:] + A[:o] with A the next length/2
    tokens and o drawn uniformly from [0, length/4]; returns (blocks, offsets)."""
    import numpy as np

    half = length // 2
    blocks, offsets = [], []
    for start in range(0, len(stream) - half + 1, half):
        a = stream[start:start + half]
        o = int(rng.integers(0, half // 2 + 1))
        blocks.append(np.concatenate([a, a[o:], a[:o]]))
        offsets.append(o)
    return blocks, offsets


def copyable(length, offset):
    """Positions of a block whose token can be copied from the first half: all of the second half except its
    first token and the one where the rotation wraps to A[0]."""
    half = length // 2
    return [p for p in range(half + 1, length) if p != length - offset]


def build(args):
    """DIR/bin: the rotated blocks of each split, one block per item, with the source's dictionary."""
    import numpy as np
    import torch
    from fairseq.data import Dictionary, indexed_dataset

    out = os.path.join(args.work, "bin")
    if os.path.exists(os.path.join(out, "done")):
        return out
    os.makedirs(out, exist_ok=True)
    dictionary = Dictionary.load(os.path.join(args.data, "dict.txt"))
    dictionary.save(os.path.join(out, "dict.txt"))
    limits = {"train": None, "valid": args.valid_blocks, "test": args.test_blocks}
    for i, (split, names) in enumerate(SPLITS.items()):
        prefix = next((os.path.join(args.data, n) for n in names if os.path.exists(os.path.join(args.data, n + ".idx"))), None)
        if prefix is None:
            sys.exit(f"error: {args.data} has no {' or '.join(n + '.idx' for n in names)}")
        source = indexed_dataset.MMapIndexedDataset(prefix)
        stream = np.concatenate([source[j].numpy() for j in range(len(source))])
        blocks, offsets = rotated_blocks(stream, args.tokens_per_sample, np.random.default_rng([args.seed, i]))
        blocks, offsets = blocks[:limits[split]], offsets[:limits[split]]
        if not blocks:
            sys.exit(f"error: {prefix} has fewer than {args.tokens_per_sample // 2} tokens")
        builder = indexed_dataset.make_builder(os.path.join(out, split + ".bin"), "mmap", vocab_size=len(dictionary))
        for block in blocks:
            builder.add_item(torch.from_numpy(block))
        builder.finalize(os.path.join(out, split + ".idx"))
        json.dump(offsets, open(os.path.join(out, split + ".offsets.json"), "w"))
        log(f"data: {split}: {len(blocks)} blocks of {args.tokens_per_sample} from {prefix}")
    open(os.path.join(out, "done"), "w").close()
    return out


def attention_options(args, row):
    if row == "softmax":
        return ["--decoder-attention", "softmax"]
    window = args.tokens_per_sample if row == "exact" else args.window
    chunk = int(row[3:]) if row.startswith("eva") else 0
    return ["--decoder-attention", "eva", "--eva-window-size", window, "--eva-chunk-size", chunk, "--eva-rpe", "true"]


def train_command(args, bin_dir, row, seed=1):
    return worker.command("fairseq-train", [
        bin_dir, "--user-dir", os.path.join(REPO, "fairseq_eva"), "--task", "language_modeling", "--arch", "transformer_lm_eva",
        *attention_options(args, row), "--decoder-layers", args.layers, "--decoder-embed-dim", args.dim,
        "--decoder-ffn-embed-dim", args.ffn, "--decoder-attention-heads", args.heads,
        "--tokens-per-sample", args.tokens_per_sample, "--sample-break-mode", "none", "--optimizer", "adam",
        "--adam-betas", "(0.9,0.98)", "--lr", args.lr, "--lr-scheduler", "inverse_sqrt", "--warmup-updates",
        args.warmup, "--clip-norm", "1.0", "--dropout", "0.1",
        "--max-tokens", args.tokens_per_sample * args.blocks_per_batch, "--cpu", "--seed", seed,
        "--log-format", "json", "--log-interval", "10", "--valid-subset", "valid",
        "--validate-interval-updates", args.validate_every, "--save-interval-updates", args.validate_every,
        "--keep-interval-updates", "1", "--no-epoch-checkpoints", "--max-epoch", "1000",
        "--max-update", args.updates, "--save-dir", lc.row_dir(args.work, "lm", row, seed)])


def recall_perplexity(checkpoint, bin_dir, split, num_blocks, drop_chunks=False):
    """{"all", "first half", "repeated": perplexity} of a checkpoint on the first blocks of a split of DIR/bin,
    each block fed as fairseq-train feeds it: one block an item, so its source is </s> and the block less its
    last token. drop_chunks: EVA layers without their chunk summaries (local attention, the same weights)."""
    import torch
    import torch.nn.functional as F
    from fairseq import checkpoint_utils
    from fairseq.data import indexed_dataset

    import fairseq_eva.plugin  # noqa: F401  (registers the models)
    from fairseq_eva.attention import EVAAttention

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": bin_dir})
    model = models[0].eval()
    if drop_chunks:
        for module in model.modules():
            if isinstance(module, EVAAttention):
                module.chunk_size = 0
    blocks = indexed_dataset.MMapIndexedDataset(os.path.join(bin_dir, split))
    offsets = json.load(open(os.path.join(bin_dir, split + ".offsets.json")))
    num_blocks = min(num_blocks, len(blocks))
    length = len(blocks[0])
    sums = {"all": [0.0, 0], "first half": [0.0, 0], "repeated": [0.0, 0]}
    eos = task.source_dictionary.eos()
    with torch.no_grad():
        for i in range(num_blocks):
            target = blocks[i].long()
            source = torch.cat([target.new_tensor([eos]), target[:-1]])
            logits, _ = model(source[None])
            nll = F.cross_entropy(logits[0].float(), target, reduction="none")
            for name, positions in (("all", range(length)), ("first half", range(length // 2)),
                                    ("repeated", copyable(length, offsets[i]))):
                sums[name][0] += float(nll[list(positions)].sum())
                sums[name][1] += len(positions)
    return {name: math.exp(total / count) for name, (total, count) in sums.items()} | {"blocks": num_blocks}


def evaluate(args, bin_dir, run):
    """A run's test perplexities in DIR/RUN/recall.json; an EVA run's also without its chunks."""
    result = os.path.join(args.work, run, "recall.json")
    ppl = json.load(open(result)) if os.path.exists(result) else {}
    if not ppl or (run.startswith("eva") and "without chunks" not in ppl):
        checkpoint = os.path.join(args.work, run, "checkpoint_last.pt")
        ppl = recall_perplexity(checkpoint, bin_dir, "test", args.test_blocks)
        if run.startswith("eva"):
            ppl["without chunks"] = recall_perplexity(checkpoint, bin_dir, "test", args.test_blocks, drop_chunks=True)
        json.dump(ppl, open(result + ".tmp", "w"))
        os.replace(result + ".tmp", result)
    log(f"{run}: test perplexity, first half {ppl['first half']:.2f}, repeated part {ppl['repeated']:.2f}")
    return ppl


def describe(args, name):
    row, chunk, seed = RUN.fullmatch(name).groups()
    text = {"softmax": "softmax (all earlier tokens)", "exact": "exact (all earlier tokens, relative position bias)",
            "local": f"local (window {args.window})"}.get(row) or (
        f"EVA (window {args.window}, chunks of {chunk}: {(args.tokens_per_sample - args.window) // int(chunk)} at the end)")
    return text + (f", seed {seed}" if seed else "")


def finished_rows(work):
    """The runs in `work` that have a test result, whatever --rows this run named: softmax, exact, local, then
    EVA by chunk size; each row's seeds in order."""
    def order(name):
        row, chunk, seed = RUN.fullmatch(name).groups()
        return ("softmax", "exact", "local", "eva").index(row[:3] if chunk else row), int(chunk or 0), int(seed or 1)

    runs = [r for r in os.listdir(work) if RUN.fullmatch(r) and os.path.exists(os.path.join(work, r, "recall.json"))]
    return sorted(runs, key=order)


def recall_share(repeated, local, exact):
    """The part of exact attention's saving on the repeated part, in nats a token against local attention, that
    a run makes: (log B_local - log B) / (log B_local - log B_exact); None without a saving to compare with."""
    if local is None or exact is None or local <= exact:
        return None
    return (math.log(local) - math.log(repeated)) / (math.log(local) - math.log(exact))


def without_chunks(ppl):
    cut = ppl.get("without chunks")
    return "-" if cut is None else f"{cut['first half']:.2f}, {cut['repeated']:.2f}"


def report(args):
    lines = [f"# Long-range recall: blocks of {args.tokens_per_sample}, second half = first half rotated", "",
             f"Data {os.path.abspath(args.data)}; {args.layers} layers, {args.dim} dims, FFN {args.ffn}, {args.heads} heads; "
             f"{args.blocks_per_batch} blocks an update; blocks drawn with seed {args.seed}, training seed 1 unless the "
             f"row says. Test perplexity on the first {args.test_blocks} test blocks: on the first half (ordinary "
             f"language modelling) and on the copyable tokens of the second half (each {args.tokens_per_sample // 4} "
             f"to {args.tokens_per_sample} tokens after its copy). Share: of exact attention's recall against local "
             "attention's (seed 1 of each, at their own updates), in log perplexity on the repeated part.", "",
             "| row | updates | CPU s | CPU s / update | valid ppl (whole blocks) | test ppl, first half | "
             "test ppl, repeated part | share | EVA without its chunks at test: first half, repeated part |",
             "|---|---|---|---|---|---|---|---|---|"]
    runs = finished_rows(args.work)
    results = {run: json.load(open(os.path.join(args.work, run, "recall.json"))) for run in runs}
    local, exact = (results[r]["repeated"] if r in results else None for r in ("local", "exact"))
    curves = {}
    for run in runs:
        curve = [json.loads(x) for x in open(os.path.join(args.work, run, "curve.jsonl"))]
        curves[run] = curve
        last, ppl = curve[-1], results[run]
        share = recall_share(ppl["repeated"], local, exact)
        lines.append(f"| {describe(args, run)} | {last['updates']} | {last['cpu_s']:.0f} | "
                     f"{last['cpu_s'] / max(last['updates'], 1):.2f} | {last['ppl']:.2f} | {ppl['first half']:.2f} | "
                     f"{ppl['repeated']:.2f} | {'-' if share is None else f'{share:.0%}'} | {without_chunks(ppl)} |")
    lines += ["", "Commands (run by `python -m benchmarks.experiments.worker`, which counts CPU time):", ""]
    lines += [f"- {row}: `{open(os.path.join(args.work, row, 'command.txt')).read().strip()}`" for row in curves]
    with open(os.path.join(args.work, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if curves:
        plot_perplexity(curves, os.path.join(args.work, "curves.png"), f"recall, blocks of {args.tokens_per_sample}",
                "valid perplexity (whole blocks)")
    log(f"results: {os.path.join(args.work, 'results.md')}")


def parse_args(argv=None, description=None):
    """The arguments (scripts/recall.py --help, whose text is `description`), checked."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="binarised language-model folder: dict.txt, train, test, valid_small or valid")
    p.add_argument("--work", required=True, help="working folder: blocks, checkpoints, results (resumable)")
    p.add_argument("--rows", default="softmax,local,eva4,eva16", help="comma-separated: softmax, local, evaS "
                   "(EVA with chunks of S tokens) (softmax,local,eva4,eva16)")
    p.add_argument("--updates", type=int, default=1500, help="training updates per row (1500)")
    p.add_argument("--tokens-per-sample", type=int, default=512, help="block length N (512)")
    p.add_argument("--window", type=int, default=64, help="EVA's and local attention's window (64)")
    p.add_argument("--blocks-per-batch", type=int, default=8, help="blocks per update (8)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=100, help="warm-up updates (100)")
    p.add_argument("--validate-every", type=int, default=250, help="updates between validations/checkpoints (250)")
    p.add_argument("--valid-blocks", type=int, default=16, help="blocks in the valid split (16)")
    p.add_argument("--test-blocks", type=int, default=64, help="test blocks evaluated (64)")
    p.add_argument("--threads", type=int, default=1, help="threads per training (1)")
    p.add_argument("--seed", type=int, default=1, help="seed of the blocks' rotation offsets (1)")
    p.add_argument("--seeds", default="1", help="comma-separated training seeds, each row trained once per seed (1)")
    args = p.parse_args(argv)
    args.rows = args.rows.split(",")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds must be comma-separated whole numbers, not {args.seeds!r}")
    if min(args.seeds) < 1:
        p.error("--seeds must be positive")
    for row in args.rows:
        match = ROW.fullmatch(row)
        if not match:
            p.error(f"unknown row {row!r} in --rows: softmax, exact, local or evaS (S: the chunk size)")
        if match.group(1) and args.window % int(match.group(1)):
            p.error(f"row {row}: the chunk size {match.group(1)} must divide the window ({args.window})")
    if args.tokens_per_sample % args.window or args.tokens_per_sample // 4 <= args.window:
        p.error(f"--tokens-per-sample ({args.tokens_per_sample}) must be a multiple of the window ({args.window}) and "
                "more than 4 windows long, so that every copy is further back than the window")
    if args.updates <= 0 or args.validate_every <= 0:
        p.error("--updates and --validate-every must be positive")
    return args


def main(description=None):
    """scripts/recall.py: `description` is its --help text."""
    args = parse_args(description=description)
    if not os.path.isfile(os.path.join(args.data, "dict.txt")):
        sys.exit(f"error: {args.data} has no dict.txt (see --help)")
    os.makedirs(args.work, exist_ok=True)
    tools = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": tools + os.pathsep + os.environ.get("PATH", ""), "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    import torch

    torch.set_num_threads(args.threads)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's logging setup would let it chatter
    bin_dir = build(args)
    for row in args.rows:
        for seed in args.seeds:
            save = lc.row_dir(args.work, "lm", row, seed)  # DIR/ROW, or DIR/ROW-seedN
            lc.train_row(save, train_command(args, bin_dir, row, seed), env, args.updates, "updates",
                         results=("recall.json",))
            evaluate(args, bin_dir, os.path.basename(save))
    report(args)

