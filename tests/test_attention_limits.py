"""What a shape or an option can break is refused in one line before memory is spent, through fairseq-train:
Linformer's positions against the model's and the task's longest input (translation at fairseq's default
--max-source-positions too), a count whose parameters or whose memory at a batch exceed the machine's (with the
estimate, no crash.pt), an option of a mechanism that no self-attention uses, bf16 without a GPU (--bf16, and
fairseq-hydra-train's common.bf16=true); and what fits
trains (Linformer at the positions it was given, then fairseq-generate on its checkpoint; Reformer with a chunk
longer than the sentences). All jobs run in one process."""

import re

import pytest

pytest.importorskip("fairseq")

from fairseq_helpers import REPO, USER_DIR, last_line, lm_data, run_jobs, translation_data  # noqa: E402

COMMON = ("--user-dir", USER_DIR, "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--max-update", 2,
          "--no-epoch-checkpoints")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    mt, lm = translation_data(tmp_path_factory)["bin"], lm_data(tmp_path_factory)["bin"]
    save = tmp_path_factory.mktemp("attention_limits")
    mt_train = ("train", mt, *COMMON, "--arch", "transformer_eva_tiny", "--max-tokens", 1024)
    lm_train = ("train", lm, *COMMON, "--task", "language_modeling", "--arch", "transformer_lm_eva_tiny",
                "--tokens-per-sample", 64, "--max-tokens", 512)
    linformer = ("--encoder-attention", "linformer", "--linformer-projected-dim", 8)
    jobs = {
        "linformer_default_positions": (*mt_train, *linformer, "--linformer-max-positions", 64, "--save-dir",
                                        save / "refused"),
        "linformer": (*mt_train, *linformer, "--linformer-max-positions", 64, "--max-source-positions", 64,
                      "--skip-invalid-size-inputs-valid-test", "--save-dir", save / "linformer"),
        "linformer_generate": ("generate", mt, "--user-dir", USER_DIR, "--cpu", "--path",
                               save / "linformer" / "checkpoint_last.pt", "--gen-subset", "test", "--beam", 2,
                               "--max-len-b", 5, "--batch-size", 8, "--skip-invalid-size-inputs-valid-test"),
        "reformer_long_chunk": (*mt_train, "--encoder-attention", "reformer", "--reformer-chunk-size", 1000,
                                "--save-dir", save / "reformer"),
        "lara_memory": (*mt_train, "--encoder-attention", "lara", "--lara-num-landmarks", 10**11, "--save-dir",
                        save / "refused"),
        "t2r_parameters": (*lm_train, "--decoder-attention", "t2r", "--t2r-num-features", 10**10, "--save-dir",
                           save / "refused"),
        "performer_option_with_lara": (*mt_train, "--encoder-attention", "lara", "--performer-num-features", 64,
                                       "--save-dir", save / "refused"),
        "eva_option_with_a_baseline": (*lm_train, "--decoder-attention", "elu", "--eva-window-size", 5,
                                       "--eva-kernel", "blockwise", "--save-dir", save / "refused"),
        "chunks_with_local": (*mt_train, "--encoder-attention", "local", "--eva-num-chunks", 8, "--save-dir",
                              save / "refused"),
        "bf16": (*lm_train, "--bf16", "--save-dir", save / "refused"),
        "reformer_buckets": (*mt_train, "--encoder-attention", "reformer", "--reformer-num-buckets", 200000,
                             "--save-dir", save / "refused"),
        "eva_beyond_the_sentences": (*mt_train, "--eva-num-chunks", 20000, "--eva-window-size", 100000, "--save-dir",
                                     save / "eva_long"),
        "bf16_hydra": ("hydra_train", "--config-dir", REPO / "tests" / "fixtures" / "hydra", "--config-name",
                       "tiny_lm_eva", f"task.data={lm}", f"common.user_dir={USER_DIR}",
                       f"checkpoint.save_dir={save / 'refused'}", f"hydra.run.dir={save / 'refused'}",
                       "common.bf16=true"),
    }
    return {"save": save, **run_jobs(jobs, cwd=save)}


