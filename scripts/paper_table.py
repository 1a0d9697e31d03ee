#!/usr/bin/env python
"""The paper's three language tables, one command each: at the sample's scale on a CPU, at full size on GPUs.

  python scripts/paper_table.py --table mt --work DIR [--seeds 1,2,3] [--rows softmax,eva16,...]
  python scripts/paper_table.py --table mt --scale full --data DATA --work DIR [--dry-run]

Tables (--table) and their rows, named after the configs (configs/wmt14_en_de_ROW.yaml, wikitext103_ROW.yaml,
mlm_ROW.yaml), with the paper's number beside each:
  mt   WMT14 En-De, encoder self-attention: softmax, eva16, eva32, eva64, performer128, lara16, lara32, lara64;
       test BLEU on compound-split tokenised output (and sacreBLEU);
  lm   Wikitext-103, decoder self-attention: softmax_16l, eva_16l, elu_16l, rfa_16l, t2r_16l, softmax_32l,
       eva_32l; test perplexity at context windows 0, 256 and 480;
  mlm  masked LM, every encoder layer: softmax_2048, eva_2048, local_2048, performer_2048, linformer_2048,
       lara_2048, reformer_2048, combiner_2048, long_short_2048, softmax_4096, eva_4096; validation perplexity.

Scales (--scale):
  sample  mt: each row's config with the tiny architecture of the demo (2+2 layers of
          64 units, 4 heads, make demo) on the bundled En-De sample (data/sample/po_en_de, Moses and a joint
          BPE of --bpe merges, as data_prep/prepare_wmt14_en_de.sh), --epochs epochs (the demo's 8, about
          1,050 updates) or until --budget-minutes of the training process's CPU time, for each of --seeds.
          The attention settings are the config's scaled as the demo scales EVA-32's (|E| = 8, C = 4): every
          length and size by 1/4, the ratio of the head widths (16 to 64) and about that of the sentence
          lengths (7 words a sentence on average against WMT14's 23 to 27), and C by 1/2 (SCALED below).
          One more row may be asked for (--rows ...,exact): exact softmax attention with EVA's relative
          position bias (EVA's layer, one window over the sentence, no chunks), which separates what the
          bias does from what EVA's approximation does.
          Then the last --average epoch checkpoints are averaged, and the test split translated with beam 4
          and length penalty 0.6 (scripts/eval_wmt14.sh) on the CPU. --data replaces the sample with other
          binarised data (the tests use a smaller one).
          lm, mlm: scripts/long_context.py, the small language models of equal size at equal CPU time on the
          bundled English prose (data/sample/doc_en, or --corpus), with the table's rows that have a small
          counterpart (SAMPLE_ROWS: the 32-layer and 4096-token rows have none); arguments after `--` go to it
          (e.g. -- --budget-minutes 10); its results.md and curves are the table.
  full    the configs as they are on the GPUs that torch sees (scripts/train_wmt14.sh, train_wikitext103.sh,
          train_mlm.sh: fairseq's distributed options, the paper's effective batch), then the paper's
          evaluation (scripts/eval_wmt14.sh: the last 10 epoch checkpoints averaged, beam 4, length penalty
          0.6, compound-split BLEU and sacreBLEU; scripts/eval_lm.sh at context windows 0, 256 and 480;
          scripts/eval_mlm.sh: validation perplexity). Without a GPU (torch sees none, or NGPUS=0) it is refused
          unless given --allow-cpu: the paper's models would train for weeks.
--dry-run prints every command, as one can run it, and runs none: at full size the scripts above; at sample scale
(mt) the sample's preparation (data_prep/prepare_wmt14_en_de.sh, unless --data), each run's fairseq-hydra-train
(without the CPU-time clock that this script adds) and its scripts/eval_wmt14.sh.
Every run (a row and a seed) has its folder DIR/ROW-seedN; a run that has its result is skipped and one that
stopped part way resumes from its checkpoint_last.pt, so the same command, run again, resumes (SIGTERM stops
the trainings too; exit status 143). Each folder records the settings its run was trained with (settings.json:
--data, and at sample scale --bpe, --epochs, --budget-minutes, --max-tokens, --lr, --average): a command with
other settings stops before training, naming the difference. Progress goes to the terminal (one line a
validation); the run's output to DIR/ROW-seedN/train.log and eval.log.
At the end (and with --report alone, of every run in DIR unless --rows or --seeds choose), DIR/results.md: the
runs found, one table, each row's mean over its seeds with the seeds' range, the paper's number, parameters,
updates and time; which rows' seed ranges do not overlap (none claimed for a row with one seed); and
DIR/curves.png, validation loss against updates and against training time (CPU time at sample scale).
--record FOLDER keeps what the table is made of (each run's command, curve and result, the table, the figure and
a meta.json with the command, commit, date and machine), e.g. under benchmarks/results/; it refuses a checkout
whose tracked files have changed (the commit would not be what ran). Runs that take hours go from a clean clone
at one commit: scripts/at_commit.sh COMMIT WORKDIR -- python scripts/paper_table.py ... --record FOLDER.
"""

