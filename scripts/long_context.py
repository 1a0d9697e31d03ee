#!/usr/bin/env python
"""Long context at equal CPU time: softmax, EVA and local attention in language models and masked language
models of equal size, and EVA's approximation error inside the trained language model.

  python scripts/long_context.py CORPUS --work DIR [--task all] [--budget-minutes 20] [--tokens-per-sample 2048]

CORPUS holds plain text train.txt, valid.txt, test.txt (paragraphs, a blank line between documents).
Steps, each skipped when its output exists (run the same command again to resume):
  1. a sentencepiece vocabulary and binarised data, by data_prep/prepare_mlm.sh (BPE=sentencepiece),
     from the first --train-words words of train.txt (whole documents) and all of valid and test; plus a
     'valid_small' split (the first --valid-words words of valid.txt) for the curves. Both tasks read it;
  2. each row of each task trains (fairseq-train, --parallel processes at a time, --threads threads each)
     until its process CPU time reaches --budget-minutes; the stop is fairseq's --stop-time-hours, counted
     here in CPU seconds of the training process (validation included) rather than in wall-clock seconds,
     so that rows are comparable on a loaded machine. With --device cuda the rows train on the GPU with
     --fp16 and the budget is fairseq's own wall-clock time. Stopping this script (Ctrl-C, kill) stops its
     trainings; a row interrupted part way resumes from its checkpoint_last.pt with the time it had spent
     (fairseq stores it in the checkpoint); a row done at a smaller budget trains on to the larger one.
     Progress: each validation prints the row, training seconds, updates and valid_small perplexity, also
     appended to DIR/ROW/curve.jsonl; the load average at the start and end of each row goes to
     DIR/ROW/load.json;
  3. test perplexity of each row's last checkpoint: fairseq-eval-lm with context windows 0 and half the
     block (lm), fairseq-validate on the test split (mlm; the masks are fixed by the seed, the same for
     every row);
  4. approx: on the trained EVA language model (DIR/eva/checkpoint_last.pt) and the first --approx-blocks
     blocks of valid_small, each layer's relative error ||y - y_softmax||_F / ||y_softmax||_F of its EVA
     output, and of local attention alone (the keys of E^n only), against exact softmax attention over the
     same queries, keys and values (the same bias inside E^n; scripts/lm_diagnostics.py);
  5. DIR/results.md, of every row in DIR done so far: per task, the rows at the end of their budget (equal
     CPU time), valid_small perplexity at equal updates and at equal CPU time (a row trained with several
     --seeds shows the mean, then each seed's value), commands and load; and one plot per task,
     DIR/lm_curves.png and DIR/mlm_curves.png (valid_small perplexity against CPU time and updates).
Tasks (--task): lm, mlm, approx, or all (the three in that order). lm rows are the causal language model
transformer_lm_eva, in DIR/ROW; mlm rows are roberta_eva (pre-norm RoBERTa) of the same size, blocks
(--sample-break-mode none) and optimisation, in DIR/mlm-ROW; a seed other than 1 adds -seedN. Rows
(--rows), every one with the same command but for its attention options:
  softmax     exact attention, the model's own (fairseq's MultiheadAttention, no relative position bias);
  exact       exact attention with the relative position bias: EVA's layer with one window over the
              whole block and no chunks;
  eva         EVA with the paper's setting: lm window 128, chunks of 8 tokens; mlm window 256, C = 128
              chunks; relative position bias inside the window;
  eva-W-N     EVA with window W and, lm: chunks of N tokens, mlm: N chunks (the paper's (|E|, C));
  eva...-V    an EVA row with a variant V (eva-nonoise, eva-128-8-linear): nonoise
              (--eva-omega-noise false: omega = mu in training), linear or identity (--eva-proposal),
              logsize (--eva-chunk-logit-offset log(chunk size): each summary's logit as if it stood for
              its chunk's keys), average (--eva-proposal-mean average: mu halved, as the authors'
              bidirectional code), noattdrop (--attention-dropout 0, as the authors' encoders), table
              (--eva-rpe-type table: a learned bias per query and key place in the block, the authors'
              masked-LM local attention bias, instead of T5 buckets);
  local       EVA's window alone (lm 128, mlm 256), no chunks;  local-W: window W; local...-V: the variant
              noattdrop or table;
  NAME        another attention of the registry that runs in the task's direction (docs/usage.md; lm: performer,
              rfa, elu, t2r; mlm: also lara, linformer, reformer, combiner, long_short), at equal cost to the
              task's eva row: its multiply-adds per token by the registry's formulas at the block length,
              --dim and --heads come closest to EVA's (lm window 128, chunks of 8; mlm window 256, C = 128)
              through the option that sets its cost (benchmarks/mechanisms.py KNOBS: performer num_features,
              rfa num_features, t2r num_features, lara num_landmarks, linformer projected_dim, reformer
              chunk_size, combiner span, long_short num_landmarks), the others at the paper's masked-LM
              settings (Performer's ReLU features, Reformer's 4 hashes, Transformer-LS window 256;
              benchmarks/mechanisms.py PAPER); Linformer's max_positions is the block length. The paper has no
              causal Performer: lm performer rows use its positive (FAVOR+) features. elu has no such option
              and keeps its only setting. At the defaults (2048 tokens, 256 dims, 4 heads) the options are,
              lm (EVA 386 D): performer 97, rfa 64, t2r 96; mlm (EVA 770 D): performer 193, rfa 128, t2r 192,
              lara 128, linformer 193, reformer chunks of 42, combiner span 314, long_short 32 landmarks;
  NAME-V      that attention with its cost option set to the number V instead (performer-256, reformer-64).
The tables give each row's multiply-adds per token of one layer's attention (in units of the width D,
beyond the projections; the registry's cost formulas) beside its name.
"""

