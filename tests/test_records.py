"""docs/results.md and the records under benchmarks/results/ stay in step: every record the page cites exists,
every record is described and dated, and the figures can be drawn again from the records."""

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
PAGE = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
INDEX = (RESULTS / "README.md").read_text(encoding="utf-8")
SECTIONS = ["Is it exact?", "How fast, and how much memory, on a CPU?", "How fast on a GPU?",
            "How close to softmax attention?", "Does it learn like softmax, and better than local attention?",
            "Does EVA beat the paper's baselines?",
            "Decoding", "Training throughput", "On a shared CPU", "The paper's configs", "What did not help"]


def record_folders():
    """Folders directly under benchmarks/results/ and benchmarks/results/gpu/ (gpu/ itself only groups)."""
    top = [p for p in RESULTS.iterdir() if p.is_dir() and p.name != "gpu"]
    return sorted(top + [p for p in (RESULTS / "gpu").iterdir() if p.is_dir()])


def test_the_page_has_its_sections_in_order():
    assert re.findall(r"^## (.+)$", PAGE, flags=re.M) == SECTIONS


def test_every_cited_record_exists():
    cited = set(re.findall(r"benchmarks/results/[\w./-]*\w/?", PAGE))
    assert len(cited) > 10
    missing = [path for path in sorted(cited) if not (REPO / path).exists()]
    assert not missing


def test_every_section_cites_a_record():
    for section in re.split(r"^## ", PAGE, flags=re.M)[1:]:
        assert "benchmarks/results/" in section, section.splitlines()[0]


def test_every_record_is_indexed_and_has_its_metadata():
    folders = record_folders()
    assert len(folders) > 10
    for folder in folders:
        name = folder.relative_to(RESULTS).as_posix()
        assert f"`{name}/`" in INDEX, name
        meta = json.loads((folder / "meta.json").read_text())
        assert set(meta) >= {"command", "commit", "date", "device"}, name
        assert all(isinstance(meta[k], str) and meta[k] for k in ("command", "commit", "date", "device")), name


def test_every_top_level_record_is_indexed():
    for path in RESULTS.glob("*.json"):
        assert f"`{path.name}`" in INDEX, path.name


def test_every_image_the_page_shows_exists_and_is_drawn_by_the_figure_command():
    from benchmarks import figures

    shown = re.findall(r"!\[[^\]]*\]\(img/([^)]+)\)", PAGE)
    assert shown
    assert sorted(shown) == sorted(filename for _, filename in figures.FIGURES.values())
    for name in shown:
        assert (REPO / "docs" / "img" / name).is_file(), name


@pytest.mark.parametrize("name", ["recall", "causal_lm"])
def test_a_figure_is_drawn_from_the_records(tmp_path, name):
    from benchmarks import figures

    (path,) = figures.main(["--out", str(tmp_path), "--only", name])
    assert Path(path).stat().st_size > 10_000
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_the_tables_drawn_from_records_are_as_the_records_say(page):
    """Every block marked `<!-- results: NAME -->` equals what benchmarks/results_tables.py renders from its record
    (`make results` writes them again)."""
    from benchmarks import results_tables

    text = (REPO / page).read_text(encoding="utf-8")
    assert results_tables.render_page(text) == text, f"{page}: run make results"


def index_rows():
    """(record, current, sections named) of every row of benchmarks/results/README.md's table."""
    rows = []
    for line in INDEX.splitlines():
        m = re.match(r"\| `([^`]+)` \| .* \| ([^|]+) \| ([^|]+) \|$", line)
        if m:
            rows.append((m[1], m[2].strip(), [s for s in SECTIONS if s in m[3]]))
    return rows


def page_sections():
    return {part.splitlines()[0]: part for part in re.split(r"^## ", PAGE, flags=re.M)[1:]}


def test_a_current_record_is_cited_where_the_index_says_and_called_superseded_nowhere():
    rows, sections = index_rows(), page_sections()
    assert len(rows) > 20
    pages = {name: (REPO / name).read_text(encoding="utf-8") for name in ("README.md", "docs/results.md")}
    for record, current, named in rows:
        assert named, record
        if not current.startswith("yes"):
            continue
        path = f"benchmarks/results/{record}"
        for section in named:
            assert path in sections[section], (record, section)
        for name, text in pages.items():
            for paragraph in re.split(r"\n\s*\n", text):
                if path in paragraph:
                    assert not re.search(r"supersede|no longer current|out of date", paragraph, re.I), (record, name)


def test_gpu_records_measured_older_code_and_every_figure_of_theirs_names_its_commit():
    """The GPU records measured code that has changed since: none is marked current, and every block on the
    pages that shows a GPU figure names the commit of the record it comes from."""
    from benchmarks import results_tables

    current = {record: c for record, c, _ in index_rows()}
    for folder in (RESULTS / "gpu").iterdir():
        if folder.is_dir():
            assert not current[f"gpu/{folder.name}/"].startswith("yes"), folder.name
    sources = {"gpu-correctness": ["correctness_all_kernels", "correctness_triton"],
               "gpu-speed-tokens": ["triton_check"], "gpu-paper-configs": ["triton_check"],
               "gpu-profile": ["profile_after_seed_fix"],
               "gpu-paper-configs-readme": ["triton_check"],
               **{f"gpu-measured-{r}": [r] for r in results_tables.GPU_RECORDS}}
    shown = 0
    for page in ("README.md", "docs/results.md"):
        for _, name, body, _ in results_tables.BLOCK.findall((REPO / page).read_text(encoding="utf-8")):
            if name.startswith("gpu-"):
                shown += 1
                for record in sources[name]:
                    commit = json.loads((RESULTS / "gpu" / record / "meta.json").read_text())["commit"].split()[0]
                    assert f"commit {commit}" in body, (page, name, record)
    assert shown >= 8


# Tables that may stand outside a generated block: their first header cell, and why no number in them is measured.
UNMEASURED_TABLES = {
    # README's troubleshooting: error messages and what to do; its digits are parts of the messages and settings
    # ("got 5", "CRC-32", "0 bytes", "OMP_NUM_THREADS=1"), none a measurement
    "you see",
}


def tables_outside_blocks(text):
    """(first header cell, rows) of every Markdown table outside the generated blocks and code fences."""
    from benchmarks import results_tables

    text = results_tables.BLOCK.sub("", text)
    tables, rows, fence = [], [], False
    for line in text.splitlines() + [""]:
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("|"):
            rows.append(line)
        elif rows:
            tables.append((rows[0].strip("|").split("|")[0].strip(), rows))
            rows = []
    return tables


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_every_table_with_a_number_is_rendered_from_a_record(page):
    """A Markdown table with a digit in it stands only inside a `<!-- results: NAME -->` block, which
    benchmarks/results_tables.py renders from its record, or is one of the few without a measured number."""
    for head, rows in tables_outside_blocks((REPO / page).read_text(encoding="utf-8")):
        if head in UNMEASURED_TABLES:
            continue
        assert not re.search(r"\d", "\n".join(rows)), f"{page}: the table '{head}' is not rendered from a record"