import argparse
import concurrent.futures
import functools
import glob
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import demo_report  # noqa: E402  (reads eval_wmt14.sh's BLEU and eval_lm.sh's perplexities)
import long_context  # noqa: E402  (the CPU-time clock, child processes and their clean stop)

if REPO not in sys.path:
    sys.path.insert(0, REPO)
from benchmarks import paper  # noqa: E402  (the paper's numbers)

# The paper's numbers (benchmarks/paper.json): {table: {row: the table's measure, None where none is quoted}}
PAPER = {table: paper.measures(table) for table in ("mt", "lm", "mlm")}
METRIC = {"mt": ("test BLEU (compound-split)", True), "lm": ("test perplexity, context 480", False),
          "mlm": ("validation perplexity", False)}  # (what the table compares, higher is better)
CONFIG = {"mt": "wmt14_en_de_{}", "lm": "wikitext103_{}", "mlm": "mlm_{}"}
TRAIN_SCRIPT = {"mt": "train_wmt14.sh", "lm": "train_wikitext103.sh", "mlm": "train_mlm.sh"}

# Sample scale: the demo's tiny translation model and schedule (scripts/demo.sh), and each row's attention
# settings scaled from its config (see the module's docstring).
TINY = ["model._name=transformer_eva_tiny", "lr_scheduler.warmup_updates=60", "common.log_interval=10",
        "dataset.num_workers=0", "optimization.update_freq=[1]"]
SCALED = {"softmax": [], "eva16": ["model.eva_window_size=2", "model.eva_num_chunks=4"],
          "eva32": ["model.eva_window_size=4", "model.eva_num_chunks=4"],
          "eva64": ["model.eva_window_size=8", "model.eva_num_chunks=4"],
          "performer128": ["model.performer_num_features=32"], "lara16": ["model.lara_num_landmarks=4"],
          "lara32": ["model.lara_num_landmarks=8"], "lara64": ["model.lara_num_landmarks=16"]}
# Rows beside the paper's at sample scale, each EVA-16's layer with one part taken away: exact softmax attention
# with EVA's relative position bias (one window over the whole sentence, no chunks) tells the bias from the
# approximation; local (EVA-16's window, no chunks) tells the windows from the chunk summaries.
CONTROLS = {"exact": ("eva16", ["model.eva_window_size=256", "model.eva_overlap=false", "model.eva_num_chunks=0"]),
            "local": ("eva16", ["model.eva_window_size=2", "model.eva_num_chunks=0"])}
SAMPLE = os.path.join(REPO, "data", "sample", "po_en_de")
# lm and mlm rows at sample scale: scripts/long_context.py's row of the same attention
SAMPLE_ROWS = {"lm": {"softmax_16l": "softmax", "eva_16l": "eva", "elu_16l": "elu", "rfa_16l": "rfa", "t2r_16l": "t2r"},
               "mlm": {f"{name}_2048": name for name in ("softmax", "eva", "local", "performer", "linformer", "lara",
                                                         "reformer", "combiner", "long_short")}}


log = long_context.log


def run_dir(work, row, seed):
    return os.path.join(work, f"{row}-seed{seed}")


SETTINGS = "settings.json"  # in each run's folder: the settings it was trained and evaluated with


def run_settings(args):
    """{option: value} of what a run's result depends on besides its row and seed: at sample scale the schedule,
    the batch, the data (and the BPE of the bundled sample), the checkpoints averaged; at full scale the data."""
    if args.scale == "full":
        return {"--data": os.path.abspath(args.data)}
    return {"--data": os.path.abspath(args.data) if args.data else "the bundled sample",
            "--bpe": None if args.data else args.bpe, "--epochs": args.epochs, "--budget-minutes": args.budget_minutes,
            "--max-tokens": args.max_tokens, "--lr": args.lr, "--average": args.average}


def settings_difference(recorded, asked):
    """`--epochs 1, and this run asks for --epochs 2`: the settings in which two records differ, or None."""
    differ = [key for key in asked if recorded.get(key) != asked[key]]
    if not differ:
        return None

    def show(settings):
        return ", ".join(f"{key} {settings.get(key)}" for key in differ)

    return f"{show(recorded)}, and this run asks for {show(asked)}"