import argparse
import concurrent.futures
import functools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TASKS = ("lm", "mlm", "approx")
# EVA variants (a row name's last part): diagnostics of whether EVA's definition costs it against local attention
VARIANTS = {"nonoise": ["--eva-omega-noise", "false"], "linear": ["--eva-proposal", "linear"],
            "identity": ["--eva-proposal", "identity"], "logsize": ["--eva-chunk-logit-offset"],
            "average": ["--eva-proposal-mean", "average"], "noattdrop": ["--attention-dropout", "0"],
            "table": ["--eva-rpe-type", "table"]}
LOCAL_VARIANTS = ("noattdrop", "table")  # the variants that a local row takes too (the others concern chunks)
ROW = re.compile(r"(?:(softmax|exact)|(local)(?:-([1-9][0-9]*))?|(eva)(?:-([1-9][0-9]*)-([1-9][0-9]*))?)(?:-(%s))?"
                 % "|".join(VARIANTS))


def match_row(row):
    """ROW's match of a row name, None where it names no row (a variant that its kind does not take)."""
    m = ROW.fullmatch(row)
    if m is None or m.group(7) is None or m.group(4) or (m.group(2) and m.group(7) in LOCAL_VARIANTS):
        return m
    return None
DEFAULTS = {"lm": (128, 8), "mlm": (256, 128)}  # EVA's window, and chunk size (lm) or number of chunks C (mlm)
DEFAULT_ROWS = "softmax,eva,local"
DIM, HEADS = 256, 4  # the model's default width and heads (--dim, --heads)
# a row named after another mechanism of the registry, NAME or NAME-V (V: the value of its cost option)
MECHANISM_ROW = re.compile(r"([a-z][a-z0-9_]*?)(?:-([1-9][0-9]*))?")
KIND_ORDER = ("softmax", "exact", "eva", "local")  # the rows that ROW names; the other mechanisms follow in the registry's order
# settings of the lm rows on top of the paper's masked-LM ones: the paper has no causal Performer; its positive
# (FAVOR+) features, the Performer's own for causal attention, rather than the masked LM's ReLU features
LM_SETTINGS = {"performer": {"kernel": "positive"}}
DEVICE_OPTIONS = {"cpu": ["--cpu"], "cuda": ["--fp16"]}  # fairseq-train's, as users train on each
EVAL_OPTIONS = {"cpu": ["--cpu"], "cuda": []}
CLOCK = {"cpu": "CPU", "cuda": "wall-clock"}  # what a row's time budget counts (see train_worker)
SEED_DIR = re.compile(r"(.+)-seed([0-9]+)")


