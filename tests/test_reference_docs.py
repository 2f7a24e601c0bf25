"""The docs' figures and their data: every generated block in the docs matches the summary in
reference/ it is rendered from, and the section around a block quotes none of its figures by hand
(fieldtest.testkit.docblocks, tools/render_docs.py)."""

import json
import re
import shutil
from pathlib import Path

import pytest

from fieldtest.record.reference import ReferenceFormatError, read_reference
from fieldtest.testkit.docblocks import (
    BLOCKS,
    block_names,
    doc_paths,
    fill,
    hand_quoted_figures,
    hand_quoted_tables,
    perf_verdict,
    problems,
    prose_figures,
    render,
    table_figures,
)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reference"


TABLES = sorted(name for name, block in BLOCKS.items() if not block.counts_only)


def _blocks_in_docs(root: Path) -> dict[str, Path]:
    return {name: p for p in doc_paths(root) for name in block_names(p.read_text())}


def test_docs_match_their_data():
    assert problems(ROOT) == []


def test_every_summary_is_quoted_and_every_block_has_data():
    files = {p.name for p in REFERENCE.glob("*.json")}
    used = {BLOCKS[name].reference for name in _blocks_in_docs(ROOT)}
    assert files == used, "a summary in reference/ no doc renders, or a block whose summary is missing"
    assert set(_blocks_in_docs(ROOT)) == set(BLOCKS), "a known block no doc holds"


@pytest.mark.parametrize("path", sorted(REFERENCE.glob("*.json")), ids=lambda p: p.name)
def test_summary_says_how_when_and_where(path):
    summary = read_reference(path)
    assert summary.name == path.stem
    assert (
        "benchmarks/" in summary.command and "--reference " + str(path.relative_to(ROOT)) in summary.command
    )
    assert {"python", "fieldtest"} <= set(summary.versions)
    assert summary.rows and all(r.conditions is not None or r.error for r in summary.rows)


@pytest.fixture
def copy(tmp_path):
    """The docs and the reference data (and what else a block renders from), in a tree of their own
    to spoil."""
    for path in [*doc_paths(ROOT), *(ROOT / f for block in BLOCKS.values() for f in block.reads)]:
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    shutil.copytree(REFERENCE, tmp_path / "reference")
    return tmp_path


def _first_row_figure(root: Path, name: str) -> tuple[Path, str]:
    """A doc holding block ``name`` and a figure the block quotes from its data."""
    doc = _blocks_in_docs(root)[name]
    body = render(name, root)
    row = body.splitlines()[2]  # the first row under the table's header
    figures = re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", "|".join(row.split("|")[2:]))
    return doc, next(f for f in figures if sum(c.isdigit() for c in f) >= 3)


@pytest.mark.parametrize("name", TABLES)
def test_changed_data_puts_the_block_out_of_step(copy, name):
    path = copy / "reference" / BLOCKS[name].reference
    data = json.loads(path.read_text())
    row = data["rows"][0]
    key = next(k for k, v in row.items() if isinstance(v, float))  # a figure the table shows
    row[key] = row[key] * 3 + 1
    path.write_text(json.dumps(data))
    found = problems(copy)
    assert any(f"block {name!r} differs" in line for line in found), found
    doc = _blocks_in_docs(copy)[name]
    doc.write_text(fill(doc.read_text(), copy))
    assert problems(copy) == []


@pytest.mark.parametrize("name", TABLES)
def test_a_figure_transcribed_beside_its_block_is_found(copy, name):
    doc, figure = _first_row_figure(copy, name)
    text = doc.read_text()
    end = text.index(f"<!-- end: {name} -->") + len(f"<!-- end: {name} -->")
    doc.write_text(text[:end] + f"\n\nIn this run the figure was {figure} ms.\n" + text[end:])
    assert f"quotes {figure} outside the block" in "\n".join(problems(copy))


def test_a_figure_in_code_beside_its_block_is_not_a_quote(copy):
    """A command's default in a usage line or a code span may equal a figure of the block."""
    name = "predict-against-twin"
    doc, figure = _first_row_figure(copy, name)
    text = doc.read_text()
    end = text.index(f"<!-- end: {name} -->") + len(f"<!-- end: {name} -->")
    code = f"\n\n    fieldtest predict TRACE --bound-m {figure}\n\nRun it with `--offset-s {figure}`.\n"
    doc.write_text(text[:end] + code + text[end:])
    assert problems(copy) == []
    doc.write_text(text[:end] + code + f"\nThe figure was {figure} s.\n" + text[end:])
    assert f"quotes {figure} outside the block" in "\n".join(problems(copy))


