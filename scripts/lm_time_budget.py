#!/usr/bin/env python
"""Language models of equal size and equal CPU time: softmax, causal EVA and local attention.

  python scripts/lm_time_budget.py CORPUS --work DIR [--budget-minutes 20] [--tokens-per-sample 2048]

CORPUS holds plain text train.txt, valid.txt, test.txt (paragraphs, a blank line between documents).
Steps, each skipped when its output exists (run the same command again to resume):
  1. a sentencepiece vocabulary and binarised data, by data_prep/prepare_mlm.sh (BPE=sentencepiece),
     from the first --train-words words of train.txt (whole documents) and all of valid and test; plus a
     'valid_small' split (the first --valid-words words of valid.txt) for the curves;
  2. each row trains (fairseq-train, one process at a time, --threads threads) until its process CPU time
     reaches the budget; the stop is fairseq's --stop-time-hours, counted here in CPU seconds of the
     training process (validation included) rather than in wall-clock seconds, so that rows are
     comparable on a loaded machine. A row interrupted part way resumes from its checkpoint_last.pt
     with the CPU time it had spent (fairseq stores it in the checkpoint);
     progress: each validation prints the row, CPU seconds, updates and valid_small perplexity, also
     appended to DIR/ROW/curve.jsonl;
  3. fairseq-eval-lm test perplexity of each row's last checkpoint, context windows 0 and half the block;
  4. DIR/results.md (the table, the commands) and DIR/curves.png (valid perplexity against CPU time).
Rows (--rows): softmax (transformer_lm_eva --decoder-attention softmax, the same model as the others but
for its attention), eva (window 128, chunk size 8, relative position bias: the paper's causal setting),
local (the same with chunk size 0). Every row gets the same command but for these options.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ROWS = {
    "softmax": ["--decoder-attention", "softmax"],
    "eva": ["--decoder-attention", "eva", "--eva-window-size", "128", "--eva-chunk-size", "8", "--eva-rpe", "true"],
    "local": ["--decoder-attention", "eva", "--eva-window-size", "128", "--eva-chunk-size", "0", "--eva-rpe", "true"],
}


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(cmd, env, logfile=None):
    """Run a command; on failure stop with its log's tail."""
    with open(logfile or os.devnull, "a") as out:
        proc = subprocess.run([str(c) for c in cmd], env=env, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = open(logfile).read()[-3000:] if logfile else ""
        sys.exit(f"error: {cmd[0]} {cmd[1]} failed (exit {proc.returncode}); log {logfile}\n{tail}")


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
        subprocess.run([sys.executable, os.path.join(REPO, "data_prep", "mlm_text.py"), "encode", "--spm",
                        os.path.join(bin_dir, "spm.model")], stdin=f, stdout=g, env=env, check=True)
    tmp = os.path.join(args.work, "valid_small.bin.tmp")
    run(["fairseq-preprocess", "--only-source", "--srcdict", os.path.join(bin_dir, "dict.txt"), "--validpref", small,
         "--destdir", tmp, "--workers", "1"], env, os.path.join(args.work, "prep.log"))
    for ext in ("bin", "idx"):
        os.replace(os.path.join(tmp, f"valid.{ext}"), os.path.join(bin_dir, f"valid_small.{ext}"))
    shutil.rmtree(tmp)
    return bin_dir


def train_command(args, bin_dir, row):
    save = os.path.join(args.work, row)
    return [sys.executable, os.path.abspath(__file__), "_train", bin_dir, "--user-dir", os.path.join(REPO, "fairseq_eva"),
            "--task", "language_modeling", "--arch", "transformer_lm_eva", *ROWS[row],
            "--decoder-layers", args.layers, "--decoder-embed-dim", args.dim, "--decoder-ffn-embed-dim", args.ffn,
            "--decoder-attention-heads", args.heads, "--tokens-per-sample", args.tokens_per_sample,
            "--sample-break-mode", "none", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", args.lr,
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", args.warmup, "--clip-norm", "1.0", "--dropout", "0.1",
            "--max-tokens", args.tokens_per_sample * args.blocks_per_batch, "--cpu", "--seed", args.seed,
            "--log-format", "json", "--log-interval", "10", "--valid-subset", "valid_small",
            "--validate-interval-updates", args.validate_every, "--save-interval-updates", args.validate_every,
            "--keep-interval-updates", "1", "--no-epoch-checkpoints", "--max-epoch", "1000",
            "--stop-time-hours", args.budget_minutes / 60, "--save-dir", save]


def train(args, bin_dir, row, env):
    save = os.path.join(args.work, row)
    os.makedirs(save, exist_ok=True)
    done = os.path.join(save, "done")  # holds the budget it was trained to
    if os.path.exists(done):
        if float(open(done).read()) >= args.budget_minutes:
            return
        for name in ("done", "test_ppl.json"):  # a larger budget: train on from checkpoint_last.pt
            os.remove(os.path.join(save, name)) if os.path.exists(os.path.join(save, name)) else None
    cmd = train_command(args, bin_dir, row)
    with open(os.path.join(save, "command.txt"), "w") as f:
        f.write(" ".join(str(c) for c in cmd[2:]).replace(sys.executable, "python") + "\n")
    log(f"{row}: training for {args.budget_minutes} CPU minutes ({save}/train.log)")
    curve = os.path.join(save, "curve.jsonl")
    seen = sum(1 for _ in open(curve)) if os.path.exists(curve) else 0
    with open(os.path.join(save, "train.log"), "a") as out:
        proc = subprocess.Popen([str(c) for c in cmd], env={**env, "LM_CURVE": curve}, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            time.sleep(5)
            if os.path.exists(curve):
                lines = open(curve).read().splitlines()
                for line in lines[seen:]:
                    r = json.loads(line)
                    log(f"{row}: {r['cpu_s']:.0f}/{args.budget_minutes * 60:.0f} CPU s, {r['updates']} updates, "
                        f"valid_small ppl {r['ppl']:.1f}")
                seen = len(lines)
    if proc.returncode != 0:
        sys.exit(f"error: training {row} failed (exit {proc.returncode}); see {save}/train.log")
    with open(done, "w") as f:
        f.write(f"{args.budget_minutes}\n")


def evaluate(args, bin_dir, row, env):
    save = os.path.join(args.work, row)
    result = os.path.join(save, "test_ppl.json")
    if os.path.exists(result):
        return json.load(open(result))
    ppl = {}
    for context in (0, args.tokens_per_sample // 2):
        logfile = os.path.join(save, f"eval_lm.ctx{context}.log")
        run(["fairseq-eval-lm", bin_dir, "--user-dir", os.path.join(REPO, "fairseq_eva"), "--path",
             os.path.join(save, "checkpoint_last.pt"), "--gen-subset", "test", "--tokens-per-sample", args.tokens_per_sample,
             "--context-window", context, "--batch-size", "4", "--cpu"], env, logfile)
        line = [x for x in open(logfile) if "Perplexity:" in x][-1]
        ppl[context] = float(line.rsplit("Perplexity:", 1)[1])
        log(f"{row}: test perplexity, context {context}: {ppl[context]:.2f}")
    json.dump(ppl, open(result, "w"))
    return {str(k): v for k, v in ppl.items()}


def report(args, results):
    curves = {row: [json.loads(x) for x in open(os.path.join(args.work, row, "curve.jsonl"))] for row in results}
    half = args.tokens_per_sample // 2
    lines = [f"# Language models at equal CPU time ({args.budget_minutes} min, {args.threads} thread(s))", "",
             f"Corpus {os.path.abspath(args.corpus)}; blocks of {args.tokens_per_sample}; "
             f"{args.layers} layers, {args.dim} dims, FFN {args.ffn}, {args.heads} heads; sentencepiece {args.vocab}.", "",
             f"| row | updates | CPU s | valid_small ppl | test ppl, context 0 | context {half} |", "|---|---|---|---|---|---|"]
    for row, ppl in results.items():
        last = curves[row][-1] if curves[row] else {"updates": 0, "cpu_s": 0, "ppl": float("nan")}
        lines.append(f"| {row} | {last['updates']} | {last['cpu_s']:.0f} | {last['ppl']:.2f} | {ppl['0']:.2f} | "
                     f"{ppl[str(half)]:.2f} |")
    lines += ["", "Commands (fairseq-train arguments; `_train` counts CPU time):", ""]
    lines += [f"- {row}: `{open(os.path.join(args.work, row, 'command.txt')).read().strip()}`" for row in results]
    with open(os.path.join(args.work, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
    else:
        fig, ax = plt.subplots(figsize=(6, 4))
        for row, points in curves.items():
            ax.plot([p["cpu_s"] / 60 for p in points], [p["ppl"] for p in points], marker="o", label=row)
        ax.set(xlabel="training CPU time (min)", ylabel="valid_small perplexity", yscale="log",
               title=f"blocks of {args.tokens_per_sample}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.work, "curves.png"), dpi=100)
    log(f"results: {os.path.join(args.work, 'results.md')}")


def train_worker(argv):
    """fairseq-train whose --stop-time-hours counts this process's CPU time, and which records
    (CPU seconds, updates, valid perplexity) at each validation in $LM_CURVE."""
    import fairseq_cli.train as fairseq_train
    from fairseq.trainer import Trainer

    def cpu_time(self):
        return time.process_time() - self._cpu_start + self._previous_training_time

    init = Trainer.__init__

    def patched_init(self, *a, **k):
        init(self, *a, **k)
        self._cpu_start = time.process_time()

    load = Trainer.load_checkpoint

    def patched_load(self, *a, **k):
        out = load(self, *a, **k)
        self._cpu_start = time.process_time()
        return out

    Trainer.__init__, Trainer.load_checkpoint, Trainer._local_cumulative_training_time = patched_init, patched_load, cpu_time
    validate = fairseq_train.validate

    def recording_validate(cfg, trainer, task, epoch_itr, subsets):
        losses = validate(cfg, trainer, task, epoch_itr, subsets)
        with open(os.environ["LM_CURVE"], "a") as f:  # fairseq's valid loss is in base 2
            f.write(json.dumps({"cpu_s": trainer.cumulative_training_time(), "updates": trainer.get_num_updates(),
                                "ppl": 2 ** losses[0]}) + "\n")
        return losses

    fairseq_train.validate = recording_validate
    sys.argv = ["fairseq-train", *argv]
    fairseq_train.cli_main()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_train":
        return train_worker(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", help="folder with train.txt, valid.txt, test.txt")
    p.add_argument("--work", required=True, help="working folder: data, checkpoints, logs, results (resumable)")
    p.add_argument("--budget-minutes", type=float, default=20.0, help="training CPU minutes per row (20)")
    p.add_argument("--rows", default="softmax,eva,local", help=f"comma-separated, of {', '.join(ROWS)}")
    p.add_argument("--tokens-per-sample", type=int, default=2048, help="block length (2048)")
    p.add_argument("--blocks-per-batch", type=int, default=2, help="blocks per update (2)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100, help="warm-up updates (100)")
    p.add_argument("--validate-every", type=int, default=25, help="updates between validations/checkpoints (25)")
    p.add_argument("--vocab", type=int, default=8000, help="sentencepiece vocabulary (8000)")
    p.add_argument("--train-words", type=int, default=0, help="use the first N words of train.txt (0: all)")
    p.add_argument("--valid-words", type=int, default=30000, help="words of valid.txt in valid_small (30000)")
    p.add_argument("--threads", type=int, default=1, help="threads per training (1)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rows = args.rows.split(",")
    for row in rows:
        if row not in ROWS:
            p.error(f"unknown row {row!r}: choose among {', '.join(ROWS)}")
    if args.tokens_per_sample % 128:
        p.error("--tokens-per-sample must be a multiple of the EVA window (128)")
    os.makedirs(args.work, exist_ok=True)
    bin_dir_tools = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir_tools + os.pathsep + os.environ.get("PATH", ""), "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    bin_dir = prepare(args, env)
    for row in rows:
        train(args, bin_dir, row, env)
    results = {row: evaluate(args, bin_dir, row, env) for row in rows}
    report(args, results)


if __name__ == "__main__":
    main()