def mechanisms():
    """benchmarks.mechanisms (the knobs, the paper's settings, knob_for_cost) and the attention registry, imported
    when a row needs them (they import torch and fairseq)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from benchmarks import mechanisms as bench
    from fairseq_eva.attention import registry

    return bench, registry


def eva_setting(task):
    """The registry's options of the task's eva row (DEFAULTS), whose cost the other mechanisms' rows match."""
    window, chunks = DEFAULTS[task]
    if task == "lm":
        return dict(window_size=window, chunk_size=chunks, num_chunks=0)
    return dict(window_size=window, num_chunks=chunks, chunk_size=0)


def valid_rows(task):
    """The rows of a task, as --help writes them, for the refusals."""
    bench, registry = mechanisms()
    direction = registry.CAUSAL if task == "lm" else registry.BIDIRECTIONAL
    others = [name + ("[-V]" if name in bench.KNOBS else "") for name in registry.choices(direction)
              if name not in KIND_ORDER]
    return ", ".join(["softmax", "exact", f"eva[-W-N][-{'|'.join(VARIANTS)}]",
                      f"local[-W][-{'|'.join(LOCAL_VARIANTS)}]", *others])


@functools.lru_cache(maxsize=None)
def mechanism_setting(task, row, block, dim=DIM, heads=HEADS):
    """(mechanism, its options) of a row named after a mechanism of the registry other than softmax, eva and
    local: the paper's settings (the lm's where they differ) with the option that sets its cost chosen so that
    the cost per token at `block` tokens, width `dim` and `heads` heads comes closest to the task's eva row, or
    set to V (NAME-V). ValueError names a row that is not one of the task's."""
    bench, registry = mechanisms()
    m = MECHANISM_ROW.fullmatch(row)
    name = m.group(1) if m else None
    if name is None or name in KIND_ORDER or name not in registry.MECHANISMS:
        raise ValueError(f"unknown row {row!r}; {task} rows: {valid_rows(task)}")
    causal = task == "lm"
    mechanism = registry.get(name)
    if not mechanism.supports(causal):
        raise ValueError(f"row {row!r}: {name} attention is {' and '.join(mechanism.directions)} only, no {task} row; "
                         f"{task} rows: {valid_rows(task)}")
    options = {**bench.PAPER.get(name, {}), **(LM_SETTINGS.get(name, {}) if causal else {})}
    if name == "linformer":  # a column of length projections per position: one per position of the block
        options["max_positions"] = block
    knob = bench.KNOBS.get(name)
    if m.group(2) and knob is None:
        raise ValueError(f"row {row!r}: {name} attention has no option that sets its cost; its row is {name}")
    if m.group(2):
        options[knob] = int(m.group(2))
    elif knob:
        target = mechanism_cost("eva", eva_setting(task), block, dim, heads, causal)
        options[knob] = bench.knob_for_cost(name, block, dim, heads, target, options, causal)
    import torch

    try:
        with torch.device("meta"):
            registry.build(name, dim, heads, causal=causal, **options)
    except ValueError as error:
        raise ValueError(f"row {row!r}: {error}") from None
    return name, options


def mechanism_cost(name, options, block, dim, heads, causal):
    """Multiply-adds per token of one layer's attention (the registry's formula)."""
    return mechanisms()[1].get(name).macs_per_token(block, dim, heads, causal=causal, **options)