@pytest.mark.parametrize("name", TABLES)
def test_a_table_copied_out_of_its_block_is_found(copy, name):
    doc = _blocks_in_docs(copy)[name]
    text = doc.read_text()
    table = "\n".join(render(name, copy).splitlines()[:3])
    start = text.index(f"<!-- generated: {name} -->")
    doc.write_text(text[:start] + table + "\n\n" + text[start:])
    assert "repeats the block's table outside it" in "\n".join(problems(copy))


def test_the_standards_name_beside_a_block_that_names_it_is_not_a_quote(copy):
    doc = _blocks_in_docs(copy)["wireless-findings"]
    text = doc.read_text()
    assert "802.11" in render("wireless-findings", copy)
    end = text.index("<!-- end: wireless-findings -->") + len("<!-- end: wireless-findings -->")
    doc.write_text(text[:end] + "\n\nOn the 802.11 link, and on 802.11n.\n" + text[end:])
    assert problems(copy) == []


def test_a_changed_verdict_puts_the_counts_out_of_step(copy):
    path = copy / "reference" / BLOCKS["reproduction-counts"].reference
    data = json.loads(path.read_text())
    row = next(r for r in data["rows"] if not r["verdict"])
    row["reproduced"] = not row["reproduced"]
    path.write_text(json.dumps(data))
    found = problems(copy)
    assert any("block 'reproduction-counts' differs" in line for line in found), found


def test_unpaired_marker_and_unknown_block_are_named(copy):
    doc = next(iter(_blocks_in_docs(copy).values()))
    doc.write_text(
        doc.read_text()
        + "\n<!-- generated: no-such-table -->\n| a |\n<!-- end: no-such-table -->\n<!-- end: x -->\n"
    )
    found = "\n".join(problems(copy))
    assert "unknown generated block 'no-such-table'" in found
    assert "markers do not pair up" in found


def test_a_summary_off_its_schema_names_the_field(copy):
    path = copy / "reference" / BLOCKS[sorted(BLOCKS)[0]].reference
    data = json.loads(path.read_text())
    del data["rows"][0]["conditions"]
    path.write_text(json.dumps(data))
    with pytest.raises(ReferenceFormatError, match=r"rows\.0\.conditions: Field required"):
        read_reference(path)


# --- tables quoted by hand (fieldtest.testkit.docblocks.hand_quoted_tables) --------------------------

_MEASURED = "| case | p50 ms |\n|---|---|\n| dds | 0.42 |\n"


def test_no_table_outside_a_block_quotes_figures_by_hand():
    assert hand_quoted_tables(ROOT) == []


def test_a_measured_table_pasted_into_a_doc_is_found(copy):
    doc = copy / "docs" / "analysis.md"
    lines = doc.read_text().splitlines(keepends=True)
    doc.write_text("".join(lines[:3]) + "\nMeasured here:\n\n" + _MEASURED + "\n" + "".join(lines[3:]))
    assert hand_quoted_tables(copy) == [
        "docs/analysis.md:7: a table quotes figures by hand (0.42, ...): render it from reference/ in a "
        "generated block, or mark a table of inputs <!-- not measured: why -->"
    ]


@pytest.mark.parametrize(
    "marker, found",
    [
        ("<!-- not measured: the profile's configured values -->", False),
        ("<!-- not measured: -->", True),  # a reason is required
        ("<!-- not measured: the configured values -->\n\nSome text.", True),  # right above the table only
    ],
)
def test_a_table_of_inputs_says_so_right_above_it(copy, marker, found):
    doc = copy / "README.md"
    doc.write_text(doc.read_text() + f"\n{marker}\n\n{_MEASURED}")
    assert bool(hand_quoted_tables(copy)) is found


def test_figures_in_code_and_the_standards_name_are_not_figures():
    assert table_figures("| profile | `loss: 0.05` | 802.11n, 802.11a | 1.5 ms |") == ["1.5"]
    assert table_figures("| 0.5 s | 12 | 3 |") == []  # the first cell names the row


# --- figures quoted by hand in prose and code blocks (hand_quoted_figures) ------------------------------

_CONSOLE = "```\nmiddleware  p50     p99\ndds         0.181   0.305\n```\n"


