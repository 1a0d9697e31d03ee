"""The paper's tables at the sample's scale and at full size (scripts/paper_table.py): the runs' settings,
training, evaluation, the records and the table."""

import argparse
import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys
import time

from . import long_context, worker
from .evaluations import read_bleu, read_ppl
from .processes import finish, log, run, start, stopping_cleanly
from .reports import (  # noqa: F401  (the records' tables read beyond_spread, orderings and spread_text here)
    METRIC,
    PAPER,
    beyond_spread,
    orderings,
    plot_losses,
    runs_text,
    score,
    spread_text,
    table_lines,
)
from .rows import CONTROLS, SAMPLE_ROWS, SCALED, TINY

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "scripts")  # the training and evaluation scripts that the runs call
CONFIG = {"mt": "wmt14_en_de_{}", "lm": "wikitext103_{}", "mlm": "mlm_{}"}
TRAIN_SCRIPT = {"mt": "train_wmt14.sh", "lm": "train_wikitext103.sh", "mlm": "train_mlm.sh"}
SAMPLE = os.path.join(REPO, "data", "sample", "po_en_de")


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
    run(prepare_command(args, data)[0], prep_env, os.path.join(args.work, "prep.log"))
    with open(os.path.join(data, SETTINGS), "w") as f:
        json.dump({"--bpe": args.bpe}, f)
    return data


def prepare_command(args, data):
    """(the sample's preparation, its environment)."""
    return (["bash", os.path.join(REPO, "data_prep", "prepare_wmt14_en_de.sh"), "--raw", SAMPLE],
            {"WORK": os.path.join(args.work, "prep"), "DEST": data, "BPE_TOKENS": str(args.bpe), "WORKERS": "1"})


def sample_train_command(args, data, row, seed):
    """The worker's fairseq-hydra-train (with a CPU-time clock) on the row's config, tiny."""
    stop = [f"optimization.stop_time_hours={args.budget_minutes / 60}"] if args.budget_minutes else []
    config, attention = CONTROLS.get(row, (row, SCALED.get(row)))
    return worker.command("fairseq-hydra-train", [
        "--config-dir", os.path.join(REPO, "configs"),
        "--config-name", CONFIG["mt"].format(config),
        f"common.user_dir={os.path.join(REPO, 'fairseq_eva')}",
        f"task.data={data}", f"checkpoint.save_dir={run_dir(args.work, row, seed)}", "common.cpu=true",
        "common.fp16=false", "distributed_training.distributed_world_size=1", f"common.seed={seed}",
        f"dataset.max_tokens={args.max_tokens}", f"optimization.max_epoch={args.epochs}",
        f"optimization.lr=[{args.lr}]", f"checkpoint.keep_last_epochs={args.average}", *stop, *TINY, *attention])