def test_linformer_positions_are_checked_against_the_models_and_the_tasks_longest_input(runs):
    assert last_line(runs["linformer_default_positions"]) == (
        "fairseq-train: error: --linformer-max-positions (64) must be at least the model's longest input (1024 "
        "positions): linformer attention has a column of its length projections a position; give "
        "--linformer-max-positions 1024 or more, or --max-source-positions 64 or less (then fairseq-train skips the "
        "sentence pairs longer than that, and its validation and fairseq-generate stop at the first one unless given "
        "--skip-invalid-size-inputs-valid-test, which skips them too)")
    for job in ("linformer", "linformer_generate"):
        assert runs[job][0] == 0, runs[job][1][-3000:]
    assert len(re.findall(r"^H-\d+\t", runs["linformer_generate"][1], re.M)) > 0


def test_a_chunk_longer_than_the_sentences_trains(runs):
    status, log = runs["reformer_long_chunk"]
    assert status == 0, log[-3000:]


def test_counts_beyond_the_machines_memory_are_refused_with_the_estimate(runs):
    line = last_line(runs["lara_memory"])
    assert re.fullmatch(r"fairseq-train: error: --lara-num-landmarks 100000000000 needs at least [\d,.]+ GiB for one "
                        r"lara layer on a batch of \d+ x \d+ tokens, more than this machine's [\d,.]+ GiB: give a "
                        r"smaller --lara-num-landmarks \(or fewer tokens a batch\)", line), line
    line = last_line(runs["t2r_parameters"])
    assert re.fullmatch(r"fairseq-train: error: t2r attention with --t2r-num-features 10000000000 needs [\d,.]+ GiB for "
                        r"the parameters of its 2 layers alone, more than this machine's [\d,.]+ GiB", line), line


def test_a_hash_with_more_buckets_than_memory_is_refused_before_its_batch(runs):
    line = last_line(runs["reformer_buckets"])
    assert re.fullmatch(r"fairseq-train: error: --reformer-num-buckets 200000 needs at least [\d,.]+ GiB for one "
                        r"reformer layer on a batch of \d+ x \d+ tokens, more than this machine's [\d,.]+ GiB: give a "
                        r"smaller --reformer-num-buckets \(or fewer tokens a batch\)", line), line


def test_evas_chunks_and_window_beyond_the_sentences_cost_what_the_sentences_do(runs):
    """C = 20,000 chunks and a window of 100,000 over sentences of a few dozen tokens: the chunks beyond the
    sentence hold no token and the window is laid out over the sentence, so it trains as C = N would."""
    status, log = runs["eva_beyond_the_sentences"]
    assert status == 0, log[-3000:]


def test_an_option_that_no_self_attention_uses_is_refused(runs):
    assert last_line(runs["performer_option_with_lara"]) == (
        "fairseq-train: error: --performer-num-features 64: no self-attention of this model uses it (--encoder-attention "
        "lara, --decoder-attention softmax): leave it out, or choose the mechanism it configures")
    assert last_line(runs["eva_option_with_a_baseline"]) == (
        "fairseq-train: error: --eva-window-size 5, --eva-kernel blockwise: no self-attention of this model uses them "
        "(--decoder-attention elu): leave them out, or choose the mechanism they configure")
    assert last_line(runs["chunks_with_local"]) == (
        "fairseq-train: error: --eva-num-chunks 8: no self-attention of this model uses it (--encoder-attention local, "
        "--decoder-attention softmax): leave it out, or choose the mechanism it configures")


def test_bf16_without_a_gpu_is_one_line(runs):
    assert last_line(runs["bf16"]) == "fairseq-train: error: bf16 needs a CUDA GPU and torch sees none: on a CPU leave out --bf16"
    status, output = runs["bf16_hydra"]  # the same rule, in hydra's words (its message without a traceback)
    assert status != 0 and "Traceback" not in output
    assert "bf16 needs a CUDA GPU and torch sees none: on a CPU give common.bf16=false" in output.splitlines()


def test_refusals_leave_nothing_behind(runs):
    assert not (runs["save"] / "refused").exists()
    assert not list(runs["save"].rglob("crash.pt"))
