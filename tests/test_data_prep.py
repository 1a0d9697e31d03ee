"""data_prep/: resumable verified downloads (against a local HTTP server), and every preparation run
offline on slices of the bundled sample or on small archives laid out like the official ones."""

import hashlib
import http.server
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample")
SAMPLE_DIR = Path(SAMPLE)
sys.path.insert(0, os.path.join(ROOT, "data_prep"))
import fetch  # noqa: E402

BIN = os.path.dirname(sys.executable)
ENV = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHON": sys.executable, "WORKERS": "1",
       "OMP_NUM_THREADS": "1"}


def run(cmd, env=None, ok=True):
    r = subprocess.run(cmd, cwd=ROOT, env={**ENV, **(env or {})}, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise AssertionError(f"{cmd} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def head(src, dst, n):
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        for i, line in enumerate(f):
            if i >= n:
                break
            g.write(line)


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# ---------------------------------------------------------------- downloads


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves FILES (name -> bytes), honouring "Range: bytes=N-"; CUT truncates the first answer."""

    FILES = {}
    CUT = {}
    requests = []

    def do_GET(self):  # noqa: N802
        name = self.path.lstrip("/")
        type(self).requests.append((name, self.headers.get("Range")))
        if name not in self.FILES:
            self.send_error(404)
            return
        data = self.FILES[name]
        start = 0
        rng = self.headers.get("Range")
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                self.send_error(416)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = self.CUT.pop(name, None)
        self.wfile.write(body[:cut] if cut is not None else body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    RangeHandler.FILES, RangeHandler.CUT, RangeHandler.requests = {}, {}, []
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def make_tgz(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in members.items():
            data = text if isinstance(text, bytes) else text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_fetch_verifies_and_resumes(server, tmp_path):
    blob = make_tgz({"a.txt": os.urandom(100000).hex()})  # incompressible: the archive is > 100 KB
    RangeHandler.FILES["corpus.tgz"] = blob
    RangeHandler.CUT["corpus.tgz"] = 50000  # the connection drops after 50 KB
    sha = hashlib.sha256(blob).hexdigest()
    with pytest.raises(fetch.FetchError, match="run again to resume"):
        fetch.fetch(f"{server}/corpus.tgz", str(tmp_path), sha, quiet=True)
    assert os.path.getsize(tmp_path / "corpus.tgz.part") == 50000 and not (tmp_path / "corpus.tgz").exists()
    # the second run resumes with a Range request and completes
    path = fetch.fetch(f"{server}/corpus.tgz", str(tmp_path), sha, quiet=True)
    assert RangeHandler.requests[-1] == ("corpus.tgz", "bytes=50000-")
    assert open(path, "rb").read() == blob and not (tmp_path / "corpus.tgz.part").exists()
    # a third run finds it verified and does not download
    n = len(RangeHandler.requests)
    fetch.fetch(f"{server}/corpus.tgz", str(tmp_path), sha, quiet=True)
    assert len(RangeHandler.requests) == n


def test_fetch_rejects_bad_checksum_and_corrupt_archive(server, tmp_path):
    RangeHandler.FILES["a.tgz"] = make_tgz({"a.txt": "hello"})
    with pytest.raises(fetch.FetchError, match="does not match"):
        fetch.fetch(f"{server}/a.tgz", str(tmp_path), "0" * 64, quiet=True)
    assert not (tmp_path / "a.tgz").exists()
    good = make_tgz({"a.txt": os.urandom(100000).hex()})
    RangeHandler.FILES["b.tgz"] = good[: len(good) // 2]  # a server that sends a truncated archive
    with pytest.raises(fetch.FetchError, match="corrupt or truncated"):
        fetch.fetch(f"{server}/b.tgz", str(tmp_path), quiet=True)
    assert not (tmp_path / "b.tgz").exists()


def test_fetch_without_network_says_so(tmp_path):
    r = run([sys.executable, "data_prep/fetch.py", "--out", str(tmp_path), "--timeout", "5",
             "http://127.0.0.1:9/corpus.tgz"], ok=False)
    assert r.returncode == 1
    assert "cannot reach http://127.0.0.1:9/corpus.tgz" in r.stderr
    assert "no network? pass --local DIR with the files instead" in r.stderr


# ---------------------------------------------------------------- Moses


def test_moses_tokenize_detokenize():
    text = "Das ist \u201eein Test\u201c: 3-D-Grafik, z.B. f\u00fcr 10 % (heute).\n"
    r = subprocess.run([sys.executable, "data_prep/moses.py", "tokenize", "-l", "de"], cwd=ROOT, input=text,
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == 'Das ist " ein Test " : 3-D-Grafik , z.B. für 10 % ( heute ) .'
    a = subprocess.run([sys.executable, "data_prep/moses.py", "tokenize", "-l", "de", "-a"], cwd=ROOT, input=text,
                       capture_output=True, text=True, check=True)
    assert "3 @-@ D @-@ Grafik" in a.stdout
    d = subprocess.run([sys.executable, "data_prep/moses.py", "detokenize", "-l", "de"], cwd=ROOT, input=r.stdout,
                       capture_output=True, text=True, check=True)
    assert d.stdout.strip() == 'Das ist "ein Test": 3-D-Grafik, z.B. für 10% (heute).'


# ---------------------------------------------------------------- WMT14 En-De


def check_wmt_output(dest, n_valid, n_test, raw_test_de):
    from fairseq.data import Dictionary, data_utils

    assert lines(f"{dest}/dict.en.txt") == lines(f"{dest}/dict.de.txt")  # joined dictionary
    d = Dictionary.load(f"{dest}/dict.en.txt")
    for split, n in (("valid", n_valid), ("test", n_test)):
        for lang in ("en", "de"):
            ds = data_utils.load_indexed_dataset(f"{dest}/{split}.en-de.{lang}", d)
            assert len(ds) == n
    assert lines(f"{dest}/raw.test.de") == raw_test_de
    assert os.path.getsize(f"{dest}/bpecodes") > 0


def test_prepare_wmt14_raw(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 1500), ("valid", 60), ("test", 50)):
        for lang in ("en", "de"):
            head(f"{SAMPLE}/po_en_de/{split}.{lang}", raw / f"{split}.{lang}", n)
    work, dest = tmp_path / "work", tmp_path / "bin"
    r = run(["bash", "data_prep/prepare_wmt14_en_de.sh", "--raw", str(raw)],
            {"WORK": str(work), "DEST": str(dest), "BPE_TOKENS": "300"})
    assert "[5/5] fairseq-preprocess" in r.stdout
    check_wmt_output(dest, 60, 50, lines(raw / "test.de"))
    bpe = open(work / "bpe" / "train.en", encoding="utf-8").read()
    assert "@@ " in bpe  # subword units
    kept = lines(work / "bpe" / "train.clean.en")
    assert 0 < len(kept) <= 1500 and len(kept) == len(lines(work / "bpe" / "train.clean.de"))
    for en, de in zip(kept, lines(work / "bpe" / "train.clean.de")):
        n, m = len(en.split()), len(de.split())
        assert 1 <= n <= 250 and 1 <= m <= 250 and n <= 1.5 * m and m <= 1.5 * n


@pytest.mark.slow
def test_prepare_wmt14_local_archives(tmp_path):
    """The official archives' layout (corpora, newstest2013, the SGML newstest2014), made small."""
    en, de = lines(f"{SAMPLE}/po_en_de/train.en")[:900], lines(f"{SAMPLE}/po_en_de/train.de")[:900]
    txt = lambda xs: "".join(x + "\n" for x in xs)  # noqa: E731
    test_en, test_de = lines(f"{SAMPLE}/po_en_de/test.en")[:20], lines(f"{SAMPLE}/po_en_de/test.de")[:20]
    sgm = lambda xs: "<srcset>\n<doc>\n" + "".join(f'<seg id="{i + 1}">{x}</seg>\n' for i, x in enumerate(xs)) + "</doc>\n"  # noqa: E731
    local = tmp_path / "archives"
    local.mkdir()
    archives = {
        "training-parallel-europarl-v7.tgz": {"training/europarl-v7.de-en.en": txt(en[:300]),
                                              "training/europarl-v7.de-en.de": txt(de[:300])},
        "training-parallel-commoncrawl.tgz": {"commoncrawl.de-en.en": txt(en[300:600]),
                                              "commoncrawl.de-en.de": txt(de[300:600])},
        "training-parallel-nc-v9.tgz": {"training/news-commentary-v9.de-en.en": txt(en[600:]),
                                        "training/news-commentary-v9.de-en.de": txt(de[600:])},
        "dev.tgz": {"dev/newstest2013.en": txt(lines(f"{SAMPLE}/po_en_de/valid.en")[:30]),
                    "dev/newstest2013.de": txt(lines(f"{SAMPLE}/po_en_de/valid.de")[:30])},
        "test-full.tgz": {"test-full/newstest2014-deen-src.en.sgm": sgm(test_en),
                          "test-full/newstest2014-deen-ref.de.sgm": sgm(test_de)},
    }
    for name, members in archives.items():
        (local / name).write_bytes(make_tgz(members))
    work, dest = tmp_path / "work", tmp_path / "bin"
    run(["bash", "data_prep/prepare_wmt14_en_de.sh", "--local", str(local)],
        {"WORK": str(work), "DEST": str(dest), "BPE_TOKENS": "200"})
    assert lines(work / "raw" / "train.en") == en  # the three corpora, in order
    check_wmt_output(dest, 30, 20, [x.strip() for x in test_de])
    # a missing archive is named
    os.remove(local / "dev.tgz")
    r = run(["bash", "data_prep/prepare_wmt14_en_de.sh", "--local", str(local)],
            {"WORK": str(work), "DEST": str(dest)}, ok=False)
    assert r.returncode != 0 and f"missing input file {local}/dev.tgz" in r.stderr


def test_prepare_scripts_help_and_errors(tmp_path):
    r = run(["bash", "data_prep/common.sh", "--help"])  # sourced by the scripts: run alone, it says so
    assert r.stdout.startswith("usage:") and "sourced" in r.stdout
    for script in ("prepare_wmt14_en_de.sh", "prepare_wikitext103.sh", "prepare_mlm.sh"):
        r = run(["bash", f"data_prep/{script}", "--help"])
        assert r.stdout.startswith("usage:") and "--raw DIR" in r.stdout
        r = run(["bash", f"data_prep/{script}", "--bogus"], ok=False)
        assert r.returncode != 0 and "unknown argument --bogus" in r.stderr
        r = run(["bash", f"data_prep/{script}", "--raw", str(tmp_path / "nothing")],
                {"WORK": str(tmp_path / "w"), "DEST": str(tmp_path / "b")}, ok=False)
        assert r.returncode != 0 and "missing input file" in r.stderr
    # a destination that is not fairseq-preprocess output is left alone
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("keep me")
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        head(f"{SAMPLE}/doc_en/{split}.txt", raw / f"{split}.txt", 40)
    r = run(["bash", "data_prep/prepare_wikitext103.sh", "--raw", str(raw)],
            {"WORK": str(tmp_path / "w"), "DEST": str(tmp_path / "precious")}, ok=False)
    assert "is not a fairseq-preprocess output folder" in r.stderr
    assert (tmp_path / "precious" / "thesis.tex").read_text() == "keep me"


RAW_FILES = {"prepare_wmt14_en_de.sh": [f"{s}.{lang}" for s in ("train", "valid", "test") for lang in ("en", "de")],
             "prepare_wikitext103.sh": [f"{s}.txt" for s in ("train", "valid", "test")],
             "prepare_mlm.sh": ["train.txt", "valid.txt"]}


@pytest.mark.parametrize("script", sorted(RAW_FILES))
@pytest.mark.parametrize("text, says", [("\n  \n\n", "holds only blank lines"), ("", "is empty (0 bytes)")])
def test_prepare_scripts_refuse_empty_training_text(script, text, says, tmp_path):
    """Blank or empty training text stops each script with one line naming the file, before it creates
    anything (subword-nmt's traceback, a silent exit 1 and a 4-word dictionary were the alternatives)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in RAW_FILES[script]:
        folder = "po_en_de" if script == "prepare_wmt14_en_de.sh" else "doc_en"
        head(f"{SAMPLE}/{folder}/{name}", raw / name, 30)
    train = [name for name in RAW_FILES[script] if name.startswith("train.")]
    for name in train:
        (raw / name).write_text(text)
    work, dest = tmp_path / "work", tmp_path / "bin"
    r = run(["bash", f"data_prep/{script}", "--raw", str(raw)], {"WORK": str(work), "DEST": str(dest)}, ok=False)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"error: input file {raw / train[0]} {says}"]
    assert not work.exists() and not dest.exists()



@pytest.mark.parametrize("script", sorted(RAW_FILES))
def test_prepare_scripts_refuse_text_that_is_not_utf8(script, tmp_path):
    """A Latin-1 line stops each script with one line naming the file and the line, before it creates anything
    (it used to go through as U+FFFD or odd pieces, with exit 0)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    folder = "po_en_de" if script == "prepare_wmt14_en_de.sh" else "doc_en"
    for name in RAW_FILES[script]:
        head(f"{SAMPLE}/{folder}/{name}", raw / name, 30)
    bad = raw / RAW_FILES[script][-1]  # the last file checked: the earlier ones pass
    with open(bad, "ab") as f:
        f.write("Caf\u00e9 au lait\n".encode("latin-1"))
    work, dest = tmp_path / "work", tmp_path / "bin"
    r = run(["bash", f"data_prep/{script}", "--raw", str(raw)], {"WORK": str(work), "DEST": str(dest)}, ok=False)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"error: {bad} line 31 is not UTF-8 (byte 0xe9 at byte 4 of the line): convert it "
                                     "to UTF-8 (e.g. iconv -f latin1 -t utf-8 for Latin-1 text) or fix that line"]
    assert not work.exists() and not dest.exists()


@pytest.mark.parametrize("cmd", [["moses.py", "tokenize", "-l", "en"], ["moses.py", "tokenize", "-l", "en", "-j", "2"],
                                 ["mlm_text.py", "encode", "--gpt2", "GPT2"]])
def test_text_tools_refuse_stdin_that_is_not_utf8(cmd, tmp_path):
    """Run by themselves, the tools that read standard input stop on the first line that is not UTF-8."""
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    (tmp_path / "encoder.json").write_text(json.dumps({c: i for i, c in enumerate(bytes_to_unicode().values())}))
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\n")
    cmd = [str(tmp_path) if c == "GPT2" else c for c in cmd]
    (tmp_path / "in.txt").write_bytes(b"fine\nCaf\xe9\n")
    # a pipe, and for moses.py a file too (read twice: checked, then processed; the other tools share the code)
    for piped in (True, False) if cmd[0] == "moses.py" else (True,):
        with open(tmp_path / "in.txt", "rb") as f:
            r = subprocess.run([sys.executable, f"data_prep/{cmd[0]}", *cmd[1:]], cwd=ROOT, capture_output=True,
                               timeout=60, **({"input": f.read()} if piped else {"stdin": f}))
        assert r.returncode == 1 and "Traceback" not in r.stderr.decode()
        assert r.stderr.decode().splitlines()[-1] == (
            "error: standard input line 2 is not UTF-8 (byte 0xe9 at byte 4 of the line): convert it to UTF-8 "
            "(e.g. iconv -f latin1 -t utf-8 for Latin-1 text) or fix that line")
        assert r.stdout == b""  # not even the line before it


def test_utf8_check_finds_the_line_across_blocks(tmp_path, monkeypatch):
    """Lines are counted across the blocks the file is read in, and a character cut by a block end is not an error."""
    import utf8_check

    monkeypatch.setattr(utf8_check, "BLOCK", 7)
    path = tmp_path / "t.txt"
    path.write_bytes("na\u00efve caf\u00e9\n\u00fcber\n\nok\n".encode() + b"x \xff\n")
    with pytest.raises(utf8_check.NotUtf8, match=r"t\.txt line 5 is not UTF-8 \(byte 0xff at byte 3 of the line\)"):
        utf8_check.check_file(path)
    path.write_bytes("na\u00efve caf\u00e9\n\u00fcber".encode())  # no newline at the end
    utf8_check.check_file(path)



@pytest.mark.parametrize("mistake", ["mismatched pairs", "corrupt archive", "Latin-1 in an archive"])
def test_a_failed_wmt14_prep_leaves_nothing_new(mistake, tmp_path):
    """What the run made (the work folders, the folders above them) goes when it fails; what was there stays."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            head(f"{SAMPLE}/po_en_de/{split}.{lang}", raw / f"{split}.{lang}", 29 if (split, lang) == ("valid", "de") else 30)
    if mistake == "mismatched pairs":
        args, says = ["--raw", str(raw)], "error: valid.en has 30 lines but valid.de has 29"
    elif mistake == "corrupt archive":
        (tmp_path / "archives").mkdir()
        for url in ("training-parallel-europarl-v7", "training-parallel-commoncrawl", "training-parallel-nc-v9",
                    "dev", "test-full"):
            (tmp_path / "archives" / f"{url}.tgz").write_bytes(b"not a tar archive")
        args, says = ["--local", str(tmp_path / "archives")], "cannot extract"
    else:  # the message names the corpus in the archive, not the text made from all three
        (tmp_path / "archives").mkdir()
        ok = "".join(f"line {i}\n" for i in range(5))
        archives = {"training-parallel-europarl-v7": ["training/europarl-v7.de-en"],
                    "training-parallel-commoncrawl": ["commoncrawl.de-en"],
                    "training-parallel-nc-v9": ["training/news-commentary-v9.de-en"], "dev": ["dev/newstest2013"]}
        for name, corpora in archives.items():
            members = {f"{c}.{lang}": ok for c in corpora for lang in ("en", "de")}
            if name == "training-parallel-commoncrawl":
                members["commoncrawl.de-en.en"] = ok.encode() + b"Caf\xe9\n"
            (tmp_path / "archives" / f"{name}.tgz").write_bytes(make_tgz(members))
        (tmp_path / "archives" / "test-full.tgz").write_bytes(make_tgz({"test-full/x.sgm": "<seg id=\"1\">x</seg>\n"}))
        args = ["--local", str(tmp_path / "archives")]
        says = f"{tmp_path}/new/work/extracted/commoncrawl.de-en.en line 6 is not UTF-8"
    work, dest = tmp_path / "new" / "work", tmp_path / "new" / "bin"
    r = run(["bash", "data_prep/prepare_wmt14_en_de.sh", *args], {"WORK": str(work), "DEST": str(dest)}, ok=False)
    assert r.returncode != 0 and says in r.stderr
    assert not (tmp_path / "new").exists()
    # a work folder that was there keeps what it held (downloads above all); what the run made goes
    (work / "orig").mkdir(parents=True)
    (work / "orig" / "dev.tgz").write_bytes(b"a download")
    r = run(["bash", "data_prep/prepare_wmt14_en_de.sh", *args], {"WORK": str(work), "DEST": str(dest)}, ok=False)
    assert r.returncode != 0 and says in r.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "new").rglob("*")) == \
        ["new/work", "new/work/orig", "new/work/orig/dev.tgz"]



@pytest.mark.parametrize("script, args, env, says", [
    ("prepare_mlm.sh", ["--raw", "RAW"], {"BPE": "bogus"}, "BPE must be sentencepiece or gpt2, not bogus"),
    ("prepare_wikitext103.sh", ["--local", "LOCAL"], {}, "cannot extract")])
def test_the_other_failed_preps_leave_nothing_new(script, args, env, says, tmp_path):
    raw, local = tmp_path / "raw", tmp_path / "local"
    raw.mkdir()
    local.mkdir()
    for split in ("train", "valid", "test"):
        head(f"{SAMPLE}/doc_en/{split}.txt", raw / f"{split}.txt", 30)
    (local / "wikitext-103-v1.zip").write_bytes(b"not a zip archive")
    args = [{"RAW": str(raw), "LOCAL": str(local)}.get(a, a) for a in args]
    work, dest = tmp_path / "new" / "work", tmp_path / "new" / "bin"
    r = run(["bash", f"data_prep/{script}", *args], {"WORK": str(work), "DEST": str(dest), **env}, ok=False)
    assert r.returncode != 0 and says in r.stderr
    assert not (tmp_path / "new").exists()



@pytest.mark.parametrize("script, env, says", [
    ("prepare_wmt14_en_de.sh", {"BPE_TOKENS": "abc"}, "BPE_TOKENS=abc must be a whole number of at least 1 "
     "(joint BPE merges, 32000 by default)"),
    ("prepare_wmt14_en_de.sh", {"RATIO": "1,5"}, "RATIO=1,5 must be a number above 0 (the largest length ratio "
     "of a training pair; 1.5 by default)"),
    ("prepare_wmt14_en_de.sh", {"AGGRESSIVE": "yes"}, "AGGRESSIVE=yes must be 0 or 1"),
    ("prepare_wikitext103.sh", {"THRESHOLD": "-1"}, "THRESHOLD=-1 must be a whole number of at least 0 (the count "
     "below which a word becomes <unk>; 0 by default)"),
    ("prepare_mlm.sh", {"WORKERS": "0"}, "WORKERS=0 must be a whole number of at least 1 (processes; the number of "
     "cores by default)"),
    ("prepare_mlm.sh", {"BLOCKS": "2048,4096"}, 'BLOCKS="2048,4096" must be block lengths in tokens, whole numbers '
     '(e.g. BLOCKS="2048 4096")')])
def test_a_bad_number_in_the_environment_stops_before_anything_is_made(script, env, says, tmp_path):
    """A number that a later tool would refuse in its own words (subword-nmt's --symbols for BPE_TOKENS=abc, at
    step 3) or take wrongly is named at the start, before any input is read."""
    work, dest = tmp_path / "work", tmp_path / "bin"
    r = run(["bash", f"data_prep/{script}", "--raw", str(tmp_path / "raw")],
            {"WORK": str(work), "DEST": str(dest), **env}, ok=False)
    assert r.returncode == 1 and r.stderr.splitlines() == [f"error: {says}"]
    assert list(tmp_path.iterdir()) == []


def interrupt(script, args, env, when, files):
    """Run a preparation in its own process group, press Ctrl-C (SIGINT to the group, as a terminal sends it) once
    `when` is printed and each of `files` exists, and return the CompletedProcess-like result."""
    # SIGINT's default action, as under a terminal: a suite started in the background inherits it ignored, and bash
    # cannot trap a signal ignored when it starts
    proc = subprocess.Popen(["bash", f"data_prep/{script}", *args], cwd=ROOT, env={**ENV, **env}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:
            if when in line:
                break
        deadline = time.monotonic() + 60
        while not all(os.path.exists(f) and os.path.getsize(f) for f in files) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


INTERRUPTED = "interrupted during {}: what this run made is removed (downloads stay); the same command starts again"


def test_ctrl_c_during_a_preparation_removes_what_it_made(tmp_path):
    """Ctrl-C while moses.py tokenises (Wikitext-103's step 1): exit status 130, one line, no Python traceback, and
    no half-made tokens file or folder (bash ending on SIGINT showed the clean-up an exit status of 0)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        text = (SAMPLE_DIR / "doc_en" / f"{split}.txt").read_text(encoding="utf-8")
        (raw / f"{split}.txt").write_text(text * (3 if split == "train" else 1), encoding="utf-8")
    work, dest = tmp_path / "new" / "work", tmp_path / "new" / "bin"
    r = interrupt("prepare_wikitext103.sh", ["--raw", str(raw)], {"WORK": str(work), "DEST": str(dest)},
                  "==> [1/2]", [work / "tokens" / "wiki.train.tokens"])
    assert r.returncode == 130, r.stderr
    assert r.stderr.splitlines() == ["", INTERRUPTED.format(f"[1/2] Moses-tokenising the plain text in {raw}")]
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_ctrl_c_during_the_bpe_step_removes_what_it_made(tmp_path):
    """Ctrl-C while subword-nmt learns the joint BPE (WMT14's step 3): the partial code file and the vocabularies
    go with the work folders it made; the downloads folder, there before, stays."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            shutil.copy(SAMPLE_DIR / "po_en_de" / f"{split}.{lang}", raw / f"{split}.{lang}")
    work, dest = tmp_path / "work", tmp_path / "bin"
    (work / "orig").mkdir(parents=True)
    r = interrupt("prepare_wmt14_en_de.sh", ["--raw", str(raw)], {"WORK": str(work), "DEST": str(dest)},
                  "==> [3/5]", [work / "bpe" / "code"])
    assert r.returncode == 130, r.stderr
    assert r.stderr.splitlines()[-1] == INTERRUPTED.format("[3/5] joint BPE, 32000 merges (subword-nmt)")
    assert "KeyboardInterrupt" not in r.stderr  # above it: subword-nmt's progress bar
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if "raw" not in p.parts) == [
        "work", "work/orig"]

def test_make_sample_refuses_text_that_is_not_utf8(tmp_path):
    source = tmp_path / "corpora"
    for folder, names in (("po_en_de", [f"{s}.{lang}" for s in ("train", "valid", "test") for lang in ("en", "de")]),
                          ("doc_en", [f"{s}.txt" for s in ("train", "valid", "test")])):
        (source / folder).mkdir(parents=True)
        for name in names:
            (source / folder / name).write_text("fine\n")
    (source / "doc_en" / "test.txt").write_bytes(b"fine\nCaf\xe9\n")
    out = tmp_path / "sample"
    r = run([sys.executable, "data_prep/make_sample.py", "--source", str(source), "--out", str(out)], ok=False)
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"error: {source}/doc_en/test.txt line 2 is not UTF-8 (byte 0xe9 at byte 4 of the line): convert it to UTF-8 "
        "(e.g. iconv -f latin1 -t utf-8 for Latin-1 text) or fix that line"]
    assert not out.exists()
    (source / "doc_en" / "test.txt").unlink()
    r = run([sys.executable, "data_prep/make_sample.py", "--source", str(source), "--out", str(out)], ok=False)
    assert r.stderr.splitlines() == [f"error: missing input file {source}/doc_en/test.txt"] and not out.exists()


# ---------------------------------------------------------------- Wikitext-103


@pytest.mark.slow
def test_prepare_wikitext103_raw_and_local(tmp_path):
    from fairseq.data import Dictionary, data_utils

    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 600), ("valid", 50), ("test", 50)):
        head(f"{SAMPLE}/doc_en/{split}.txt", raw / f"{split}.txt", n)
    work, dest = tmp_path / "work", tmp_path / "bin"
    run(["bash", "data_prep/prepare_wikitext103.sh", "--raw", str(raw)], {"WORK": str(work), "DEST": str(dest)})
    tokens = open(work / "tokens" / "wiki.train.tokens", encoding="utf-8").read()
    assert " @-@ " in tokens  # Wikitext-style aggressive hyphen splitting
    d = Dictionary.load(f"{dest}/dict.txt")
    ds = data_utils.load_indexed_dataset(f"{dest}/valid", d)
    assert len(ds) == 50
    # --local with the official zip's layout (wikitext-103/wiki.*.tokens)
    local = tmp_path / "local"
    local.mkdir()
    with zipfile.ZipFile(local / "wikitext-103-v1.zip", "w") as z:
        for split in ("train", "valid", "test"):
            z.write(work / "tokens" / f"wiki.{split}.tokens", f"wikitext-103/wiki.{split}.tokens")
    first = lines(dest / "dict.txt")
    (dest / "valid.bin").write_bytes(b"stale")
    # into the same DEST: a re-run replaces the output (fairseq-preprocess alone would refuse an existing
    # dictionary)
    run(["bash", "data_prep/prepare_wikitext103.sh", "--local", str(local)],
        {"WORK": str(tmp_path / "work2"), "DEST": str(dest)})
    assert lines(dest / "dict.txt") == first
    assert len(data_utils.load_indexed_dataset(f"{dest}/valid", d)) == 50


# ---------------------------------------------------------------- MLM


def test_prepare_mlm_sentencepiece(tmp_path):
    from fairseq.data import Dictionary, data_utils

    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 800), ("valid", 80)):
        head(f"{SAMPLE}/doc_en/{split}.txt", raw / f"{split}.txt", n)
    work, dest = tmp_path / "work", tmp_path / "bin"
    r = run(["bash", "data_prep/prepare_mlm.sh", "--raw", str(raw)],
            {"WORK": str(work), "DEST": str(dest), "VOCAB_SIZE": "300", "BLOCKS": "128 256"})
    assert "tokens_per_sample 128:" in r.stdout and "tokens_per_sample 256:" in r.stdout
    assert (dest / "spm.model").exists()
    encoded = lines(work / "valid.bpe")
    assert len(encoded) == 80 and "\u2581" in encoded[0]
    # blank lines (document boundaries) stay blank
    assert [i for i, x in enumerate(lines(raw / "valid.txt")) if not x.strip()] == \
           [i for i, x in enumerate(encoded) if not x]
    d = Dictionary.load(f"{dest}/dict.txt")
    assert len(data_utils.load_indexed_dataset(f"{dest}/valid", d)) == 80


@pytest.mark.slow
def test_prepare_mlm_gpt2(tmp_path):
    """RoBERTa's GPT-2 BPE path, with a tiny byte-level vocabulary in place of the real one."""
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode

    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    chars = list(bytes_to_unicode().values())
    encoder = {c: i for i, c in enumerate(chars)}
    encoder["th"] = len(encoder)
    (gpt2 / "encoder.json").write_text(json.dumps(encoder))
    (gpt2 / "vocab.bpe").write_text("#version: 0.2\nt h\n")
    (gpt2 / "dict.txt").write_text("".join(f"{i} 1\n" for i in range(len(encoder))))
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.txt").write_text("the thing\n\nother text\n")
    (raw / "valid.txt").write_text("this\n")
    work, dest = tmp_path / "work", tmp_path / "bin"
    run(["bash", "data_prep/prepare_mlm.sh", "--raw", str(raw)],
        {"WORK": str(work), "DEST": str(dest), "BPE": "gpt2", "GPT2_DIR": str(gpt2), "BLOCKS": "8"})
    th, e, space = encoder["th"], encoder["e"], encoder["\u0120"]
    assert lines(work / "valid.bpe") == [f"{th} {encoder['i']} {encoder['s']}"]
    assert lines(work / "train.bpe")[0].split()[:3] == [str(th), str(e), str(space)]
    assert lines(work / "train.bpe")[1] == ""