def check_settings(args, runs):
    """Stop, naming the difference, where a run's folder (or the prepared sample) of `args.work` was made with other
    settings: its result would be reported as this run's, or the runs of one table would mix settings."""
    asked = run_settings(args)
    prepared = os.path.join(args.work, "data-bin", SETTINGS)
    if args.scale == "sample" and not args.data and os.path.exists(prepared):
        bpe = json.load(open(prepared))["--bpe"]
        if bpe != args.bpe:
            sys.exit(f"error: {os.path.dirname(prepared)} was prepared with --bpe {bpe}, and this run asks for --bpe "
                     f"{args.bpe}: give --bpe {bpe}, or another --work for this one")
    for row, seed in runs:
        path = os.path.join(run_dir(args.work, row, seed), SETTINGS)
        if os.path.exists(path):
            difference = settings_difference(json.load(open(path)), asked)
            if difference:
                sys.exit(f"error: {os.path.dirname(path)} was trained with {difference}: give its settings to resume "
                         "or report it, or another --work for these")


def keep_settings(args, save):
    """Record the settings a run is trained with in its folder (check_settings reads them)."""
    with open(os.path.join(save, SETTINGS), "w") as f:
        json.dump(run_settings(args), f)


# ---------------------------------------------------------------- sample scale (translation)

def prepare_sample(args, env):
    """The bundled En-De sample, Moses-tokenised, BPE-encoded and binarised as the WMT14 recipe does."""
    if args.data:
        return os.path.abspath(args.data)
    data = os.path.join(args.work, "data-bin")
    if os.path.exists(os.path.join(data, "test.en-de.de.idx")):
        return data
    log(f"data: {SAMPLE}, joint BPE of {args.bpe} merges ({args.work}/prep.log)")
    prep_env = {**env, **prepare_command(args, data)[1]}
    long_context.run(prepare_command(args, data)[0], prep_env, os.path.join(args.work, "prep.log"))
    with open(os.path.join(data, SETTINGS), "w") as f:
        json.dump({"--bpe": args.bpe}, f)
    return data


def prepare_command(args, data):
    """(the sample's preparation, its environment)."""
    return (["bash", os.path.join(REPO, "data_prep", "prepare_wmt14_en_de.sh"), "--raw", SAMPLE],
            {"WORK": os.path.join(args.work, "prep"), "DEST": data, "BPE_TOKENS": str(args.bpe), "WORKERS": "1"})


def sample_train_command(args, data, row, seed):
    """`paper_table.py _train` (fairseq-hydra-train with a CPU-time clock) on the row's config, tiny."""
    stop = [f"optimization.stop_time_hours={args.budget_minutes / 60}"] if args.budget_minutes else []
    config, attention = CONTROLS.get(row, (row, SCALED.get(row)))
    return [sys.executable, os.path.abspath(__file__), "_train", "--config-dir", os.path.join(REPO, "configs"),
            "--config-name", CONFIG["mt"].format(config),
            f"common.user_dir={os.path.join(REPO, 'fairseq_eva')}",
            f"task.data={data}", f"checkpoint.save_dir={run_dir(args.work, row, seed)}", "common.cpu=true",
            "common.fp16=false", "distributed_training.distributed_world_size=1", f"common.seed={seed}",
            f"dataset.max_tokens={args.max_tokens}", f"optimization.max_epoch={args.epochs}",
            f"optimization.lr=[{args.lr}]", f"checkpoint.keep_last_epochs={args.average}", *stop, *TINY, *attention]