def row_options(task, row, block, dim=DIM, heads=HEADS):
    """The attention options of a row of a task at blocks of `block` tokens, width `dim` and `heads` heads (the
    rows are listed in --help); ValueError says what is wrong with the name."""
    m = match_row(row)
    attention = "--decoder-attention" if task == "lm" else "--encoder-attention"
    if m is None:
        name, options = mechanism_setting(task, row, block, dim, heads)
        flags = [[f"--{name}-{option}".replace("_", "-"), str(value).lower() if isinstance(value, bool) else str(value)]
                 for option, value in options.items()]
        return [attention, name, *(word for flag in flags for word in flag)]
    kind = m.group(1) or m.group(2) or m.group(4)
    if kind == "softmax":
        return [attention, "softmax"]
    window = block if kind == "exact" else int(m.group(3) or m.group(5) or DEFAULTS[task][0])
    chunks = int(m.group(6) or DEFAULTS[task][1]) if kind == "eva" else 0
    if block % window:
        raise ValueError(f"the block length ({block}) must be a multiple of row {row}'s {task} EVA window ({window})")
    chunk_options = ["--eva-chunk-size", chunks] if task == "lm" else ["--eva-num-chunks", chunks, "--eva-chunk-size", 0]
    variant = VARIANTS[m.group(7)] if m.group(7) else []
    if m.group(7) == "logsize":  # its value, log(chunk size); lm: chunks of `chunks` tokens, mlm: `chunks` over the block
        variant = [*variant, f"{math.log(chunks if task == 'lm' else block / chunks):.4f}"]
    return [attention, "eva", "--eva-window-size", str(window), *map(str, chunk_options), "--eva-rpe", "true", *variant]


def command_cost(command):
    """Multiply-adds per token of one layer's attention, in units of the width D, of the model a training command
    (a row's command.txt) trains: the registry's formula at its options and --tokens-per-sample; None when the
    command does not say (no attention option)."""
    words = command.split()

    def value(flag):
        return words[words.index(flag) + 1] if flag in words and words.index(flag) + 1 < len(words) else None

    causal = "--decoder-attention" in words
    side = "decoder" if causal else "encoder"
    name = value(f"--{side}-attention")
    block, dim, heads = value("--tokens-per-sample"), value(f"--{side}-embed-dim"), value(f"--{side}-attention-heads")
    if None in (name, block, dim, heads):
        return None
    _, registry = mechanisms()
    if name not in registry.MECHANISMS:
        return None
    options = {}
    for option in registry.get(name).options:
        prefix = "eva" if name in ("eva", "local") else name
        given = value(f"--{prefix}-{option.name}".replace("_", "-"))
        if given is not None:
            options[option.name] = given.lower() in ("true", "1", "yes") if option.type is bool else option.type(given)
    return mechanism_cost(name, options, int(block), int(dim), int(heads), causal) / int(dim)


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


CHILDREN = set()  # the trainings and tools running now, stopped with this driver (stop_children)
STOPPING = []  # the signal that stops this driver, once it has come: no child starts after it


class Stopped(BaseException):
    """SIGTERM came: raised in the main thread, wherever it waits (for a child, for the runs' threads)."""


def descendants(pid):
    """The processes under `pid` (a training script's fairseq-hydra-train, torchrun's workers), from /proc."""
    children = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{entry}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_children(signum, frame):
    """On SIGTERM, stop the running trainings (and what they started) instead of leaving them to train on
    unwatched; each resumes from its last checkpoint when the same command runs again. The handler only signals
    them: the main thread may be inside a child's wait, where waiting again would never return; `stopping_cleanly`
    reaps them once."""
    STOPPING.append(signum)
    for proc in list(CHILDREN):
        under = descendants(proc.pid)
        proc.terminate()
        for pid in under:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    raise Stopped(signum)


def stopping_cleanly(main):
    """Run `main` with SIGTERM stopping the children (stop_children), then reaping each once, and exit with the
    status of a process ended by that signal (128 + its number), saying how to resume."""
    signal.signal(signal.SIGTERM, stop_children)
    try:
        return main()
    except Stopped as stop:
        signum = stop.args[0]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the driver at once
    for proc in list(CHILDREN):
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        CHILDREN.discard(proc)
    print(f"stopped by signal {signum}: run the same command again to resume", file=sys.stderr, flush=True)
    sys.exit(128 + signum)