def test_no_paragraph_outside_a_block_quotes_figures_by_hand():
    assert hand_quoted_figures(ROOT) == []


@pytest.mark.parametrize(
    "pasted, figure",
    [
        ("On this machine the DDS median was 0.181 ms.\n", "0.181"),  # a sentence
        ("- a list item: measured 0.04-1.1 mm\n", "0.04"),
        (_CONSOLE, "0.181"),  # a console excerpt
    ],
)
def test_a_measured_figure_pasted_into_a_doc_is_found(copy, pasted, figure):
    doc = copy / "docs" / "lab-guide.md"
    lines = doc.read_text().splitlines(keepends=True)
    doc.write_text("".join(lines[:3]) + "\n" + pasted + "\n" + "".join(lines[3:]))
    (found,) = hand_quoted_figures(copy)
    assert found.startswith(f"docs/lab-guide.md:5: quotes figures by hand ({figure}, "), found


@pytest.mark.parametrize(
    "marker, found",
    [
        ("<!-- not measured: the seed's figures -->\n", False),
        ("<!-- not measured: the seed's figures -->\n\n", False),  # right above, a blank line between
        ("<!-- not measured: -->\n", True),  # a reason is required
        ("<!-- not measured: the seed's figures -->\n\nOther text.\n\n", True),  # that paragraph only
    ],
)
def test_a_paragraph_of_inputs_says_so_right_above_it(copy, marker, found):
    doc = copy / "README.md"
    doc.write_text(doc.read_text() + f"\n{marker}Zhang et al. measured 14.8 ms.\n")
    assert bool(hand_quoted_figures(copy)) is found


def test_versions_options_code_and_the_plan_are_not_prose_figures():
    text = (
        "Ubuntu 24.04 (or 22.04) with Python 3.12, ns-3 3.37, Fast DDS\n2.14, Rust 1.89 on 802.11a; "
        "`--bound 0.05` and fieldtest predict --bound-m 0.05 -i 0.25; the plan's 0.33 m/s on 0.99 m sides"
    )
    assert prose_figures(text) == []
    assert prose_figures("measured 0.181 ms\n| row | 0.42 |") == ["0.181"]  # a table row: the table check


def test_the_perf_verdict_says_by_how_much_each_missed_size_misses():
    from fieldtest.record.reference import PerfOverheadRow

    def row(tool: str, message: str, size_b: int, native: float, perf: float) -> PerfOverheadRow:
        return PerfOverheadRow(
            tool=tool, message=message, size_b=size_b, native_rtt_mean_ms=native, native_rtt_p50_ms=native,
            perf_rtt_mean_ms=perf, perf_rtt_p50_ms=perf, throughput_ratio=1.0, stages_ms={}, conditions=None,
        )  # fmt: skip

    rows = [
        row("dds", "Array1k", 1024, 0.20, 0.34),  # 1.70x against 1.5x
        row("fastdds", "Array64k", 65536, 0.50, 0.75),  # 1.5x: met
        row("dds", "Array2m", 2 * 1024 * 1024, 7.0, 15.4),  # 2.2x against 2x
    ]
    assert perf_verdict(rows) == (
        "Target met at 1 of 3 sizes; missed at dds Array1k (1.70x against 1.5x, 13 % over), "
        "dds Array2m (2.20x against 2x, 10 % over)."
    )


def test_every_lab_step_marker_in_the_guide_marks_a_bash_block():
    """A marker the steps' parser misses drops that step from the two-machine tests unnoticed."""
    from fieldtest.testkit.guide import MARKER, guide_steps

    guide = ROOT / "docs" / "lab-guide.md"
    assert set(guide_steps(guide)) == set(MARKER.findall(guide.read_text()))


@pytest.mark.parametrize(
    ("between", "parsed"),
    [("", True), ("<!-- not measured: commands -->\n", True), ("Then:\n", False)],
)
def test_a_lab_step_parses_through_comment_lines_and_no_further(tmp_path, between, parsed):
    from fieldtest.testkit.guide import GuideError, guide_steps

    guide = tmp_path / "guide.md"
    guide.write_text(f"<!-- lab-step: ping -->\n{between}```bash\nping -c 1 192.168.1.20\n```\n")
    if parsed:
        assert guide_steps(guide) == {"ping": "ping -c 1 192.168.1.20\n"}
    else:
        with pytest.raises(GuideError, match="'ping' is not followed by"):
            guide_steps(guide)
