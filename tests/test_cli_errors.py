"""Mistakes with fairseq's command-line tools: those fairseq meets before the plugin is loaded print what
docs/troubleshooting.md says they print; those the plugin meets end with one line.

Most mistakes run as jobs of one process (`fairseq_helpers.run_jobs`): fairseq's tools called one after another,
as their console scripts call them, so that fairseq is imported once rather than per mistake."""

import re
import shutil

import pytest

pytest.importorskip("fairseq")

from fairseq_helpers import REPO, USER_DIR, last_line, lm_data, run_jobs, translation_data  # noqa: E402

DOC = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")

def documented(prefix):
    """The message of the troubleshooting row whose message starts with `prefix`."""
    match = re.search(r"^\| `(" + re.escape(prefix) + r"[^`]*)`", DOC, re.M)
    assert match, f"no row for {prefix!r} in docs/troubleshooting.md"
    return match.group(1)


HYDRA_LM = ("--config-dir", REPO / "tests" / "fixtures" / "hydra", "--config-name", "tiny_lm_eva")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny EVA language model and a tiny EVA translation model, two updates each: checkpoints as
    fairseq-train writes them, in one folder; and a language model as fairseq-hydra-train writes it (the demo's
    and the training scripts' checkpoints: its config holds no argparse.Namespace)."""
    lm, mt = lm_data(tmp_path_factory), translation_data(tmp_path_factory)
    save = tmp_path_factory.mktemp("cli_errors_models")
    common = ["--user-dir", USER_DIR, "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--criterion", "cross_entropy",
              "--max-update", 2, "--no-epoch-checkpoints"]
    results = run_jobs({
        "lm": ("train", lm["bin"], *common, "--task", "language_modeling", "--arch", "transformer_lm_eva_tiny",
               "--tokens-per-sample", 64, "--max-tokens", 512, "--save-dir", save / "lm"),
        "mt": ("train", mt["bin"], *common, "--arch", "transformer_eva_tiny", "--max-tokens", 1024,
               "--save-dir", save / "mt"),
        "hydra": ("hydra_train", *HYDRA_LM, f"task.data={lm['bin']}", f"common.user_dir={USER_DIR}",
                  f"checkpoint.save_dir={save / 'hydra'}", f"hydra.run.dir={save / 'hydra'}",
                  "optimization.max_update=2")}, cwd=save)
    assert all(status == 0 for status, _ in results.values()), results
    return {"save": save, "lm": {**lm, "ckpt": save / "lm" / "checkpoint_best.pt"},
            "mt": {**mt, "ckpt": save / "mt" / "checkpoint_best.pt"}, "hydra": save / "hydra" / "checkpoint_best.pt"}


@pytest.fixture(scope="module")
def lm(trained):
    """The language model's data and checkpoint."""
    return trained["lm"]


@pytest.fixture(scope="module")
def mistakes(trained, tmp_path_factory):
    """The mistakes that the plugin stops, each a job of one process: {name: (status, output)}; `where` is its
    working folder, where nothing may be left behind."""
    where = tmp_path_factory.mktemp("cli_mistakes")
    lm, mt = trained["lm"], trained["mt"]
    other = tmp_path_factory.mktemp("other_data") / "bin"  # the translation data with 8 more words in each dictionary
    shutil.copytree(mt["bin"], other)
    for lang in ("en", "de"):
        with open(other / f"dict.{lang}.txt", "a", encoding="utf-8") as f:
            f.writelines(f"extra{i} 1\n" for i in range(8))
    plugin = ["--user-dir", USER_DIR, "--cpu"]
    train_lm = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", 512, "--max-update", 2]
    files = tmp_path_factory.mktemp("checkpoint_files")
    damaged = files / "checkpoint_damaged.pt"
    data = bytearray(lm["ckpt"].read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4] = bytes(b ^ 0xFF for b in data[middle : middle + 4])  # every bit flipped
    damaged.write_bytes(bytes(data))
    (files / "empty.pt").write_bytes(b"")
    (files / "notes.pt").write_text("not a checkpoint\n")
    (files / "dict.en.txt").write_text("the 1234\n, 567\n")  # a Moses-tokenised dictionary's first words
    eval_lm = ("eval_lm", lm["bin"], *plugin, "--tokens-per-sample", 64, "--gen-subset", "test")
    jobs = {
        "damaged": ("generate", lm["bin"], *plugin, "--task", "language_modeling", "--path", damaged,
                    "--tokens-per-sample", 64, "--gen-subset", "test"),
        "empty_file": (*eval_lm, "--path", files / "empty.pt"),
        "not_a_checkpoint": (*eval_lm, "--path", files / "notes.pt"),
        "dictionary_as_checkpoint": ("generate", mt["bin"], *plugin, "--path", files / "dict.en.txt"),
        "context_window_negative": (*eval_lm, "--path", lm["ckpt"], "--context-window", -5),
        "max_tokens": ("generate", mt["bin"], *plugin, "--path", mt["ckpt"], "--max-tokens", 16),
        "path_missing": ("eval_lm", lm["bin"], *plugin, "--path", trained["save"] / "lm" / "checkpoint_lst.pt"),
        "path_missing_nowhere": ("interactive", mt["bin"], *plugin, "--path", where / "nowhere" / "model.pt"),
        "path_folder": ("generate", mt["bin"], *plugin, "--path", trained["save"] / "mt"),
        "data_missing_train": ("train", where / "no_data", *plugin, "--task", "language_modeling",
                               "--arch", "transformer_lm_eva_tiny", *train_lm, "--save-dir", where / "save"),
        "data_missing_eval_lm": ("eval_lm", where / "no_data", *plugin, "--path", lm["ckpt"]),
        "data_of_a_language_model": ("generate", lm["bin"], *plugin, "--path", mt["ckpt"]),
        "data_of_translation": ("eval_lm", mt["bin"], *plugin, "--path", lm["ckpt"]),
        "lm_arch_on_translation": ("train", mt["bin"], *plugin, "--arch", "transformer_lm_eva_tiny", *train_lm,
                                   "--save-dir", where / "save"),
        "mt_arch_on_lm_data": ("train", lm["bin"], *plugin, "--task", "language_modeling", "--arch",
                               "transformer_eva_tiny", "--tokens-per-sample", 64, *train_lm, "--save-dir", where / "save"),
        "eval_lm_on_translation": ("eval_lm", lm["bin"], *plugin, "--path", mt["ckpt"]),
        "generate_on_lm": ("generate", mt["bin"], *plugin, "--path", lm["ckpt"]),
        "other_dictionary": ("generate", other, *plugin, "--path", mt["ckpt"]),
        "tokens_train": ("train", lm["bin"], *plugin, "--task", "language_modeling", "--arch", "transformer_lm_eva_tiny",
                         "--tokens-per-sample", 128, "--max-target-positions", 64, *train_lm, "--save-dir", where / "save"),
        "tokens_eval_lm": ("eval_lm", lm["bin"], *plugin, "--path", lm["ckpt"], "--tokens-per-sample", 2048),
        "split_missing": ("generate", mt["bin"], *plugin, "--path", mt["ckpt"], "--gen-subset", "tset"),
        "restore_file_missing": ("train", lm["bin"], *plugin, "--task", "language_modeling", "--arch",
                                 "transformer_lm_eva_tiny", "--tokens-per-sample", 64, *train_lm, "--save-dir",
                                 where / "save", "--restore-file", trained["save"] / "lm" / "checkpoint_lst.pt"),
        "hub_folder_missing": {"code": hub(where / "no_folder", "checkpoint_best.pt", lm["bin"])},
        "hub_file_for_folder": {"code": hub(lm["ckpt"], "checkpoint_best.pt", lm["bin"])},
        "data_missing_hydra": ("hydra_train", *HYDRA_LM, f"task.data={where / 'no_data'}",
                               f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={where / 'hydra'}",
                               f"hydra.run.dir={where / 'hydra'}"),
    }
    results = run_jobs(jobs, cwd=where)
    return {"where": where, "other": other, "files": files, **results}


def hub(folder, name, data, plugin=True):
    """Python code that loads a language model through fairseq's hub interface."""
    return ("import fairseq_eva.plugin\n" if plugin else "") + (
        "from fairseq.models.transformer_lm import TransformerLanguageModel\n"
        f"TransformerLanguageModel.from_pretrained({str(folder)!r}, {name!r}, {str(data)!r})")


PREPROCESS = "give the folder that fairseq-preprocess wrote (its --destdir; a data_prep script's DEST)"


def test_a_path_that_is_missing_or_a_folder_is_one_line(mistakes, trained):
    save, where = trained["save"], mistakes["where"]
    assert last_line(mistakes["path_missing"]) == (
        f"fairseq-eval-lm: error: checkpoint {save}/lm/checkpoint_lst.pt does not exist: {save}/lm holds "
        f"{save}/lm/checkpoint_best.pt, {save}/lm/checkpoint_last.pt")
    assert last_line(mistakes["path_missing_nowhere"]) == (
        f"fairseq-interactive: error: checkpoint {where}/nowhere/model.pt does not exist: give a checkpoint file "
        "that fairseq-train saved (in its --save-dir)")
    assert last_line(mistakes["path_folder"]) == (
        f"fairseq-generate: error: checkpoint {save}/mt is a folder: give a checkpoint file in it "
        f"({save}/mt/checkpoint_best.pt, {save}/mt/checkpoint_last.pt)")


def test_a_data_folder_that_is_missing_or_of_another_task_is_one_line(mistakes, trained):
    where, lm, mt = mistakes["where"], trained["lm"], trained["mt"]
    for name, tool in (("data_missing_train", "fairseq-train"), ("data_missing_eval_lm", "fairseq-eval-lm")):
        assert last_line(mistakes[name]) == f"{tool}: error: data folder {where}/no_data does not exist: {PREPROCESS}"
    status, output = mistakes["data_missing_hydra"]
    assert status != 0 and "Traceback" not in output
    assert f"data folder {where}/no_data does not exist: {PREPROCESS}" in output.splitlines()
    assert last_line(mistakes["data_of_a_language_model"]) == (
        f"fairseq-generate: error: {lm['bin']} holds a language model's data (dict.txt, no language pair), and "
        "--task translation reads a source and a target language: for a language model add --task "
        f"language_modeling; for translation {PREPROCESS}")
    assert last_line(mistakes["data_of_translation"]) == (
        f"fairseq-eval-lm: error: {mt['bin']} holds translation data (dict.de.txt, dict.en.txt), and --task "
        "language_modeling reads one dictionary, dict.txt: give the data folder of a language model "
        "(fairseq-preprocess --only-source wrote it)")
    assert sorted(p.name for p in where.iterdir()) == []  # no save dir, no hydra run dir


def test_a_model_that_does_not_fit_its_task_or_data_is_one_line(mistakes, trained):
    """Checked as the model is built: no batch is run, no crash.pt or save dir is left."""
    lm, mt = trained["lm"], trained["mt"]
    assert last_line(mistakes["lm_arch_on_translation"]) == (
        "fairseq-train: error: --arch transformer_lm_eva_tiny is a language model, and --task translation trains "
        "translation models: give a translation --arch (e.g. transformer_eva_tiny), or --task language_modeling and "
        "its data for transformer_lm_eva_tiny")
    assert last_line(mistakes["mt_arch_on_lm_data"]) == (
        "fairseq-train: error: --arch transformer_eva_tiny is a translation model, and --task language_modeling "
        "trains language models: give a language-model --arch (e.g. transformer_lm_eva_tiny), or --task translation "
        "and its data for transformer_eva_tiny")
    assert last_line(mistakes["eval_lm_on_translation"]) == (
        f"fairseq-eval-lm: error: {mt['ckpt']} holds a translation model (transformer_eva_tiny, trained with --task "
        "translation), and the task here is language_modeling: fairseq-eval-lm scores language models only: "
        "translate with fairseq-generate")
    assert last_line(mistakes["generate_on_lm"]) == (
        f"fairseq-generate: error: {lm['ckpt']} holds a language model (transformer_lm_eva_tiny, trained with --task "
        "language_modeling), and the task here is translation: add --task language_modeling and the data folder it "
        "was trained on")
    rows = len((mt["bin"] / "dict.en.txt").read_text().splitlines()) + 4  # + fairseq's 4 special symbols
    assert last_line(mistakes["other_dictionary"]) == (
        f"fairseq-generate: error: {mt['ckpt']} was trained with another dictionary: its source embeddings have "
        f"{rows} rows, and {mistakes['other']}/dict.en.txt has {rows + 8} entries; give the data folder it was "
        f"trained on ({mt['bin']})")
    assert last_line(mistakes["tokens_train"]) == (
        "fairseq-train: error: --tokens-per-sample 128 is more than the 64 positions of the model "
        "(--max-target-positions 64): give --tokens-per-sample 64 or less, or --max-target-positions 128 or more")
    assert last_line(mistakes["tokens_eval_lm"]) == (
        "fairseq-eval-lm: error: --tokens-per-sample 2048 is more than the 64 positions of the model in "
        f"{lm['ckpt']}: give --tokens-per-sample 64 or less")
    assert not (mistakes["where"] / "save").exists()  # nor the crash.pt fairseq-train wrote into it

@pytest.fixture(scope="module")
def without_plugin(trained, tmp_path_factory):
    """What fairseq prints before any plugin is loaded, each a job of one process that never loads it: a
    --user-dir that names no folder; checkpoints of fairseq-train and of fairseq-hydra-train loaded with no
    --user-dir (or another one), by the tools and the hub; fairseq-hydra-train with a common.user_dir that
    names no folder, which leaves its run dir behind."""
    where = tmp_path_factory.mktemp("without_plugin")
    (where / "other").mkdir()  # a --user-dir that is not the plugin
    (where / "other" / "__init__.py").write_text("")
    lm, hydra = trained["lm"], trained["hydra"]
    eval_lm = ("eval_lm", lm["bin"], "--cpu", "--path", lm["ckpt"], "--tokens-per-sample", 64, "--gen-subset", "test")
    return {"where": where, **run_jobs({
        "user_dir": ("train", where, "--user-dir", "fairseq_evaa", "--task", "language_modeling"),
        "eva_checkpoint": eval_lm,
        "eva_checkpoint_other_user_dir": (*eval_lm, "--user-dir", where / "other"),
        "hydra_generate": ("generate", lm["bin"], "--task", "language_modeling", "--cpu", "--path", hydra),
        "hydra_eval_lm": ("eval_lm", lm["bin"], "--cpu", "--path", hydra),
        "hydra_interactive": ("interactive", lm["bin"], "--task", "language_modeling", "--cpu", "--path", hydra),
        "hydra_hub": {"code": hub(hydra.parent, hydra.name, lm["bin"], plugin=False)},
        "hydra_user_dir": ("hydra_train", *HYDRA_LM, f"task.data={lm['bin']}", "common.user_dir=fairseq_evaa",
                           f"checkpoint.save_dir={where / 'run'}", f"hydra.run.dir={where / 'run'}"),
    }, cwd=where)}


def test_a_mistyped_user_dir_ends_as_documented(without_plugin):
    status, output = without_plugin["user_dir"]
    assert status == 1
    line = documented("FileNotFoundError: ").replace("PATH", str(without_plugin["where"] / "fairseq_evaa"))
    assert output.strip().splitlines()[-1] == line


@pytest.mark.parametrize("job", ["eva_checkpoint", "eva_checkpoint_other_user_dir"])
def test_an_eva_checkpoint_without_the_plugin_ends_as_documented(without_plugin, job):
    status, output = without_plugin[job]
    assert status == 1
    assert documented("WeightsUnpickler error: ") in output
    assert "Perplexity" not in output


def test_without_the_plugin_a_hydra_checkpoint_and_a_mistyped_user_dir_end_as_documented(without_plugin):
    for name in ("hydra_generate", "hydra_eval_lm", "hydra_interactive", "hydra_hub"):
        status, output = without_plugin[name]
        assert status == 1 and output.strip().splitlines()[-1] == documented('KeyError: "'), (name, output[-2000:])
    status, output = without_plugin["hydra_user_dir"]
    run_dir = without_plugin["where"] / "run"
    assert status == 1
    line = documented("FileNotFoundError: ").replace("PATH", str(without_plugin["where"] / "fairseq_evaa"))
    assert line in output.splitlines()
    left = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*"))
    assert left == [".hydra", ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "hydra_train.log"]
    assert "`.hydra/` and an empty `hydra_train.log`" in DOC and (run_dir / "hydra_train.log").stat().st_size == 0


def test_fairseq_generate_on_a_damaged_checkpoint_is_one_line(mistakes):
    damaged = mistakes["files"] / "checkpoint_damaged.pt"
    line = last_line(mistakes["damaged"])
    assert line.startswith(f"fairseq-generate: error: {damaged} is damaged (Bad CRC-32"), line
    assert not re.search(r"^[SHDP]-\d", mistakes["damaged"][1], re.M)  # no hypotheses


def test_an_empty_file_or_not_a_checkpoint_is_one_line_without_a_note_on_checksums(mistakes):
    """No "carries no checksum ...: loaded unchecked" before the error: nothing was loaded."""
    files = mistakes["files"]
    assert last_line(mistakes["empty_file"]) == (
        f"fairseq-eval-lm: error: {files}/empty.pt is empty (0 bytes): a checkpoint cut off before anything was "
        "written, or no checkpoint at all")
    assert last_line(mistakes["not_a_checkpoint"]).startswith(
        f"fairseq-eval-lm: error: {files}/notes.pt is not a fairseq checkpoint (")
    for name in ("empty_file", "not_a_checkpoint"):
        assert "checksum" not in mistakes[name][1]


def test_a_dictionary_given_as_a_checkpoint_is_one_line(mistakes):
    """A text file whose first letters read as pickle opcodes (a dictionary begins with its commonest words)."""
    assert last_line(mistakes["dictionary_as_checkpoint"]) == (
        f"fairseq-generate: error: {mistakes['files']}/dict.en.txt is not a fairseq checkpoint (it is text, not a "
        "file that torch.save wrote)")


def test_a_negative_context_window_or_too_small_max_tokens_is_one_line(mistakes):
    assert last_line(mistakes["context_window_negative"]) == (
        "fairseq-eval-lm: error: --context-window -5 is negative: give 0 (no context) or a number of tokens below "
        "--tokens-per-sample 64 (e.g. 32)")
    line = last_line(mistakes["max_tokens"])
    assert re.fullmatch(r"fairseq-generate: error: a sentence of (\d+) tokens does not fit in a batch of --max-tokens "
                        r"16: a batch holds whole sentences; give --max-tokens \1 or more", line), line


def test_a_missing_split_restore_file_or_hub_folder_is_one_line(mistakes, trained):
    save, where, mt = trained["save"], mistakes["where"], trained["mt"]
    assert last_line(mistakes["split_missing"]) == (
        f"fairseq-generate: error: no split tset in {mt['bin']} (it holds test, train, valid): give one of those "
        "(--gen-subset, --valid-subset, --train-subset), or run fairseq-preprocess with that split")
    assert last_line(mistakes["restore_file_missing"]) == (
        f"fairseq-train: error: --restore-file {save}/lm/checkpoint_lst.pt does not exist (fairseq-train would start "
        f"afresh without a word): {save}/lm holds {save}/lm/checkpoint_best.pt, {save}/lm/checkpoint_last.pt")
    assert last_line(mistakes["hub_folder_missing"]) == (
        f"python: error: model folder {where}/no_folder does not exist: give the folder that holds the checkpoint "
        "(the --save-dir it was trained into), and the checkpoint's name ('checkpoint_best.pt' here)")
    assert last_line(mistakes["hub_file_for_folder"]) == (
        f"python: error: {trained['lm']['ckpt']} is a checkpoint file: from_pretrained takes its folder and its "
        f"name, from_pretrained('{save}/lm', 'checkpoint_best.pt', ...)")