def train_sample(args, data, row, seed, env):
    save = run_dir(args.work, row, seed)
    done = os.path.join(save, "trained.json")
    if os.path.exists(done):
        return
    os.makedirs(save, exist_ok=True)
    keep_settings(args, save)
    cmd = sample_train_command(args, data, row, seed)
    with open(os.path.join(save, "command.txt"), "w") as f:
        f.write(" ".join(worker.tool_words(cmd)).replace(REPO + "/", "") + "\n")
    name, curve = os.path.basename(save), os.path.join(save, "curve.jsonl")
    log(f"{name}: training ({save}/train.log)")
    seen = sum(1 for _ in open(curve)) if os.path.exists(curve) else 0
    load = os.getloadavg()[0]
    with open(os.path.join(save, "train.log"), "a") as out:
        proc = start(cmd, env={**env, worker.CURVE: curve}, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            time.sleep(5)
            lines = open(curve).read().splitlines() if os.path.exists(curve) else []
            for line in lines[seen:]:
                r = json.loads(line)
                log(f"{name}: {r['updates']} updates, {r['cpu_s']:.0f} CPU s, valid loss {r['loss']:.3f}")
            seen = len(lines)
    if finish(proc) != 0:
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
    run(["bash", os.path.join(SCRIPTS, "eval_wmt14.sh"), save], {**env, "DATA": data, "N_AVG": str(n_avg)},
                     os.path.join(save, "eval.log"))
    bleu, sacre = read_bleu(os.path.join(save, "bleu.test.txt"))
    if bleu is None:
        sys.exit(f"error: no BLEU in {save}/bleu.test.txt; see {save}/eval.log")
    json.dump({"bleu": bleu, "sacrebleu": sacre}, open(result + ".tmp", "w"))
    os.replace(result + ".tmp", result)
    log(f"{os.path.basename(save)}: test BLEU {bleu:.2f} (compound-split), sacreBLEU {sacre}")
    return {"bleu": bleu, "sacrebleu": sacre}


def long_context_command(args):
    """scripts/long_context.py on the table's rows that have a small counterpart (lm and mlm at sample scale)."""
    rows = [SAMPLE_ROWS[args.table][row] for row in args.rows]
    return [sys.executable, os.path.join(SCRIPTS, "long_context.py"), args.corpus, "--work", args.work, "--task", args.table,
            "--rows", ",".join(rows), "--seeds", ",".join(map(str, args.seeds)), "--parallel", str(args.parallel),
            *args.extra]


# ---------------------------------------------------------------- full scale

def full_commands(args, row, seed):
    """[(what, command, environment additions)] of one run at full size: training, then evaluation."""
    save = run_dir(args.work, row, seed)
    data = {"DATA": args.data, "SAVE_DIR": save}
    train = ("train", ["bash", os.path.join(SCRIPTS, TRAIN_SCRIPT[args.table]), row, f"common.seed={seed}"], data)
    if args.table == "mt":
        evaluate = ("evaluate", ["bash", os.path.join(SCRIPTS, "eval_wmt14.sh"), save], {"DATA": args.data, "N_AVG": "10"})
    elif args.table == "lm":
        evaluate = ("evaluate", ["bash", os.path.join(SCRIPTS, "eval_lm.sh"), os.path.join(save, "checkpoint_best.pt")],
                    {"DATA": args.data, "CONTEXTS": "0 256 480"})
    else:
        evaluate = ("evaluate", ["bash", os.path.join(SCRIPTS, "eval_mlm.sh"), os.path.join(save, "checkpoint_best.pt")],
                    {"DATA": args.data})
    return [train, evaluate]


def shell_line(cmd, env):
    import shlex

    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, map(str, cmd))])


def full_result(table, save):
    """The paper's number of a run at full size, from its evaluation's files; None before its evaluation."""
    if table == "mt":
        bleu, sacre = read_bleu(os.path.join(save, "bleu.test.txt"))
        return None if bleu is None else {"bleu": bleu, "sacrebleu": sacre}
    if table == "lm":
        path = os.path.join(save, "ppl.tsv")
        if not os.path.exists(path):
            return None
        rows = read_ppl(path)
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
        run(cmd, {**env, **extra}, os.path.join(save, f"{what}.log"))


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
    plot_losses(runs, os.path.join(args.work, "curves.png"), f"{args.table}, {args.scale} scale",
         "CPU" if args.scale == "sample" else "wall-clock")
    log(f"results: {args.work}/results.md, {args.work}/curves.png")
    if args.record:
        keep_record(args.work, args.record)
        log(f"record: {args.record}")
    return runs


# ---------------------------------------------------------------- command line

def parse_args(argv=None, description=None):
    """The arguments (scripts/paper_table.py --help, whose text is `description`), checked."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    (what the worker runs, without its CPU-time clock) and evaluation."""
    data = os.path.abspath(args.data) if args.data else os.path.join(args.work, "data-bin")
    if not args.data:
        cmd, env = prepare_command(args, data)
        print(f"# data: the bundled sample, Moses and a joint BPE of {args.bpe} merges, binarised into {data}\n"
              + shell_line(cmd, env))
    threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for row, seed in runs:
        save = run_dir(args.work, row, seed)
        print(f"# {row}, seed {seed}: train\n"
              + shell_line(worker.tool_words(sample_train_command(args, data, row, seed)), threads))
        print(f"# {row}, seed {seed}: average the last {args.average} epoch checkpoints, translate the test split "
              "(beam 4, length penalty 0.6), BLEU\n"
              + shell_line(["bash", os.path.join(SCRIPTS, "eval_wmt14.sh"), save],
                           {**threads, "DATA": data, "N_AVG": str(args.average), "NGPUS": "0"}))
    if args.budget_minutes:
        print("# (paper_table.py counts optimization.stop_time_hours in CPU time of the training process; "
              "fairseq-hydra-train alone counts wall-clock time)")


def main(description=None):
    """scripts/paper_table.py: `description` is its --help text."""
    args = parse_args(description=description)
    args.work = os.path.abspath(args.work)
    if args.scale == "sample" and args.table != "mt":  # long_context.py's rows
        cmd = long_context_command(args)
        if args.dry_run:
            print(shell_line(cmd, {}))
            return
        stopping_cleanly(lambda: sys.exit(finish(start(cmd))))
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
    stopping_cleanly(lambda: train_and_report(args, runs))


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

