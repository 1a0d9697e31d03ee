"""The fairseq parts: the paper's configs trained by fairseq-hydra-train on the bundled sample (words/s), and the
clean-exit check of fairseq-train; both on the sample binarised once."""

import os
import re
import subprocess
import sys
import time

from benchmarks import common
from benchmarks.gpu_check.plan import OUT_OF_TIME, REPO, SAMPLE, number

# (config, data, EVA's softmax twin); the language models' adaptive input and softmax cutoffs are set for
# the sample's 8000 words
PAPER_CONFIGS = [("wikitext103_eva_16l", "lm", "wikitext103_softmax_16l"), ("wmt14_en_de_eva16", "mt", "wmt14_en_de_softmax"),
                 ("mlm_eva_4096", "lm", "mlm_softmax_4096")]


def fairseq_env():
    return {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONWARNINGS": "ignore"}


def run_tool(code, args, log, timeout):
    """Runs fairseq code with this Python (the same fairseq and torch), its output into `log`; returns
    (return code or None on a timeout, the output)."""
    with open(log, "w") as f:
        try:
            returncode = subprocess.run([sys.executable, "-c", code, *map(str, args)], stdout=f, stderr=subprocess.STDOUT,
                                        env=fairseq_env(), timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            returncode = None
    with open(log) as f:
        return returncode, f.read()


def cli(module, prog):
    return f"import sys; from fairseq_cli.{module} import cli_main; sys.argv[0] = '{prog}'; sys.exit(cli_main())"


def prepare_data(work):
    """The bundled sample binarised by fairseq-preprocess (8000 words) into WORK/data, once: mt (en-de, a joined
    dictionary) and lm."""
    mt, lm = os.path.join(work, "data", "mt-bin"), os.path.join(work, "data", "lm-bin")
    jobs = [(mt, "dict.en.txt", ["--source-lang", "en", "--target-lang", "de", "--trainpref", f"{SAMPLE}/po_en_de/train",
                                 "--validpref", f"{SAMPLE}/po_en_de/valid", "--joined-dictionary"]),
            (lm, "dict.txt", ["--only-source", "--trainpref", f"{SAMPLE}/doc_en/train.txt", "--validpref",
                              f"{SAMPLE}/doc_en/valid.txt"])]
    for dest, marker, args in jobs:
        if os.path.exists(os.path.join(dest, marker)):
            continue
        log = os.path.join(work, "logs", f"preprocess_{os.path.basename(dest)}.log")
        code, text = run_tool(cli("preprocess", "fairseq-preprocess"), [*args, "--destdir", dest, "--nwordssrc", "8000",
                                                                        "--workers", "4"], log, 600)
        if code != 0:
            raise RuntimeError(f"fairseq-preprocess failed ({code}):\n{text[-3000:]}")
    return {"mt": mt, "lm": lm}


def train_row(name, returncode, text, seconds, timeout):
    """What a fairseq training log shows: losses, words/s (median of wps after the first logged interval)."""
    records = common.fairseq_json_records(text, "train_inner")
    losses = [r["loss"] for r in records]
    wps = [r["wps"] for r in records[1:]]
    nan = float("nan")
    return dict(run=name, returncode=returncode, timed_out=returncode is None, seconds=seconds,
                done="done training" in text, aborted="terminate called" in text, intervals=len(records),
                first_loss=losses[0] if losses else nan, last_loss=losses[-1] if losses else nan,
                words_per_second=sorted(wps)[len(wps) // 2] if wps else nan, wps=wps,
                error=None if returncode == 0 else (f"timed out after {timeout:.0f} s" if returncode is None else text[-2000:]))


def hydra_overrides(config, data, save, s):
    """The config as users run it, on the sample: few updates, no checkpoints, no validation, the data
    loaded in the training process, update_freq 1 (words/s is per token; the configs' update_freq is for
    their 8-GPU batch); --smoke: on the CPU, tiny models and short sequences."""
    over = [f"task.data={data}", f"common.user_dir={REPO}/fairseq_eva", f"checkpoint.save_dir={save}",
            f"optimization.max_update={s['updates']}", f"common.log_interval={s['log_interval']}", "checkpoint.no_save=true",
            "dataset.disable_validation=true", "dataset.num_workers=0", "optimization.update_freq=[1]", *s["hydra"]]
    if config.startswith("wikitext103"):
        over += ["+model.adaptive_input_cutoff='2000,5000'", "+model.adaptive_softmax_cutoff='2000,5000'"]
    if s["device"] == "cpu":
        if config.startswith("wmt14"):
            over += ["+model.encoder_layers=1", "+model.decoder_layers=1", "+model.encoder_embed_dim=32",
                     "+model.decoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64", "+model.decoder_ffn_embed_dim=64",
                     "+model.encoder_attention_heads=2", "+model.decoder_attention_heads=2"]
        elif config.startswith("wikitext103"):
            over += ["+model.decoder_layers=1", "+model.decoder_embed_dim=32", "+model.decoder_input_dim=32",
                     "+model.decoder_output_dim=32", "+model.decoder_ffn_embed_dim=64", "+model.decoder_attention_heads=2",
                     "dataset.max_tokens=1024"]
        else:
            over += ["+model.encoder_layers=1", "+model.encoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64",
                     "+model.encoder_attention_heads=2", "task.tokens_per_sample=512", "model.max_positions=512",
                     "dataset.batch_size=2"]
    return over


def paper_configs(s, data, work, deadline, emit, configs=None):
    rows = []
    for config in [name for eva, _, softmax in PAPER_CONFIGS for name in (eva, softmax) if name in (configs or [name])]:
        kind = next(k for eva, k, softmax in PAPER_CONFIGS if config in (eva, softmax))
        left = deadline - time.monotonic()
        if left < 15:
            rows.append(dict(run=config, error=OUT_OF_TIME))
            emit(rows)
            continue
        save = os.path.join(work, "runs", config)
        timeout = min(s["run_timeout"], left)
        start = time.monotonic()
        args = ["--config-dir", os.path.join(REPO, "configs"), "--config-name", config,
                *hydra_overrides(config, data[kind], save, s)]
        log = os.path.join(work, "logs", config + ".log")
        code, text = run_tool(cli("hydra_train", "fairseq-hydra-train"), args, log, timeout)
        rows.append(train_row(config, code, text, time.monotonic() - start, timeout))
        emit(rows)
    return rows


# the control of the clean-exit check: fairseq-train with the atexit hook of fairseq_eva/fairseq_fixes/clean_exit.py removed (the
# plugin imported after fairseq_cli.train, which sets up the logging, and before cli_main, which would register it)
WITHOUT_FIX = ("import atexit, sys; from fairseq_cli.train import cli_main; from fairseq_eva.fairseq_fixes import clean_exit; "
               "atexit.unregister(clean_exit.stop_background_loaders); sys.argv[0] = 'fairseq-train'; sys.exit(cli_main())")


def clean_exit_check(s, data, work, deadline, emit):
    """The tiny EVA translation model, fairseq-train, as the check ran it when it aborted at exit: 200 updates
    of 33-batch epochs end 2 batches into the 7th, with fairseq's prefetching thread busy."""
    args = [data["mt"], "--arch", "transformer_eva_tiny", "--max-tokens", "4096", "--share-all-embeddings",
            "--user-dir", os.path.join(REPO, "fairseq_eva"), *s["train"], "--optimizer", "adam", "--lr", "5e-4",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "50", "--max-update", s["exit_updates"], "--no-save",
            "--log-format", "json", "--log-interval", max(1, s["exit_updates"] // 20), "--seed", "1", "--disable-validation",
            "--num-workers", "0"]
    rows = []
    for name, code in (("translation, EVA encoder", cli("train", "fairseq-train")),
                       ("the same, clean_exit switched off (control)", WITHOUT_FIX)):
        left = deadline - time.monotonic()
        if left < 15:
            rows.append(dict(run=name, error=OUT_OF_TIME))
            emit(rows)
            continue
        start = time.monotonic()
        log = os.path.join(work, "logs", re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + ".log")
        returncode, text = run_tool(code, args, log, min(s["run_timeout"], left))
        rows.append(train_row(name, returncode, text, time.monotonic() - start, min(s["run_timeout"], left)))
        emit(rows)
    return rows



def run_paper_configs(check, deadline):
    emit = check.table("paper_configs")
    paper_configs(check.settings, check.data(), check.work, deadline, emit, configs=check.args.configs)
    return "ok"


def run_clean_exit(check, deadline):
    emit = check.table("clean_exit")
    clean_exit_check(check.settings, check.data(), check.work, deadline, emit)
    return "ok"


def run_summary(result, key, title):
    """A fairseq part's section of gpu_check.md."""
    lines = []
    part = result.get(key)
    if not part:
        return lines
    lines += [f"## {title}", "", "| run | exit code | done training | aborted | updates logged | first loss | last loss | "
              "words/s | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for r in part["rows"]:
        if "returncode" not in r:
            lines.append(f"| {r['run']} | {r['error']} | | | | | | | |")
            continue
        code = "timed out" if r["timed_out"] else r["returncode"]
        lines.append(f"| {r['run']} | {code} | {'yes' if r['done'] else 'no'} | {'yes' if r['aborted'] else 'no'} | "
                     f"{r['intervals']} | {number(r['first_loss'], '.2f')} | {number(r['last_loss'], '.2f')} | "
                     f"{number(r['words_per_second'], '.0f')} | {r['seconds']:.0f} |")
    lines.append("")
    return lines


def paper_configs_summary(result):
    return run_summary(result, "paper_configs", "fairseq-hydra-train, the paper's configs on the sample")


def clean_exit_summary(result):
    return run_summary(result, "clean_exit", "Clean exit: fairseq-train of the tiny EVA translation model")
