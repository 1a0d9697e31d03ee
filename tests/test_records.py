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


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_every_generated_block_names_the_commit_and_date_it_measured(page):
    from benchmarks.pages import core

    for _, name, body, _ in core.BLOCK.findall((REPO / page).read_text(encoding="utf-8")):
        assert re.search(r"commit", body) and re.search(r"\d{4}-\d\d-\d\d", body), (page, name)


def test_gpu_records_measured_older_code_and_every_figure_of_theirs_names_its_commit():
    """The GPU records measured code that has changed since: none is marked current, and every block on the
    pages that shows a GPU figure names the commit of the record it comes from."""
    from benchmarks.pages import core, gpu

    current = {record: c for record, c, _ in index_rows()}
    for folder in (RESULTS / "gpu").iterdir():
        if folder.is_dir():
            assert not current[f"gpu/{folder.name}/"].startswith("yes"), folder.name
    sources = {"gpu-correctness": ["correctness_all_kernels", "correctness_triton"],
               "gpu-speed-tokens": ["triton_check"], "gpu-paper-configs": ["triton_check"],
               "gpu-profile": ["profile_after_seed_fix"],
               "gpu-paper-configs-readme": ["triton_check"], "gpu-readme-speed": ["triton_check"],
               "gpu-readme-exact": ["correctness_all_kernels"],
               **{f"gpu-measured-{r}": [r] for r in gpu.GPU_RECORDS}}
    shown = 0
    for page in ("README.md", "docs/results.md"):
        for _, name, body, _ in core.BLOCK.findall((REPO / page).read_text(encoding="utf-8")):
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


def lines_outside_blocks(text):
    """The lines of a page without its generated blocks, and with each line of a code fence left empty."""
    from benchmarks.pages import core

    lines, fence = [], False
    for line in core.BLOCK.sub("", text).splitlines():
        if line.startswith("```"):
            fence = not fence
        lines.append("" if fence or line.startswith("```") else line)
    return lines


def tables_outside_blocks(text):
    """(first header cell, rows) of every Markdown table outside the generated blocks and code fences."""
    tables, rows = [], []
    for line in lines_outside_blocks(text) + [""]:
        if line.startswith("|"):
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


# A measured number in prose: a decimal, or a number followed by x or % (ratios, shares; not '256 x 256') or by a
# unit of time or size (minutes, MiB, GB); 8.2e-7 is one number.
MEASURED = re.compile(r"(?<![\w.])(\d[\d,]*\.\d+(?:e-?\d+)?|\d[\d,]*(?=\s?(?:x\b(?! \d)|%|(?:CPU )?minutes?\b|"
                      r"[KMG]i?B\b)))(?![\d.]*\d)")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?")
# Numbers in prose that are not measurements: versions, the settings a command was given and time budgets.
NOT_MEASURED = re.compile(r"(?:torch|fairseq|Python|Triton|MKL|oneDNN|driver|penalty|dropout|CUDA|budget of(?: about)?) $")


def numbers(text):
    """The numbers of a text, as printed (commas dropped)."""
    return {m.group().replace(",", "") for m in NUMBER.finditer(text)}


def record_numbers(path):
    """The numbers of a record's files but its curves (a curve's many points would match almost any number)."""
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file() and f.name != "curve.jsonl"]
    return set().union(*(numbers(f.read_text(encoding="utf-8", errors="replace")) for f in files))


def anchor(heading):
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections(text):
    """{anchor: text} of each section of a page, headed by a line starting with '#' outside a code fence (where
    '#' starts a shell comment)."""
    parts, fence = [[]], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        if line.startswith("#") and not fence and parts[-1]:
            parts.append([])
        parts[-1].append(line)
    return {anchor(part[0].lstrip("#")): "\n".join(part) for part in parts}


def traceable_numbers(section, linked, with_links=True):
    """(the numbers of the generated blocks, those of the records) that a section's prose may quote: its own and
    those of the sections of `linked` ({anchor: text}, results.md's) that it links to."""
    from benchmarks.pages import core

    blocks = set().union(*(numbers(body) for _, _, body, _ in core.BLOCK.findall(section)))
    if not with_links:
        return blocks, set()
    records = set().union(*(record_numbers(REPO / p) for p in re.findall(r"benchmarks/results/[\w./-]*[\w/]", section)
                            if (REPO / p).exists()))
    for target in re.findall(r"\((?:docs/results\.md)?#([\w-]+)\)", section):
        if target in linked:
            more = traceable_numbers(linked.pop(target), linked)
            blocks, records = blocks | more[0], records | more[1]
    return blocks, records


def rounded(printed, values):
    """Some of `values` printed to `printed`'s precision gives `printed`."""
    mantissa, _, exponent = printed.partition("e")
    places = len(mantissa.partition(".")[2])
    if exponent:
        return any(f"{float(v):.{places}e}" == f"{float(printed):.{places}e}" for v in values)
    return any(f"{float(v):.{places}f}" == f"{float(printed):.{places}f}" for v in values)


def untraced_numbers(text, results, own_blocks_only=False):
    """(number, context) of each measured number in a page's prose (text) that is not, at its printed precision,
    one of the numbers of a generated block of its section, of a record that its section cites or of a section of
    results.md (results) that it links to; with own_blocks_only, of its section's generated blocks alone."""
    untraced = []
    for section in sections(text).values():
        blocks, records = traceable_numbers(section, sections(results), with_links=not own_blocks_only)
        for line in lines_outside_blocks(section):
            if line.startswith(("|", "    ")):
                continue  # tables (their own test) and indented commands
            line = re.sub(r"`[^`]*`", "", line)  # inline code: commands and settings
            for m in MEASURED.finditer(line):
                if not NOT_MEASURED.search(line[:m.start()]) and not rounded(m.group().replace(",", ""), blocks | records):
                    untraced.append((m.group(), line[max(0, m.start() - 50):m.end() + 20]))
    return untraced