def start(cmd, **popen_options):
    """A child process (registered in CHILDREN until it is waited for); none once the driver is being stopped."""
    if STOPPING:
        raise Stopped(STOPPING[0])
    proc = subprocess.Popen([str(c) for c in cmd], **popen_options)
    CHILDREN.add(proc)
    return proc


def finish(proc):
    """Wait for a child process; its exit status."""
    proc.wait()
    CHILDREN.discard(proc)
    return proc.returncode


def fairseq_tool(name):
    """fairseq's command-line tool `name` (fairseq_cli.NAME) run by this interpreter: found wherever fairseq can be
    imported, also when its console scripts are not on PATH (a `pip install --target` install)."""
    return [sys.executable, "-m", f"fairseq_cli.{name}"]


def run(cmd, env, logfile=None, stdin=None, stdout=None):
    """Run a command (its stderr, and its stdout unless given a file, to logfile); on failure stop with the log's tail."""
    with open(logfile or os.devnull, "a") as out:
        returncode = finish(start(cmd, env=env, stdin=stdin, stdout=stdout or out, stderr=out))
    if returncode != 0:
        tail = open(logfile).read()[-3000:] if logfile else ""
        what = " ".join(str(c) for c in cmd[:3])  # names `python -m fairseq_cli.X` and `bash script.sh --raw` alike
        sys.exit(f"error: {what} failed (exit {returncode}); log {logfile}\n{tail}")


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
    """The training command of a row: `python long_context.py _train` and fairseq-train's arguments."""
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
    return [sys.executable, os.path.abspath(__file__), "_train", bin_dir, "--user-dir", os.path.join(REPO, "fairseq_eva"),
            *model, "--tokens-per-sample", args.tokens_per_sample,
            "--sample-break-mode", "none", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", args.lr,
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", args.warmup, "--clip-norm", "1.0", "--dropout", "0.1",
            "--max-tokens", args.tokens_per_sample * args.blocks_per_batch, *DEVICE_OPTIONS[args.device], "--seed", seed,
            "--log-format", "json", "--log-interval", "10", "--valid-subset", "valid_small",
            "--validate-interval-updates", args.validate_every, "--save-interval-updates", args.validate_every,
            "--keep-interval-updates", "1", "--no-epoch-checkpoints", "--max-epoch", "1000",
            "--stop-time-hours", args.budget_minutes / 60, "--save-dir", row_dir(args.work, task, row, seed)]


def train(args, bin_dir, task, row, seed, env):
    train_row(row_dir(args.work, task, row, seed), train_command(args, bin_dir, task, row, seed), env,
              args.budget_minutes, f"{CLOCK[args.device]} minutes")


