"""The long-context harness (scripts/long_context.py): the data, each row's training to its time budget, the test
perplexities, the approximation task and the report."""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time

from . import worker
from .processes import fairseq_tool, finish, log, run, start, stopping_cleanly  # noqa: F401  (the tests' names too)
from .reports import load_text, plot_perplexity, ppl_at_cpu, seeds_text, spaced, task_tables  # noqa: F401
from .rows import DEFAULT_ROWS, DIM, HEADS, KIND_ORDER, command_cost, mechanisms, row_kind, row_options  # noqa: F401

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASKS = ("lm", "mlm", "approx")
DEVICE_OPTIONS = {"cpu": ["--cpu"], "cuda": ["--fp16"]}  # fairseq-train's, as users train on each
EVAL_OPTIONS = {"cpu": ["--cpu"], "cuda": []}
CLOCK = {"cpu": "CPU", "cuda": "wall-clock"}  # what a row's time budget counts (benchmarks/experiments/worker.py)
SEED_DIR = re.compile(r"(.+)-seed([0-9]+)")

def first_words(src, dst, words):
    """The first `words` words of src, cut after the document that reaches them (all of it if 0)."""
    count = 0
    with open(src, encoding="utf-8") as f, open(dst + ".tmp", "w", encoding="utf-8") as g:
        for line in f:
            if words and count >= words and not line.strip():
                break
            count += len(line.split())
            g.write(line)
    os.replace(dst + ".tmp", dst)
    return count


def prepare(args, env):
    bin_dir = os.path.join(args.work, "bin")
    if os.path.exists(os.path.join(bin_dir, "valid_small.idx")):
        return bin_dir
    raw = os.path.join(args.work, "raw")
    os.makedirs(raw, exist_ok=True)
    for name in ("train.txt", "valid.txt", "test.txt"):
        if not os.path.isfile(os.path.join(args.corpus, name)):
            sys.exit(f"error: {args.corpus} has no {name} (see --help)")
    n = first_words(os.path.join(args.corpus, "train.txt"), os.path.join(raw, "train.txt"), args.train_words)
    for name in ("valid.txt", "test.txt"):
        first_words(os.path.join(args.corpus, name), os.path.join(raw, name), 0)
    first_words(os.path.join(args.corpus, "valid.txt"), os.path.join(raw, "valid_small.txt"), args.valid_words)
    log(f"data: {n} words of train, sentencepiece {args.vocab}")
    prep_env = {**env, "BPE": "sentencepiece", "VOCAB_SIZE": str(args.vocab), "WORK": os.path.join(args.work, "spm"),
                "DEST": bin_dir, "BLOCKS": str(args.tokens_per_sample), "WORKERS": "1"}
    run(["bash", os.path.join(REPO, "data_prep", "prepare_mlm.sh"), "--raw", raw], prep_env, os.path.join(args.work, "prep.log"))
    small = os.path.join(args.work, "spm", "valid_small.bpe")
    with open(os.path.join(raw, "valid_small.txt")) as f, open(small, "w") as g:
        run([sys.executable, os.path.join(REPO, "data_prep", "mlm_text.py"), "encode",
             "--spm", os.path.join(bin_dir, "spm.model")], env, os.path.join(args.work, "prep.log"), stdin=f, stdout=g)
    tmp = os.path.join(args.work, "valid_small.bin.tmp")
    run([*fairseq_tool("preprocess"), "--only-source", "--srcdict", os.path.join(bin_dir, "dict.txt"), "--validpref", small,
         "--destdir", tmp, "--workers", "1"], env, os.path.join(args.work, "prep.log"))
    for ext in ("bin", "idx"):
        os.replace(os.path.join(tmp, f"valid.{ext}"), os.path.join(bin_dir, f"valid_small.{ext}"))
    shutil.rmtree(tmp)
    return bin_dir


