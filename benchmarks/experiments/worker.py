"""The harnesses' trainer: fairseq-train or fairseq-hydra-train that appends, at each validation, one line to the
JSON lines file named by $EXPERIMENT_CURVE: {updates, cpu_s, loss, nll_loss, ppl} (the losses in base 2 as fairseq
logs them, nll_loss where the criterion has one; ppl is 2 ** nll_loss, or 2 ** loss without it; cpu_s is the
training time that fairseq counts, validation included).

  python -m benchmarks.experiments.worker fairseq-train ARGUMENTS...
  python -m benchmarks.experiments.worker fairseq-hydra-train ARGUMENTS...

On the CPU (--cpu, common.cpu=true) the training time, and the --stop-time-hours that fairseq stops at, count this
process's CPU time, fair to runs on a loaded machine; on a GPU they stay fairseq's wall-clock time, since a GPU
process's CPU time measures its launches and waits rather than its work. Both are rows of the plugin's patch table
(`fairseq_eva.fairseq_fixes.install(extra=...)`), inside the fixes' own.
"""

import functools
import json
import os
import sys
import time

CURVE = "EXPERIMENT_CURVE"  # the environment variable that names the curve file
TOOLS = ("fairseq-train", "fairseq-hydra-train")


def command(tool, arguments):
    """The worker's command line: this interpreter, the worker, the fairseq tool and its arguments."""
    return [sys.executable, "-m", "benchmarks.experiments.worker", tool, *arguments]


def tool_words(cmd):
    """The fairseq tool and its arguments of a worker's command line (what a run's command.txt records)."""
    return cmd[3:]


def recording_valid_stats(get_valid_stats):
    """fairseq_cli.train.get_valid_stats, which also appends the validation's point to the curve."""

    @functools.wraps(get_valid_stats)
    def wrapper(cfg, trainer, *rest):
        stats = get_valid_stats(cfg, trainer, *rest)
        point = {"updates": trainer.get_num_updates(), "cpu_s": trainer.cumulative_training_time(),
                 "loss": float(stats["loss"])}
        if "nll_loss" in stats:
            point["nll_loss"] = float(stats["nll_loss"])
        point["ppl"] = 2 ** point.get("nll_loss", point["loss"])
        with open(os.environ[CURVE], "a") as f:
            f.write(json.dumps(point) + "\n")
        return stats

    return wrapper


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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in TOOLS or CURVE not in os.environ:
        sys.exit(f"usage: {CURVE}=CURVE.jsonl python -m benchmarks.experiments.worker {{{','.join(TOOLS)}}} "
                 "ARGUMENTS...")
    tool, arguments = argv[0], argv[1:]
    import fairseq_cli.train  # first: it sets up fairseq's log format

    from fairseq_eva import fairseq_fixes  # imported once fairseq is, it installs the plugin

    clock = cpu_clock(fairseq_fixes.Wrap) if "--cpu" in arguments or "common.cpu=true" in arguments else ()
    fairseq_fixes.install(extra=[*clock, fairseq_fixes.Wrap("fairseq_cli.train.get_valid_stats",
                                                            recording_valid_stats, "curve")])
    sys.argv = [tool, *arguments]
    if tool == "fairseq-hydra-train":
        from fairseq_cli import hydra_train

        hydra_train.cli_main()
    else:
        fairseq_cli.train.cli_main()


if __name__ == "__main__":
    main()