@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_every_measured_number_in_prose_traces_to_a_record(page):
    """A ratio, share or decimal in the text around the tables is one of the numbers of a generated block or of a
    record that its section cites (at the precision it is printed): none is typed from memory. The README's
    summaries link to most of results.md, so they quote their own generated blocks only."""
    text = (REPO / page).read_text(encoding="utf-8")
    assert untraced_numbers(text, PAGE, own_blocks_only=page == "README.md") == []


def test_a_number_typed_from_memory_is_found():
    results = PAGE.replace("causal EVA is 3.7x causal SDPA", "causal EVA is 41.3x causal SDPA")
    assert [n for n, _ in untraced_numbers(results, PAGE)] == ["41.3"]
    results = PAGE.replace("causal EVA is 3.7x causal SDPA", "causal EVA is 3.7x causal SDPA in 977 MiB")
    assert [n for n, _ in untraced_numbers(results, PAGE)] == ["977"]
    claim = "EVA is 7.7x faster than SDPA ([more](docs/results.md#how-fast-and-how-much-memory-on-a-cpu)).\n"
    readme = (REPO / "README.md").read_text(encoding="utf-8").replace("\n## Results\n", "\n## Results\n\n" + claim)
    assert [n for n, _ in untraced_numbers(readme, PAGE, own_blocks_only=True)] == ["7.7"]


# A sentence that orders rows: a row's name, then in the same clause a word that orders ("EVA is below local").
ROW_NAMES = r"\b(?:EVA|softmax|exact|local|Performer|LARA|RFA|ELU|T2R|Combiner|Linformer|Reformer|Transformer-LS)\b"
ORDERING_WORDS = (r"\b(?:ahead|behind|beats?|lowest|highest|last|first|closer|closest|above|below|leads?|better|worse|"
                  r"best|worst|lower|higher)\b")
ORDERING = re.compile(ROW_NAMES + r"[^.;:]*?" + ORDERING_WORDS, re.I)
# What a hand-written sentence may say of an ordering: that the rows are within the spread, or that a row of one
# seed (no spread) is ordered by nothing; every other ordering is rendered from the records by the rule.
NOT_ORDERED = re.compile(r"within [\w' ]*spread|no spread|the rule orders (?:neither|none|nothing|\w+ against no row)|"
                         r"against no row", re.I)


def hand_written_orderings(text):
    """The sentences of a page's prose (outside the generated blocks, code, tables, headings and links' text;
    questions aside) that order rows and do not say they are within the spread."""
    lines = [line for line in lines_outside_blocks(text) if not line.startswith(("|", "    ", "#"))]
    prose = re.sub(r"`[^`]*`", "", "\n".join(lines))
    prose = re.sub(r"\[[^\]]*\]\([^)]*\)", "", prose).replace("**", "")
    found = []
    for paragraph in re.split(r"\n\s*\n", prose):
        for sentence in re.split(r"(?<=[.?!])\s+|\n- ", paragraph.replace("\n", " ")):
            if not sentence.strip().endswith("?") and ORDERING.search(sentence) and not NOT_ORDERED.search(sentence):
                found.append(sentence.strip())
    return found


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_every_ordering_of_rows_is_rendered_by_the_rule(page):
    """A sentence that orders rows ("ahead", "below", "lowest", "last", "closer", ...) stands only inside a
    `<!-- results: NAME -->` block, where benchmarks/results_tables.py renders it from the records by the rule
    of the tables (scripts/paper_table.py's beyond_spread: every seed of one row better than every seed of the
    other, never a row of one seed), or says that the rows are within the spread."""
    assert hand_written_orderings((REPO / page).read_text(encoding="utf-8")) == []


def test_a_hand_written_ordering_is_found():
    typed = {"Softmax is last here.": True, "EVA has the lowest validation perplexity at equal updates.": True,
             "On test local attention is ahead of it.": True, "EVA and local are within the spread.": False,
             "Both translate; one seed each has no spread to order them by.": False,
             "Does EVA beat the paper's baselines?": False}
    for sentence, ordering in typed.items():
        page = PAGE.replace("\n## Decoding\n", f"\n## Decoding\n\n{sentence}\n")
        assert (sentence in hand_written_orderings(page)) == ordering, sentence
    page = PAGE.replace("<!-- results: learning-orderings -->", "<!-- results: learning-orderings -->\nEVA is first.")
    assert hand_written_orderings(page) == []  # inside a rendered block


def test_the_pages_order_no_row_of_one_seed():
    """The sentences rendered by the rule name a row of one seed as ordered against no row, however far off."""
    from benchmarks.pages import rule

    text = rule.rule_sentence({"a": [1.0, 1.1], "b": [2.0, 2.1], "c": [2.05, 2.2], "d": [9.0]})
    assert text == "a below b and c; b and c within the spread; d (one seed) ordered against no row"
    points = [(1, {"a": [1.0, 1.1], "b": [0.5, 0.6], "d": [3.0]}), (2, {"a": [1.0, 1.1], "b": [1.05, 1.2], "d": [3.0]}),
              (3, {"a": [1.0, 1.1], "b": [2.0, 2.1], "d": [0.1]})]
    assert rule.rule_over(points, "updates") == ("a below b from 3 updates on and b below a at 1 updates; "
                                                 "d (one seed) ordered against no row")