def row_dir(work, task, row, seed=1):
    """lm rows in WORK/ROW, mlm rows in WORK/mlm-ROW; seeds other than 1 add -seedN."""
    name = (row if task == "lm" else f"{task}-{row}") + ("" if seed == 1 else f"-seed{seed}")
    return os.path.join(work, name)


def train_command(args, bin_dir, task, row, seed=1):
    """The training command of a row: the worker (benchmarks/experiments/worker.py) running fairseq-train."""
    attention = row_options(task, row, args.tokens_per_sample, args.dim, args.heads)
    if task == "lm":
        model = ["--task", "language_modeling", "--arch", "transformer_lm_eva", *attention,
                 "--decoder-layers", args.layers, "--decoder-embed-dim", args.dim, "--decoder-ffn-embed-dim", args.ffn,
                 "--decoder-attention-heads", args.heads]
    else:
        model = ["--task", "masked_lm", "--criterion", "masked_lm", "--arch", "roberta_eva",
                 *attention, "--encoder-layers", args.layers, "--encoder-embed-dim", args.dim,
                 "--encoder-ffn-embed-dim", args.ffn, "--encoder-attention-heads", args.heads,
                 "--max-positions", args.tokens_per_sample]
    return worker.command("fairseq-train", [
        bin_dir, "--user-dir", os.path.join(REPO, "fairseq_eva"), *model, "--tokens-per-sample", args.tokens_per_sample,
        "--sample-break-mode", "none", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", args.lr,
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", args.warmup, "--clip-norm", "1.0", "--dropout", "0.1",
        "--max-tokens", args.tokens_per_sample * args.blocks_per_batch, *DEVICE_OPTIONS[args.device], "--seed", seed,
        "--log-format", "json", "--log-interval", "10", "--valid-subset", "valid_small",
        "--validate-interval-updates", args.validate_every, "--save-interval-updates", args.validate_every,
        "--keep-interval-updates", "1", "--no-epoch-checkpoints", "--max-epoch", "1000",
        "--stop-time-hours", args.budget_minutes / 60, "--save-dir", row_dir(args.work, task, row, seed)])


def train(args, bin_dir, task, row, seed, env):
    train_row(row_dir(args.work, task, row, seed), train_command(args, bin_dir, task, row, seed), env,
              args.budget_minutes, f"{CLOCK[args.device]} minutes")