def train_row(save, cmd, env, budget, unit, results=("test_ppl.json",)):
    """Run a training command (`long_context.py _train ...`) into `save` until it stops at its budget, a
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
        f.write(" ".join(str(c) for c in cmd[2:]).replace(sys.executable, "python") + "\n")
    name = os.path.basename(save)
    log(f"{name}: training for {budget:g} {unit} ({save}/train.log)")
    load = {"start": os.getloadavg()}
    curve = os.path.join(save, "curve.jsonl")
    seen = sum(1 for _ in open(curve)) if os.path.exists(curve) else 0
    with open(os.path.join(save, "train.log"), "a") as out:
        proc = start(cmd, env={**env, "LONG_CONTEXT_CURVE": curve}, stdout=out, stderr=subprocess.STDOUT)
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


def approximation_errors(checkpoint, data, subset, num_blocks, length):
    """Per layer of a causal EVA language model, on the first `num_blocks` blocks of `length` tokens of
    `subset`: {"eva": error, "local": error} with error = ||y - y_softmax||_F / ||y_softmax||_F over all heads,
    queries and blocks (the approximation benchmark's measure)."""
    import torch
    from fairseq import checkpoint_utils

    import fairseq_eva.plugin  # noqa: F401  (registers the models)

    sys.path.insert(0, HERE)
    import lm_diagnostics

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": data})
    model = models[0].eval()
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    blocks = [dataset[i]["source"] for i in range(len(dataset)) if dataset[i]["source"].numel() == length][:num_blocks]
    if not blocks:
        sys.exit(f"error: {subset} has no block of {length} tokens")
    squares = None
    with torch.no_grad():
        for src in blocks:
            _, inputs = lm_diagnostics.layer_inputs(model, src[None])
            layers = [layer.self_attn for layer in model.decoder.layers]
            outputs = [lm_diagnostics.reference_outputs(attn, x) for attn, x in zip(layers, inputs)]
            block = [{name: float((y[name] - y["softmax"]).pow(2).sum()) for name in ("eva", "local")}
                     | {"softmax": float(y["softmax"].pow(2).sum())} for y in outputs]
            squares = block if squares is None else [{k: s[k] + b[k] for k in s} for s, b in zip(squares, block)]
    return {"blocks": len(blocks), "length": length, "subset": subset,
            "layers": [{name: (s[name] / s["softmax"]) ** 0.5 for name in ("eva", "local")} for s in squares]}


def approximate(args, bin_dir, env):
    result = os.path.join(args.work, "approx.json")
    if os.path.exists(result):
        return json.load(open(result))
    eva = row_dir(args.work, "lm", "eva")
    log(f"approx: EVA and local attention against softmax in each layer of {eva}/checkpoint_last.pt")
    run([sys.executable, os.path.abspath(__file__), "_approx", os.path.join(eva, "checkpoint_last.pt"), bin_dir,
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


def row_kind(row):
    """The kind of a row's name (softmax, exact, eva, local or a mechanism of the registry), None if it names none."""
    m = match_row(row)
    if m:
        return m.group(1) or m.group(2) or m.group(4)
    m = MECHANISM_ROW.fullmatch(row)
    if m is None or m.group(1) in KIND_ORDER or m.group(1) not in mechanisms()[1].MECHANISMS:
        return None
    return m.group(1)


def load_text(load):
    return "-" if load is None else f"{load['start'][0]:.2f} / {load['end'][0]:.2f}"


def seeds_text(values, fmt="{:.2f}"):
    """One number per row: the mean over seeds, followed by each seed's value when there are several;
    - when a seed has none."""
    if None in values:
        return "-"
    mean = fmt.format(sum(values) / len(values))
    return mean if len(values) == 1 else f"{mean} ({', '.join(fmt.format(v) for v in values)})"


def ppl_at_cpu(curve, cpu_s):
    """valid perplexity at `cpu_s` CPU seconds, interpolated between validations (linear in log perplexity);
    None outside the curve."""
    for p, q in zip(curve, curve[1:]):
        if p["cpu_s"] <= cpu_s <= q["cpu_s"]:
            t = (cpu_s - p["cpu_s"]) / ((q["cpu_s"] - p["cpu_s"]) or 1)
            return math.exp((1 - t) * math.log(p["ppl"]) + t * math.log(q["ppl"]))
    return None


def spaced(values, most=8):
    """At most `most` of a sorted list, evenly spaced, the last always included."""
    if len(values) <= most:
        return values
    return [values[round(i * (len(values) - 1) / (most - 1))] for i in range(most)]


def task_tables(rows, task, half, clock="CPU"):
    """Markdown lines: the rows at the end of their budget (equal CPU time), valid_small perplexity at equal
    updates and at equal CPU time; a row of several seeds shows their mean, then each seed's value. A row whose
    seeds ran to different budgets (one resumed further) is one line per budget, "row (B min)". Beside each row's
    name, its attention's multiply-adds per token in units of D (- : its command does not say)."""
    budgets = {}
    for (row, seed), r in rows.items():
        budgets.setdefault(row, set()).add(r["budget"])
    by_row = {}
    for (row, seed), r in rows.items():
        name = row if len(budgets[row]) == 1 else f"{row} ({r['budget']:g} min)"
        by_row.setdefault(name, []).append(r)
    cost = {row: "/".join(dict.fromkeys("-" if r["cost"] is None else f"{r['cost']:.0f}" for r in rs))
            for row, rs in by_row.items()}
    test = f"test ppl, context 0 | context {half} | lower by" if task == "lm" else "test ppl (masked tokens)"
    lines = [f"At the end of each row's {clock}-time budget:", "",
             f"| row | MACs/token (D) | seeds | {clock} min budget | updates | {clock} s | valid_small ppl | {test} | load |",
             "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if task == "lm" else "")]
    for row, rs in by_row.items():
        cells = [row, cost[row], len(rs), seeds_text([r["budget"] for r in rs], "{:g}"),
                 seeds_text([r["last"]["updates"] for r in rs], "{:.0f}"), seeds_text([r["last"]["cpu_s"] for r in rs], "{:.0f}"),
                 seeds_text([r["last"]["ppl"] for r in rs])]
        if task == "lm":
            ctx0, ctx = [r["test"]["0"] for r in rs], [r["test"][str(half)] for r in rs]
            cells += [seeds_text(ctx0), seeds_text(ctx), seeds_text([100 * (1 - b / a) for a, b in zip(ctx0, ctx)], "{:.1f}%")]
        else:
            cells.append(seeds_text([r["test"]["test"] for r in rs]))
        cells.append(", ".join(load_text(r["load"]) for r in rs))
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    # validations that at least two runs share and that no run skipped: a run's off-grid points (its last, an
    # epoch's end) are its own; "-" where a run had stopped
    seen = [{p["updates"] for p in r["curve"]} - {0} for r in rows.values()]
    updates = sorted(u for u in set().union(*seen) if sum(u in points for points in seen) >= 2
                     and all(u in points for points in seen if points and min(points) <= u <= max(points)))
    if updates:
        columns = spaced(updates)
        lines += ["", "valid_small perplexity at equal updates:", "",
                  "| row | MACs/token (D) | " + " | ".join(map(str, columns)) + " |", "|---|---|" + "---|" * len(columns)]
        for row, rs in by_row.items():
            values = [[next((p["ppl"] for p in r["curve"] if p["updates"] == u), None) for r in rs] for u in columns]
            lines.append(f"| {row} | {cost[row]} | " + " | ".join(seeds_text(v) for v in values) + " |")
    # a quarter, half, ... of the largest budget, and each smaller budget (a run ends just past its budget)
    ends = {r["budget"] for r in rows.values()}
    minutes = sorted({round(max(ends) * f, 1) for f in (0.25, 0.5, 0.75, 1.0)} | ends - {0})
    lines += ["", f"valid_small perplexity at equal {clock} time (minutes; interpolated between validations):", "",
              "| row | MACs/token (D) | " + " | ".join(f"{m:g}" for m in minutes) + " |",
              "|---|---|" + "---|" * len(minutes)]
    for row, rs in by_row.items():
        lines.append(f"| {row} | {cost[row]} | "
                     + " | ".join(seeds_text([ppl_at_cpu(r["curve"], m * 60) for r in rs]) for m in minutes) + " |")
    lines += ["", f"Commands (fairseq-train arguments; `_train` counts {clock} time):", ""]
    lines += [f"- {row}, seed {seed}: `{r['command']}`" for (row, seed), r in rows.items()]
    return lines + [""]


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
        plot(rows, os.path.join(args.work, f"{task}_curves.png"), f"{task}, blocks of {args.tokens_per_sample}",
             clock=clock)
    log(f"results: {os.path.join(args.work, 'results.md')}")


def plot(curves, path, title, ylabel="valid_small perplexity", clock="CPU"):
    """Each curve against training time (left) and updates (right); seeds of a row share a colour."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4), sharey=True)
    rows = list(dict.fromkeys(label.split(" seed ")[0] for label in curves))
    # matplotlib's ten colours, or twenty (tab20) for more rows: every row its own
    palette = [f"C{i}" for i in range(10)] if len(rows) <= 10 else [plt.get_cmap("tab20")(i % 20) for i in range(len(rows))]
    colours = dict(zip(rows, palette))
    for label, points in curves.items():
        row = label.split(" seed ")[0]
        colour = colours[row]
        style = "-" if label == row else "--"
        for ax, x in zip(axes, ([p["cpu_s"] / 60 for p in points], [p["updates"] for p in points])):
            ax.plot(x, [p["ppl"] for p in points], style, color=colour, marker=".", label=label)
    axes[0].set(xlabel=f"training {clock} time (min)", ylabel=ylabel, yscale="log", title=title)
    axes[1].set(xlabel="updates", title=title)
    axes[1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))  # beside the curves, not over them
    fig.tight_layout()
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)


def train_worker(argv):
    """fairseq-train which records (training seconds, updates, valid perplexity) at each validation in
    $LONG_CONTEXT_CURVE. On the CPU (--cpu) its --stop-time-hours and training seconds count this process's
    CPU time, fair to rows on a loaded machine; on a GPU they stay fairseq's own wall-clock time, since a GPU
    process's CPU time measures its launches and waits rather than its work."""
    import fairseq_cli.train as fairseq_train  # first: it sets up fairseq's log format

    fixes = fairseq_fixes()

    def recording_validate(validate):
        @functools.wraps(validate)
        def wrapper(cfg, trainer, task, epoch_itr, subsets):
            losses = validate(cfg, trainer, task, epoch_itr, subsets)
            with open(os.environ["LONG_CONTEXT_CURVE"], "a") as f:  # fairseq's valid loss is in base 2
                f.write(json.dumps({"cpu_s": trainer.cumulative_training_time(), "updates": trainer.get_num_updates(),
                                    "ppl": 2 ** losses[0]}) + "\n")
            return losses

        return wrapper

    clock = cpu_clock(fixes.Wrap) if "--cpu" in argv else ()
    fixes.install(extra=[*clock, fixes.Wrap("fairseq_cli.train.validate", recording_validate, "long_context")])
    sys.argv = ["fairseq-train", *argv]
    fairseq_train.cli_main()


def fairseq_fixes():
    """fairseq_eva.fairseq_fixes of this repository, the plugin the workers load (--user-dir): imported once fairseq
    is, it installs the plugin, and its `install(extra=...)` wraps fairseq's functions for a worker."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from fairseq_eva import fairseq_fixes

    return fairseq_fixes


def cpu_clock(Wrap):
    """The rows that make fairseq's training time (its --stop-time-hours, kept in checkpoints) this process's CPU
    time: the clock starts when the trainer is built and again after it loads a checkpoint."""

    def cpu_time(self):
        return time.process_time() - self._cpu_start + self._previous_training_time

    def starting_clock(method):
        @functools.wraps(method)
        def wrapper(self, *a, **k):
            out = method(self, *a, **k)
            self._cpu_start = time.process_time()
            return out

        return wrapper

    def counting_cpu_time(_local_cumulative_training_time):
        return cpu_time

    return (Wrap("fairseq.trainer.Trainer.__init__", starting_clock, "cpu_clock"),
            Wrap("fairseq.trainer.Trainer.load_checkpoint", starting_clock, "cpu_clock"),
            Wrap("fairseq.trainer.Trainer._local_cumulative_training_time", counting_cpu_time, "cpu_clock"))


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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_train":
        return train_worker(sys.argv[2:])
    if len(sys.argv) == 8 and sys.argv[1] == "_approx":  # checkpoint data subset blocks length output
        checkpoint, data, subset, blocks, length, output = sys.argv[2:]
        return json.dump(approximation_errors(checkpoint, data, subset, int(blocks), int(length)), open(output, "w"))
    args = parse_args()
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


if __name__ == "__main__":
    main()