def train_sample(args, data, row, seed, env):
    save = run_dir(args.work, row, seed)
    done = os.path.join(save, "trained.json")
    if os.path.exists(done):
        return
    os.makedirs(save, exist_ok=True)
    keep_settings(args, save)
    cmd = sample_train_command(args, data, row, seed)
    with open(os.path.join(save, "command.txt"), "w") as f:
        f.write(" ".join(cmd[2:]).replace(REPO + "/", "") + "\n")
    name, curve = os.path.basename(save), os.path.join(save, "curve.jsonl")
    log(f"{name}: training ({save}/train.log)")
    seen = sum(1 for _ in open(curve)) if os.path.exists(curve) else 0
    load = os.getloadavg()[0]
    with open(os.path.join(save, "train.log"), "a") as out:
        proc = long_context.start(cmd, env={**env, "PAPER_TABLE_CURVE": curve}, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            time.sleep(5)
            lines = open(curve).read().splitlines() if os.path.exists(curve) else []
            for line in lines[seen:]:
                r = json.loads(line)
                log(f"{name}: {r['updates']} updates, {r['cpu_s']:.0f} CPU s, valid loss {r['loss']:.3f}")
            seen = len(lines)
    if long_context.finish(proc) != 0:
        sys.exit(f"error: training {name} failed; see {save}/train.log")
    json.dump({"load": [load, os.getloadavg()[0]], "params": parameters(os.path.join(save, "train.log"))},
              open(done, "w"))


def parameters(logfile):
    """The model's parameter count, from fairseq-train's log."""
    for line in open(logfile, encoding="utf-8"):
        m = re.search(r"num\. shared model params: ([\d,]+)", line)
        if m:
            return int(m.group(1).replace(",", ""))
    return None


def evaluate_mt(args, data, save, env, n_avg):
    """scripts/eval_wmt14.sh on a run's folder: {bleu, sacrebleu} (also in save/result.json)."""
    result = os.path.join(save, "result.json")
    if os.path.exists(result):
        return json.load(open(result))
    log(f"{os.path.basename(save)}: average the last {n_avg} checkpoints, beam 4, length penalty 0.6, BLEU")
    long_context.run(["bash", os.path.join(HERE, "eval_wmt14.sh"), save], {**env, "DATA": data, "N_AVG": str(n_avg)},
                     os.path.join(save, "eval.log"))
    bleu, sacre = demo_report.read_bleu(os.path.join(save, "bleu.test.txt"))
    if bleu is None:
        sys.exit(f"error: no BLEU in {save}/bleu.test.txt; see {save}/eval.log")
    json.dump({"bleu": bleu, "sacrebleu": sacre}, open(result + ".tmp", "w"))
    os.replace(result + ".tmp", result)
    log(f"{os.path.basename(save)}: test BLEU {bleu:.2f} (compound-split), sacreBLEU {sacre}")
    return {"bleu": bleu, "sacrebleu": sacre}


def train_worker(argv):
    """fairseq-hydra-train whose training time (and --stop-time-hours) is this process's CPU time, recording
    (updates, CPU seconds, valid loss and nll_loss, base 2) at each validation in $PAPER_TABLE_CURVE."""
    import fairseq_cli.train  # noqa: F401  (first: it sets up fairseq's log format)

    fixes = long_context.fairseq_fixes()

    def recording_valid_stats(get_valid_stats):
        @functools.wraps(get_valid_stats)
        def wrapper(cfg, trainer, *rest):
            stats = get_valid_stats(cfg, trainer, *rest)
            with open(os.environ["PAPER_TABLE_CURVE"], "a") as f:
                f.write(json.dumps({"updates": trainer.get_num_updates(), "cpu_s": trainer.cumulative_training_time(),
                                    "loss": float(stats["loss"]), "nll_loss": float(stats.get("nll_loss", "nan"))}) + "\n")
            return stats

        return wrapper

    fixes.install(extra=[*long_context.cpu_clock(fixes.Wrap),
                         fixes.Wrap("fairseq_cli.train.get_valid_stats", recording_valid_stats, "paper_table")])
    from fairseq_cli import hydra_train

    sys.argv = ["fairseq-hydra-train", *argv]
    hydra_train.cli_main()


def long_context_command(args):
    """scripts/long_context.py on the table's rows that have a small counterpart (lm and mlm at sample scale)."""
    rows = [SAMPLE_ROWS[args.table][row] for row in args.rows]
    return [sys.executable, os.path.join(HERE, "long_context.py"), args.corpus, "--work", args.work, "--task", args.table,
            "--rows", ",".join(rows), "--seeds", ",".join(map(str, args.seeds)), "--parallel", str(args.parallel),
            *args.extra]


# ---------------------------------------------------------------- full scale

def full_commands(args, row, seed):
    """[(what, command, environment additions)] of one run at full size: training, then evaluation."""
    save = run_dir(args.work, row, seed)
    data = {"DATA": args.data, "SAVE_DIR": save}
    train = ("train", ["bash", os.path.join(HERE, TRAIN_SCRIPT[args.table]), row, f"common.seed={seed}"], data)
    if args.table == "mt":
        evaluate = ("evaluate", ["bash", os.path.join(HERE, "eval_wmt14.sh"), save], {"DATA": args.data, "N_AVG": "10"})
    elif args.table == "lm":
        evaluate = ("evaluate", ["bash", os.path.join(HERE, "eval_lm.sh"), os.path.join(save, "checkpoint_best.pt")],
                    {"DATA": args.data, "CONTEXTS": "0 256 480"})
    else:
        evaluate = ("evaluate", ["bash", os.path.join(HERE, "eval_mlm.sh"), os.path.join(save, "checkpoint_best.pt")],
                    {"DATA": args.data})
    return [train, evaluate]


def shell_line(cmd, env):
    import shlex

    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, map(str, cmd))])


def full_result(table, save):
    """The paper's number of a run at full size, from its evaluation's files; None before its evaluation."""
    if table == "mt":
        bleu, sacre = demo_report.read_bleu(os.path.join(save, "bleu.test.txt"))
        return None if bleu is None else {"bleu": bleu, "sacrebleu": sacre}
    if table == "lm":
        path = os.path.join(save, "ppl.tsv")
        if not os.path.exists(path):
            return None
        rows = demo_report.read_ppl(path)
        return {"ppl": {r["context"]: float(r["ppl"]) for r in rows if r["subset"] == "test"}}
    path = os.path.join(save, "ppl.valid.txt")
    return {"ppl": float(open(path).read().split()[-1])} if os.path.exists(path) else None