def train_row(save, cmd, env, budget, unit, results=("test_ppl.json",)):
    """Run a training command (the worker's, worker.command) into `save` until it stops at its budget, a
    number of `unit` written to save/done; a row done at a smaller budget trains on from checkpoint_last.pt
    (and its `results`, files in save, are removed).
    Each validation is printed and kept in save/curve.jsonl; the load average in save/load.json."""
    os.makedirs(save, exist_ok=True)
    done = os.path.join(save, "done")  # holds the budget it was trained to
    if os.path.exists(done):
        if float(open(done).read()) >= budget:
            return
        for name in ("done", *results):  # a larger budget: train on from checkpoint_last.pt
            os.remove(os.path.join(save, name)) if os.path.exists(os.path.join(save, name)) else None
    with open(os.path.join(save, "command.txt"), "w") as f:
        f.write(" ".join(str(c) for c in worker.tool_words(cmd)).replace(sys.executable, "python") + "\n")
    name = os.path.basename(save)
    log(f"{name}: training for {budget:g} {unit} ({save}/train.log)")
    load = {"start": os.getloadavg()}
    curve = os.path.join(save, "curve.jsonl")
    seen = sum(1 for _ in open(curve)) if os.path.exists(curve) else 0
    with open(os.path.join(save, "train.log"), "a") as out:
        proc = start(cmd, env={**env, worker.CURVE: curve}, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            time.sleep(5)
            if os.path.exists(curve):
                lines = open(curve).read().splitlines()
                for line in lines[seen:]:
                    r = json.loads(line)
                    log(f"{name}: {r['cpu_s']:.0f} s, {r['updates']} updates (budget {budget:g} {unit}), "
                        f"valid ppl {r['ppl']:.1f}")
                seen = len(lines)
    returncode = finish(proc)
    if returncode != 0:
        sys.exit(f"error: training {name} failed (exit {returncode}); see {save}/train.log")
    load["end"] = os.getloadavg()
    json.dump(load, open(os.path.join(save, "load.json"), "w"))
    with open(done, "w") as f:
        f.write(f"{budget}\n")


def last_number(logfile, key):
    """The number after the last `key` in a log (fairseq's 'Perplexity: 12.3' or '| ppl 12.3 |')."""
    lines = [x for x in open(logfile) if key in x]
    if not lines:
        sys.exit(f"error: no '{key.strip()}' in {logfile}")
    return float(lines[-1].rsplit(key, 1)[1].split()[0].strip(",|"))


def evaluate(args, bin_dir, task, row, seed, env):
    """Test perplexity of a row's last checkpoint, {context window: ppl} (lm) or {"test": ppl} (mlm)."""
    save = row_dir(args.work, task, row, seed)
    result = os.path.join(save, "test_ppl.json")
    if os.path.exists(result):
        return json.load(open(result))
    user_dir, checkpoint = os.path.join(REPO, "fairseq_eva"), os.path.join(save, "checkpoint_last.pt")
    name, ppl = os.path.basename(save), {}
    if task == "lm":
        for context in (0, args.tokens_per_sample // 2):
            logfile = os.path.join(save, f"eval_lm.ctx{context}.log")
            run([*fairseq_tool("eval_lm"), bin_dir, "--user-dir", user_dir, "--path", checkpoint, "--gen-subset", "test",
                 "--tokens-per-sample", args.tokens_per_sample, "--context-window", context, "--batch-size", "4",
                 *EVAL_OPTIONS[args.device]],
                env, logfile)
            ppl[str(context)] = last_number(logfile, "Perplexity: ")
            log(f"{name}: test perplexity, context {context}: {ppl[str(context)]:.2f}")
    else:
        logfile = os.path.join(save, "validate.test.log")
        run([*fairseq_tool("validate"), bin_dir, "--user-dir", user_dir, "--path", checkpoint, "--task", "masked_lm",
             "--valid-subset", "test", "--max-tokens", args.tokens_per_sample * args.blocks_per_batch,
             *EVAL_OPTIONS[args.device]],
            env, logfile)
        ppl["test"] = last_number(logfile, "| ppl ")
        log(f"{name}: test perplexity (masked tokens): {ppl['test']:.2f}")
    json.dump(ppl, open(result, "w"))
    return ppl


def approximate(args, bin_dir, env):
    result = os.path.join(args.work, "approx.json")
    if os.path.exists(result):
        return json.load(open(result))
    eva = row_dir(args.work, "lm", "eva")
    log(f"approx: EVA and local attention against softmax in each layer of {eva}/checkpoint_last.pt")
    run([sys.executable, "-m", "benchmarks.experiments.approximation", os.path.join(eva, "checkpoint_last.pt"), bin_dir,
         "valid_small", args.approx_blocks, args.tokens_per_sample, result + ".tmp"], env,
        os.path.join(args.work, "approx.log"))
    os.replace(result + ".tmp", result)
    errors = json.load(open(result))
    for i, layer in enumerate(errors["layers"]):
        log(f"approx: layer {i}: EVA {layer['eva']:.3f}, local only {layer['local']:.3f}")
    return errors


def row_results(work, task):
    """{(row, seed): summary} of the rows of a task in `work` that have a test perplexity."""
    rows = {}
    for name in os.listdir(work) if os.path.isdir(work) else []:
        save = os.path.join(work, name)
        if (task == "mlm") != name.startswith("mlm-") or not os.path.exists(os.path.join(save, "test_ppl.json")):
            continue
        row = name[len("mlm-"):] if task == "mlm" else name
        m = SEED_DIR.fullmatch(row)
        row, seed = (m.group(1), int(m.group(2))) if m else (row, 1)
        if row_kind(row) is None:
            continue
        curve = [json.loads(x) for x in open(os.path.join(save, "curve.jsonl"))]
        load = json.load(open(os.path.join(save, "load.json"))) if os.path.exists(os.path.join(save, "load.json")) else None
        rows[row, seed] = {"curve": curve, "last": curve[-1] if curve else {"updates": 0, "cpu_s": 0, "ppl": float("nan")},
                           "test": json.load(open(os.path.join(save, "test_ppl.json"))), "load": load,
                           "budget": float(open(os.path.join(save, "done")).read()),
                           "command": open(os.path.join(save, "command.txt")).read().strip()}
        rows[row, seed]["cost"] = command_cost(rows[row, seed]["command"])
    kinds = {row_kind(row) for row, _ in rows}
    others = [] if kinds <= set(KIND_ORDER) else [k for k in mechanisms()[1].choices() if k not in KIND_ORDER]
    order = {kind: i for i, kind in enumerate((*KIND_ORDER, *others))}
    return dict(sorted(rows.items(), key=lambda item: (order[row_kind(item[0][0])], item[0])))


def report(args):
    half = args.tokens_per_sample // 2
    clock = CLOCK[args.device]
    where = f"{args.threads} thread(s) a row" if args.device == "cpu" else "one GPU"
    where += f", {args.parallel} rows at once" if args.parallel > 1 else ""
    lines = [f"# Long context at equal {clock} time ({where})", "",
             f"Corpus {os.path.abspath(args.corpus)}; blocks of {args.tokens_per_sample}; {args.layers} layers, "
             f"{args.dim} dims, FFN {args.ffn}, {args.heads} heads; sentencepiece {args.vocab}. "
             "Load: 1-minute load average at the start / end of the row's training (- : not recorded).", ""]
    curves = {}
    for task, title in (("lm", "Language model"), ("mlm", "Masked language model")):
        rows = row_results(args.work, task)
        if not rows:
            continue
        curves[task] = {row if seed == 1 else f"{row} seed {seed}": r["curve"] for (row, seed), r in rows.items()}
        lines += [f"## {title}", "", *task_tables(rows, task, half, clock)]
    if os.path.exists(os.path.join(args.work, "approx.json")):
        errors = json.load(open(os.path.join(args.work, "approx.json")))
        lines += ["## Approximation in the trained EVA language model", "",
                  f"||y - y_softmax||_F / ||y_softmax||_F on {errors['blocks']} blocks of {errors['length']} tokens of "
                  f"{errors['subset']}, the layer's own q, k, v (evaluation mode):", "",
                  "| layer | EVA | local only |", "|---|---|---|"]
        lines += [f"| {i} | {e['eva']:.3f} | {e['local']:.3f} |" for i, e in enumerate(errors["layers"])] + [""]
    with open(os.path.join(args.work, "results.md"), "w") as f:
        f.write("\n".join(lines))
    for task, rows in curves.items():
        plot_perplexity(rows, os.path.join(args.work, f"{task}_curves.png"), f"{task}, blocks of {args.tokens_per_sample}",
             clock=clock)
    log(f"results: {os.path.join(args.work, 'results.md')}")


def seed_list(parser, text):
    """--seeds' comma-separated whole numbers, or the parser's error naming them (a seed given twice would train
    one run twice at once, into one folder)."""
    try:
        seeds = [int(seed) for seed in text.split(",")]
    except ValueError:
        parser.error(f"--seeds {text!r}: give whole numbers separated by commas")
    twice = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if twice:
        parser.error(f"--seeds {text!r}: seed {', '.join(map(str, twice))} given twice; each seed is one run of each "
                     "row: give each once")
    return seeds


def parse_args(argv=None, description=None):
    """The arguments (scripts/long_context.py --help, whose text is `description`), checked."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", help="folder with train.txt, valid.txt, test.txt")
    p.add_argument("--work", required=True, help="working folder: data, checkpoints, logs, results (resumable)")
    p.add_argument("--task", default="all", choices=[*TASKS, "all"], help="what to run (all: lm, mlm, approx)")
    p.add_argument("--budget-minutes", type=float, default=20.0,
                   help="training minutes per row, CPU time on the CPU, wall-clock on a GPU (20)")
    p.add_argument("--rows", default=DEFAULT_ROWS, help=f"comma-separated rows (see above; {DEFAULT_ROWS})")
    p.add_argument("--tokens-per-sample", type=int, default=2048, help="block length (2048)")
    p.add_argument("--blocks-per-batch", type=int, default=2, help="blocks per update (2)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=DIM)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--heads", type=int, default=HEADS)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100, help="warm-up updates (100)")
    p.add_argument("--validate-every", type=int, default=25, help="updates between validations/checkpoints (25)")
    p.add_argument("--vocab", type=int, default=8000, help="sentencepiece vocabulary (8000)")
    p.add_argument("--train-words", type=int, default=0, help="use the first N words of train.txt (0: all)")
    p.add_argument("--valid-words", type=int, default=30000, help="words of valid.txt in valid_small (30000)")
    p.add_argument("--approx-blocks", type=int, default=8, help="blocks of valid_small for the approx task (8)")
    p.add_argument("--threads", type=int, default=1, help="threads per training (1)")
    p.add_argument("--seeds", default="1", help="comma-separated training seeds, each row trained once per seed (1)")
    p.add_argument("--device", default="cpu", choices=sorted(DEVICE_OPTIONS),
                   help="cpu (budgets in CPU time) or cuda (one GPU, --fp16, budgets in wall-clock time) (cpu)")
    p.add_argument("--parallel", type=int, default=1,
                   help="rows (and seeds) trained at once, e.g. several small models sharing one GPU (1)")
    args = p.parse_args(argv)
    args.rows = args.rows.split(",")
    args.tasks = TASKS if args.task == "all" else (args.task,)
    for task in [task for task in args.tasks if task != "approx"]:
        for row in args.rows:
            try:
                row_options(task, row, args.tokens_per_sample, args.dim, args.heads)
            except ValueError as e:
                p.error(f"--rows: {e}")
    args.seeds = seed_list(p, args.seeds)
    if args.budget_minutes <= 0:
        p.error("--budget-minutes must be positive")
    if args.parallel < 1:
        p.error("--parallel must be at least 1")
    return args


def main(description=None):
    """scripts/long_context.py: `description` is its --help text."""
    args = parse_args(description=description)
    stopping_cleanly(lambda: run_rows(args))


def run_rows(args):
    """Train, evaluate and report the rows (main, once the arguments are parsed)."""
    eva = row_dir(args.work, "lm", "eva")
    if "approx" in args.tasks and not os.path.exists(os.path.join(eva, "done")) and not (
            "lm" in args.tasks and "eva" in args.rows):
        sys.exit(f"error: the approx task needs the trained EVA language model ({eva}/done): run --task lm with "
                 "the eva row first")
    os.makedirs(args.work, exist_ok=True)
    tools = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": tools + os.pathsep + os.environ.get("PATH", ""), "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    bin_dir = prepare(args, env)
    for task in args.tasks:
        if task == "approx":
            approximate(args, bin_dir, env)
            continue
        runs = [(row, seed) for row in args.rows for seed in args.seeds]
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:  # a failed row's exit is re-raised
            list(pool.map(lambda job: train(args, bin_dir, task, *job, env), runs))
            list(pool.map(lambda job: evaluate(args, bin_dir, task, *job, env), runs))
    report(args)

