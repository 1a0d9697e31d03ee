"""After a resume from a checkpoint saved within an epoch (--save-interval-updates), fairseq's logs go on
counting `wall` (fairseq itself logs wall=0 for the rest of the run)."""

import pytest

pytest.importorskip("fairseq")

from fairseq_helpers import USER_DIR, json_records, run, translation_data  # noqa: E402

# fairseq-train whose trainer takes 1.5 s more to start: `wall` (whole seconds since the trainer began) is
# then at least 2 at every update, on a fast machine too
SLOW_START_TRAIN = """import sys, time
from fairseq_cli.train import cli_main  # (first: it sets up fairseq's log format)
from fairseq import trainer
init = trainer.Trainer.__init__
def slow_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    time.sleep(1.5)
trainer.Trainer.__init__ = slow_init
sys.argv[0] = "fairseq-train"
cli_main()
"""


@pytest.mark.slow
def test_wall_goes_on_after_a_resume_within_an_epoch(tmp_path, tmp_path_factory):
    data = translation_data(tmp_path_factory)["bin"]
    save = tmp_path / "checkpoints"

    def train(updates):
        proc = run("python", "-c", SLOW_START_TRAIN, data, "--user-dir", USER_DIR, "--arch", "transformer_eva_tiny",
                   "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "256", "--max-update", updates,
                   "--save-interval-updates", "2", "--log-format", "json", "--log-interval", "1", "--save-dir", save)
        return [(int(r["num_updates"]), float(r["wall"])) for r in json_records(proc.log, "train_inner")]

    first = train(2)
    resumed = train(4)  # updates 3 and 4 of the same epoch (hundreds of batches of 256 tokens in it)
    assert [n for n, _ in first] == [1, 2] and [n for n, _ in resumed] == [3, 4]
    assert all(wall >= 2 for _, wall in first + resumed), (first, resumed)