def run_full(args, row, seed, env):
    save = run_dir(args.work, row, seed)
    if full_result(args.table, save) is not None:
        return
    os.makedirs(save, exist_ok=True)
    keep_settings(args, save)
    for what, cmd, extra in full_commands(args, row, seed):
        log(f"{row}-seed{seed}: {what}: {shell_line(cmd, extra)}")
        long_context.run(cmd, {**env, **extra}, os.path.join(save, f"{what}.log"))


# ---------------------------------------------------------------- the table

def curve_of(table, save):
    """[(updates, training seconds, valid loss)] of a run: curve.jsonl (sample scale, CPU seconds) or fairseq's
    json valid records in train.log (full scale, wall-clock seconds)."""
    path = os.path.join(save, "curve.jsonl")
    if os.path.exists(path):
        return [(r["updates"], r["cpu_s"], r["loss"]) for r in map(json.loads, open(path))]
    points, wall = [], float("nan")
    record = re.compile(r"\]\[(train_inner|train|valid)\]\[INFO\] - (\{.*\})\s*$")
    log_file = os.path.join(save, "train.log")
    for line in open(log_file, encoding="utf-8") if os.path.exists(log_file) else []:
        m = record.search(line)
        if m and m.group(1) == "valid":  # a validation's time: the wall clock of the training record before it
            r = json.loads(m.group(2))
            points.append((int(r["valid_num_updates"]), wall, float(r["valid_loss"])))
        elif m:
            wall = float(json.loads(m.group(2)).get("wall", wall))
    return points


RUN_DIR = long_context.SEED_DIR  # ROW-seedN
RECORDED = ("command.txt", "curve.jsonl", "result.json", "trained.json", "bleu.test.txt", "ppl.tsv", "ppl.valid.txt")


def collect(table, work, rows=None, seeds=None):
    """{row: [summary of each seed's run with a result]} of the runs in `work` (all the table's rows and seeds
    there when not given), in the table's order of rows."""
    found = [m.groups() for m in map(RUN_DIR.fullmatch, sorted(os.listdir(work))) if m]
    rows = rows or [row for row in (*PAPER[table], *CONTROLS) if any(r == row for r, _ in found)]
    seeds = seeds or sorted({int(s) for _, s in found})
    runs = {}
    for row in rows:
        for seed in seeds:
            save = run_dir(work, row, seed)
            result = (json.load(open(os.path.join(save, "result.json")))
                      if os.path.exists(os.path.join(save, "result.json")) else full_result(table, save))
            if result is None:
                continue
            trained = os.path.join(save, "trained.json")
            params = (json.load(open(trained))["params"] if os.path.exists(trained)
                      else parameters(os.path.join(save, "train.log")))
            settings = os.path.join(save, SETTINGS)
            runs.setdefault(row, []).append({"seed": seed, "result": result, "curve": curve_of(table, save),
                                             "params": params,
                                             "settings": json.load(open(settings)) if os.path.exists(settings) else None})
    return runs


def check_one_setting(work, runs):
    """Stop, naming two runs and their difference, where the runs of the table were made with other settings."""
    recorded = [(run_dir(work, row, r["seed"]), r["settings"]) for row, rs in runs.items() for r in rs if r["settings"]]
    for save, settings in recorded[1:]:
        difference = settings_difference(settings, recorded[0][1])
        if difference:
            difference = difference.replace("and this run asks for", f"and {recorded[0][0]} with")
            sys.exit(f"error: {save} was trained with {difference}: one table compares runs of one setting; report "
                     "them from separate --work folders")


def runs_text(runs):
    """`softmax (seeds 1, 2), eva16 (seed 1)`: the rows and seeds that the table is made of."""
    def seeds(rs):
        numbers = ", ".join(str(r["seed"]) for r in rs)
        return f"seed {numbers}" if len(rs) == 1 else f"seeds {numbers}"

    return ", ".join(f"{row} ({seeds(rs)})" for row, rs in runs.items()) or "none finished"


def keep_record(work, record):
    """The runs' small files (commands, curves, results; not checkpoints or logs), the table and the figure,
    copied into `record` (a folder under benchmarks/results/)."""
    import shutil

    for name in os.listdir(work):
        done = [kept for kept in RECORDED if os.path.exists(os.path.join(work, name, kept))]
        if RUN_DIR.fullmatch(name) and {"result.json", "bleu.test.txt", "ppl.tsv", "ppl.valid.txt"} & set(done):
            os.makedirs(os.path.join(record, name), exist_ok=True)
            for kept in done:  # the machine's folders as placeholders, as in the other records
                with open(os.path.join(work, name, kept), encoding="utf-8") as f:
                    text = f.read().replace(work, "WORK").replace(REPO, "REPO")
                with open(os.path.join(record, name, kept), "w", encoding="utf-8") as f:
                    f.write(text)
    for kept in ("results.md", "curves.png"):
        shutil.copy(os.path.join(work, kept), os.path.join(record, kept))
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "CPU")
    meta = {"command": "python scripts/paper_table.py " + " ".join(sys.argv[1:]).replace(work, "WORK").replace(REPO + "/", ""),
            "commit": commit.strip() or "unknown", "date": time.strftime("%Y-%m-%d"),
            "device": f"{cpu}, {os.cpu_count()} cores, one thread a run"}
    json.dump(meta, open(os.path.join(record, "meta.json"), "w"), indent=1)


