"""docs/benchmarks.md's generated blocks are what their commands print from the committed raw results.

``bench/report.py --check`` reruns every ``<!-- report: ... -->`` command (each only reads committed
JSON) and compares; a figure edited by hand inside a block fails naming its section. In the
sections listed in :data:`CHECKED_PROSE` (every section but the designs of :data:`DESIGN_ONLY`), every
number with a decimal point or a ``%`` quoted in the prose must appear in one of that section's blocks
(the warm-start and memory-model sections read the search-efficiency section's blocks), no table may
stand outside a block, and every ``##`` section has at least one block.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
# Sections whose figures are the check script's own caps and thresholds (a design, nothing measured yet).
DESIGN_ONLY = ("bench/gpu_check.sh — the CUDA paths on a real GPU",)
# Sections whose prose reads another section's blocks (the subsections of the search-efficiency one).
READS = {"Warm start across hardware types": "bench/search_efficiency.py — trials to the front",
         "The memory model on the tables": "bench/search_efficiency.py — trials to the front"}


def _headings() -> list[str]:
    return [line.lstrip("#").strip() for line in DOC.read_text().splitlines() if line.startswith("## ")
            or line.startswith("### ")]


CHECKED_PROSE = tuple(name for name in _headings() if name not in DESIGN_ONLY)


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


report = _report()


def test_every_block_matches_its_command():
    problems = report.check(DOC)
    assert not problems, "\n\n".join(problems) + "\n\nregenerate: python bench/report.py --write"


def test_every_measured_section_has_a_block():
    """Each ``##`` section that is not a design is printed, at least in part, from committed raw results
    (a ``###`` subsection may lean on its parent's or another section's blocks)."""
    lines = DOC.read_text().splitlines()
    sections = {block.section for block in report.blocks(lines)}
    top = [line[3:].strip() for line in lines if line.startswith("## ")]
    assert [name for name in top if name not in DESIGN_ONLY and name not in sections] == []


def test_a_figure_edited_by_hand_fails_naming_its_section(tmp_path: Path):
    text = DOC.read_text()
    original = "| sweep | 468 1/1 | 708 1/1 | 2483 1/1 |"  # avqa:cpu1t, first in the search-efficiency section
    assert text.count(original) >= 1
    edited = tmp_path / "benchmarks.md"
    edited.write_text(text.replace(original, "| sweep | 432 1/1 | 708 1/1 | 2483 1/1 |", 1))
    problems = report.check(edited)
    assert len(problems) == 1
    assert "section 'bench/search_efficiency.py — trials to the front'" in problems[0]
    assert "-| sweep | 432 1/1" in problems[0] and "+| sweep | 468 1/1" in problems[0]


def test_an_edited_figure_in_a_fenced_block_fails_too(tmp_path: Path):
    text = DOC.read_text()
    original = "253 -> 77 device-s"
    assert text.count(original) == 1
    edited = tmp_path / "benchmarks.md"
    edited.write_text(text.replace(original, "253 -> 70 device-s"))
    problems = report.check(edited)
    assert len(problems) == 1 and "section 'Device-seconds to the front'" in problems[0]


def test_write_restores_an_edited_block(tmp_path: Path):
    edited = tmp_path / "benchmarks.md"
    shutil.copy(DOC, edited)
    edited.write_text(edited.read_text().replace("| sweep | 468 1/1 |", "| sweep | 432 1/1 |", 1))
    assert report.write(edited) == 1
    assert edited.read_text() == DOC.read_text()


def test_an_unclosed_block_is_an_error():
    with pytest.raises(ValueError, match="not closed"):
        report.blocks(["## s", "<!-- report: python bench/fleet.py --report -->", "| 1 |"])


def prose_problems(text: str, section: str) -> list[str]:
    """What is wrong with one section's figures outside its report blocks: a table outside them, or a number
    with a decimal point or a % in the prose that none of its blocks (or the section its prose reads,
    :data:`READS`) prints — compared as numbers: a percentage must be a percentage or a decimal there."""
    lines = text.splitlines()
    blocks = report.blocks(lines)
    inside = {i for b in blocks for i in range(b.start - 1, b.end + 1)}
    body = [i for i, line in enumerate(lines) if line.startswith("#")]
    names = {i: lines[i].lstrip("#").strip() for i in body}
    start = next(i for i, n in names.items() if n == section)
    end = next((i for i in body if i > start), len(lines))
    outside = [lines[i] for i in range(start + 1, end) if i not in inside]
    problems = [f"section {section!r} has a table outside its report blocks: {line!r}"
                for line in outside if line.startswith("|")][:1]
    prose = "\n".join(line for line in outside if not line.startswith("`python bench/"))
    related = [b for b in blocks if b.section == section or b.section == READS.get(section)]
    printed = "\n".join("\n".join(block.body) for block in related)
    percents = {float(x) for x in re.findall(r"(\d+(?:\.\d+)?)\s?%", printed)}
    decimals = {float(x.replace(",", "")) for x in re.findall(r"\d+(?:,\d{3})*\.\d+", printed)}
    quoted_percents = {float(x) for x in re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s?%", prose)}
    quoted_decimals = {float(x.replace(",", "")) for x in re.findall(r"(?<![\w.])\d+(?:,\d{3})*\.\d+(?![\d.])(?!\s?%)", prose)}
    missing = sorted((quoted_percents - percents - decimals) | (quoted_decimals - decimals))
    if missing:
        problems.append(f"section {section!r} quotes {missing}, found in none of its blocks")
    return problems


@pytest.mark.parametrize("section", CHECKED_PROSE)
def test_prose_quotes_only_figures_of_its_blocks(section: str):
    assert prose_problems(DOC.read_text(), section) == []


def test_a_hand_table_or_a_stray_figure_fails():
    section = "bench/overhead.py — fixed per-trial overhead"
    text = DOC.read_text()
    heading = f"## {section}\n"
    assert prose_problems(text, section) == []
    with_table = text.replace(heading, heading + "\n| figure | value |\n| --- | --- |\n| bare | 9.9 ms |\n", 1)
    assert prose_problems(with_table, section)[0].startswith(f"section {section!r} has a table outside")
    with_number = text.replace(heading, heading + "\nThe whole path took 987.6 ms per trial.\n", 1)
    assert prose_problems(with_number, section) == [f"section {section!r} quotes [987.6], found in none of its blocks"]
