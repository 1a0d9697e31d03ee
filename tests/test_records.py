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