def uncommitted():
    """The repository's tracked files differ from its commit (False where git cannot tell)."""
    r = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                       text=True)
    return r.returncode == 0 and bool(r.stdout.strip())


def score(table, result):
    return result["bleu"] if table == "mt" else result["ppl"]["480"] if table == "lm" else result["ppl"]


def spread_text(values):
    """The mean, and the lowest and highest value in brackets where they differ."""
    mean = sum(values) / len(values)
    return f"{mean:.2f}" if min(values) == max(values) else f"{mean:.2f} ({min(values):.2f}-{max(values):.2f})"


def beyond_spread(a, b, higher):
    """The rule of every ordering on the pages: the values of row a (one a seed) are all better than those of b
    (its worst seed better than b's best); a row of one seed has no spread and is never apart."""
    if min(len(a), len(b)) < 2:
        return False
    return min(a) > max(b) if higher else max(a) < min(b)


def orderings(table, runs, measure=None):
    """Sentences: the rows by their mean; where two rows or more have several seeds, every pair of them whose
    seeds' ranges do not overlap (the one row's worst seed better than the other's best), then those that do; a
    row of one seed has no spread, so no pair with it is ordered (a last sentence names those pairs). `measure`
    names what the scores are where it is not the table's own metric."""
    name, higher = METRIC[table]
    name = measure or name
    scores = {row: [score(table, r["result"]) for r in rs] for row, rs in runs.items()}
    mean = {row: sum(v) / len(v) for row, v in scores.items()}
    order = sorted(mean, key=lambda row: -mean[row] if higher else mean[row])
    apart, close, alone = [], [], []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if min(len(scores[a]), len(scores[b])) < 2:
                alone.append(f"{a} ? {b}")
                continue
            separated = beyond_spread(scores[a], scores[b], higher)
            (apart if separated else close).append(f"{a} > {b}" if separated else f"{a} ~ {b}")
    lines = [f"By the mean {name} over seeds: " + ", ".join(f"{row} {mean[row]:.2f}" for row in order) + "."]
    if apart or close:
        lines += ["Apart by more than the seeds' spread (every seed of the first better than every seed of the "
                  "second): " + (", ".join(apart) if apart else "none") + ".",
                  "Within the spread (seed ranges overlap): " + (", ".join(close) if close else "none") + "."]
    if alone:
        lines.append("Not ordered (a row of one seed has no spread; give more --seeds): " + ", ".join(alone) + ".")
    return lines


def table_lines(table, scale, runs):
    """The table (one line a row: the paper's number, the mean over seeds with their range, parameters, updates
    and training time) and the orderings, as Markdown lines."""
    name, _ = METRIC[table]
    clock = "CPU" if scale == "sample" else "wall-clock"
    sacre = ["sacreBLEU"] if table == "mt" else []
    head = ["row", "paper", name, *sacre, "seeds", "parameters", "updates", f"{clock} min"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row, rs in runs.items():
        paper = PAPER[table].get(row)
        cells = [row, "-" if paper is None else str(paper), spread_text([score(table, r["result"]) for r in rs])]
        if sacre:
            values = [r["result"]["sacrebleu"] for r in rs]
            cells.append("-" if None in values else spread_text(values))
        params = {r["params"] for r in rs}
        ends = [r["curve"][-1] for r in rs if r["curve"]]
        complete = len(ends) == len(rs)
        cells += [len(rs), ", ".join(f"{p:,}" for p in sorted(params)) if None not in params else "-",
                  spread_text([e[0] for e in ends]).replace(".00", "") if complete else "-",  # whole updates
                  spread_text([e[1] / 60 for e in ends]) if complete else "-"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines + (["", *(f"- {line}" for line in orderings(table, runs))] if runs else [])


def report(args):
    alone = args.report  # --report alone: every run in --work unless --rows or --seeds chose some
    runs = collect(args.table, args.work, args.rows if args.given["rows"] or not alone else None,
                   args.seeds if args.given["seeds"] or not alone else None)
    check_one_setting(args.work, runs)
    name, _ = METRIC[args.table]
    lines = [f"# The {args.table} table at {args.scale} scale", "",
             f"Runs: {runs_text(runs)}. {name}: the mean over seeds (lowest-highest seed in brackets).", "",
             *table_lines(args.table, args.scale, runs)]
    with open(os.path.join(args.work, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(runs, os.path.join(args.work, "curves.png"), f"{args.table}, {args.scale} scale",
         "CPU" if args.scale == "sample" else "wall-clock")
    log(f"results: {args.work}/results.md, {args.work}/curves.png")
    if args.record:
        keep_record(args.work, args.record)
        log(f"record: {args.record}")
    return runs


def plot(runs, path, title, clock):
    """Validation loss against updates (left) and training time (right); a row's seeds share a colour."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
        return
    if not runs:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4), sharey=True)
    for i, (row, rs) in enumerate(runs.items()):
        for j, r in enumerate(rs):
            for ax, x in zip(axes, (0, 1)):
                ax.plot([p[x] / (1 if x == 0 else 60) for p in r["curve"]], [p[2] for p in r["curve"]],
                        "-" if j == 0 else "--", color=f"C{i % 10}", marker=".", label=row if j == 0 else None)
    axes[0].set(xlabel="updates", ylabel="validation loss (base 2)", title=title)
    axes[1].set(xlabel=f"training {clock} time (min)", title=title)
    axes[1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------- command line

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", required=True, choices=sorted(PAPER), help="the paper's table (see above)")
    p.add_argument("--scale", default="sample", choices=("sample", "full"), help="sample (CPU) or full (GPUs) (sample)")
    p.add_argument("--work", required=True, help="folder of the runs, resumable, and of results.md and curves.png")
    p.add_argument("--rows", help="comma-separated rows (every row of the table)")
    p.add_argument("--seeds", help="comma-separated seeds, each row trained once per seed (1,2,3)")
    p.add_argument("--data", help="the binarised data of the table (data_prep/): needed at full scale; at sample "
                   "scale (mt) it replaces the bundled sample")
    p.add_argument("--dry-run", action="store_true", help="print every command of the run (the data's preparation, "
                   "each run's training and evaluation, as you can run them yourself) and run none")
    p.add_argument("--report", action="store_true", help="only write the table and figure of what has finished (the "
                   "rows and seeds in --work, or those of --rows and --seeds)")
    p.add_argument("--allow-cpu", action="store_true", help="full: train at full size although torch sees no GPU "
                   "(refused without it: the paper's models would train for weeks on a CPU; NGPUS=0 counts as none)")
    p.add_argument("--record", help="also copy the runs' commands, curves and results, the table and the figure here")
    p.add_argument("--parallel", type=int, default=2, help="sample: runs trained at once, one thread each (2)")
    p.add_argument("--epochs", type=int, default=8, help="sample: epochs of each run (8, as the demo)")
    p.add_argument("--budget-minutes", type=float, default=0,
                   help="sample: also stop a run at this much CPU time of its training process (0: no limit)")
    p.add_argument("--max-tokens", type=int, default=2048, help="sample: tokens a batch (2048)")
    p.add_argument("--lr", type=float, default=0.01, help="sample: peak learning rate (0.01, as the demo)")
    p.add_argument("--average", type=int, default=3, help="sample: last epoch checkpoints averaged (3, as the demo)")
    p.add_argument("--bpe", type=int, default=2000, help="sample: joint BPE merges (2000)")
    p.add_argument("--corpus", default=os.path.join(REPO, "data", "sample", "doc_en"),
                   help="lm and mlm at sample scale: plain text train.txt, valid.txt, test.txt (data/sample/doc_en)")
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[:len(argv) - len(extra) - (1 if "--" in argv else 0)])
    args.extra = extra
    args.given = {"rows": args.rows is not None, "seeds": args.seeds is not None}  # else --report finds them
    sample_rows = SAMPLE_ROWS.get(args.table) if args.scale == "sample" else None
    args.rows = (args.rows.split(",") if args.rows else
                 list(sample_rows) if sample_rows else list(PAPER[args.table]))
    known = [*PAPER[args.table], *(CONTROLS if args.table == "mt" and args.scale == "sample" else ())]
    unknown = [row for row in args.rows if row not in known]
    if unknown:
        p.error(f"--rows: no {args.table} row {', '.join(unknown)}; its rows: {', '.join(known)}")
    twice = sorted({row for row in args.rows if args.rows.count(row) > 1})
    if twice:
        p.error(f"--rows: {', '.join(twice)} given twice; each row is one run a seed: give each once")
    args.seeds = long_context.seed_list(p, args.seeds or "1,2,3")
    if sample_rows:
        alone = [row for row in args.rows if row not in sample_rows]
        if alone:
            p.error(f"--rows: {', '.join(alone)} has no small counterpart at sample scale; the {args.table} rows there: "
                    f"{', '.join(sample_rows)}")
    if extra and not sample_rows:
        p.error("arguments after -- go to scripts/long_context.py: only with --table lm or mlm at sample scale")
    if args.scale == "full" and not args.data and not args.report:
        p.error("--scale full needs --data, the binarised data of the table")
    if args.parallel < 1:
        p.error("--parallel must be at least 1")
    if args.epochs < 1:
        p.error(f"--epochs {args.epochs}: give 1 or more (fairseq reads 0 as no limit of epochs)")
    if args.table == "mt" and args.scale == "sample" and not args.report:
        if args.average < 1:
            p.error(f"--average {args.average}: give 1 or more (the last epoch checkpoints averaged)")
        if args.epochs < args.average:
            p.error(f"--epochs {args.epochs} is fewer than --average {args.average}, the last epoch checkpoints "
                    f"averaged for the evaluation: give --average {args.epochs} or less, or --epochs {args.average} "
                    "or more")
        if args.data and not glob.glob(os.path.join(args.data, "dict.*.txt")):
            what = "is not a folder" if not os.path.isdir(args.data) else "holds no binarised data (no dict.*.txt)"
            p.error(f"--data {args.data} {what}: give the DEST of data_prep/prepare_wmt14_en_de.sh (fairseq-preprocess's "
                    "--destdir), or leave --data out for the bundled sample")
    if args.record and uncommitted():
        p.error("--record: this checkout's tracked files have uncommitted changes, so the record could not name the "
                "commit that ran; commit them, or run from a clean clone at one commit (scripts/at_commit.sh)")
    return args


def gpus():
    """The GPUs a full-size run would train on: $NGPUS, as the training scripts read it, else those torch sees."""
    if os.environ.get("NGPUS"):
        return int(os.environ["NGPUS"])
    import torch

    return torch.cuda.device_count()


def sample_dry_run(args, runs):
    """The sample scale's commands as one can run them: the data's preparation, then each run's fairseq-hydra-train
    (what `_train` runs, without its CPU-time clock) and evaluation."""
    data = os.path.abspath(args.data) if args.data else os.path.join(args.work, "data-bin")
    if not args.data:
        cmd, env = prepare_command(args, data)
        print(f"# data: the bundled sample, Moses and a joint BPE of {args.bpe} merges, binarised into {data}\n"
              + shell_line(cmd, env))
    threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for row, seed in runs:
        save = run_dir(args.work, row, seed)
        print(f"# {row}, seed {seed}: train\n"
              + shell_line(["fairseq-hydra-train", *sample_train_command(args, data, row, seed)[3:]], threads))
        print(f"# {row}, seed {seed}: average the last {args.average} epoch checkpoints, translate the test split "
              "(beam 4, length penalty 0.6), BLEU\n"
              + shell_line(["bash", os.path.join(HERE, "eval_wmt14.sh"), save],
                           {**threads, "DATA": data, "N_AVG": str(args.average), "NGPUS": "0"}))
    if args.budget_minutes:
        print("# (paper_table.py counts optimization.stop_time_hours in CPU time of the training process; "
              "fairseq-hydra-train alone counts wall-clock time)")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_train":
        return train_worker(sys.argv[2:])
    args = parse_args()
    args.work = os.path.abspath(args.work)
    if args.scale == "sample" and args.table != "mt":  # long_context.py's rows
        cmd = long_context_command(args)
        if args.dry_run:
            print(shell_line(cmd, {}))
            return
        long_context.stopping_cleanly(lambda: sys.exit(long_context.finish(long_context.start(cmd))))
    runs = [(row, seed) for seed in args.seeds for row in args.rows]  # seed by seed: an early stop leaves whole seeds
    if not args.report:
        check_settings(args, runs)
    if args.dry_run:
        if args.scale == "sample":
            return sample_dry_run(args, runs)
        for row, seed in runs:
            for what, cmd, extra in full_commands(args, row, seed):
                print(f"# {row}, seed {seed}: {what}\n{shell_line(cmd, extra)}")
        return
    if args.scale == "full" and not args.report and not args.allow_cpu and gpus() == 0:
        sys.exit("error: --scale full trains the paper's full-size models, and there is no GPU here (torch sees none, "
                 "or NGPUS=0): on a CPU that takes weeks. Use --scale sample, or give --allow-cpu to train at full "
                 "size on the CPU anyway")
    os.makedirs(args.work, exist_ok=True)
    if args.report:
        report(args)
        return
    long_context.stopping_cleanly(lambda: train_and_report(args, runs))


def train_and_report(args, runs):
    """Train and evaluate the runs not done yet, then write the table (main, once the arguments are checked)."""
    tools = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": tools + os.pathsep + os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PYTHON": sys.executable,
           "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if args.scale == "sample":
        env["NGPUS"] = "0"  # the sample's runs, their evaluation included, on the CPU
    if args.scale == "full":
        for row, seed in runs:
            run_full(args, row, seed, env)
    else:
        data = prepare_sample(args, env)
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            def one(job):
                train_sample(args, data, *job, env)
                evaluate_mt(args, data, run_dir(args.work, *job), env, args.average)

            list(pool.map(one, runs))
    report(args)


if __name__ == "__main__":
    main()
