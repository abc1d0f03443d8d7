"""docs/benchmarks.md's generated blocks are what their commands print from the committed raw results.

``bench/report.py --check`` reruns every ``<!-- report: ... -->`` command (each only reads committed
JSON) and compares; a figure edited by hand inside a block fails naming its section. In the
sections listed in :data:`CHECKED_PROSE`, every number with a decimal point or a ``%`` quoted in
the prose must appear in one of that section's blocks (the warm-start and memory-model sections
read the search-efficiency section's blocks).
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
CHECKED_PROSE = ("bench/search_efficiency.py — trials to the front", "Warm start across hardware types",
                 "The memory model on the tables", "Which setting is exported by default",
                 "The tuner's own cost as studies and fleets grow (issue 27)")


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


def test_the_converted_sections_have_blocks():
    sections = {block.section for block in report.blocks(DOC.read_text().splitlines())}
    assert {CHECKED_PROSE[0], CHECKED_PROSE[3], "Device-seconds to the front",
            "The tuner's own cost as studies and fleets grow (issue 27)"} <= sections


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


def _sections(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    name = "(top)"
    for line in lines:
        if line.startswith("#"):
            name = line.lstrip("#").strip()
        out.setdefault(name, []).append(line)
    return out


@pytest.mark.parametrize("section", CHECKED_PROSE)
def test_prose_quotes_only_figures_of_its_blocks(section: str):
    """Numbers with a decimal point or a % in the prose of a checked section are in its blocks (or the
    sections the prose reads), compared as numbers: a percentage must be a percentage or a decimal there."""
    lines = DOC.read_text().splitlines()
    blocks = report.blocks(lines)
    inside = {i for b in blocks for i in range(b.start - 1, b.end + 1)}
    body = [i for i, line in enumerate(lines) if line.startswith("#")]
    names = {i: lines[i].lstrip("#").strip() for i in body}
    start = next(i for i, n in names.items() if n == section)
    end = next((i for i in body if i > start), len(lines))
    prose = "\n".join(lines[i] for i in range(start + 1, end) if i not in inside and not lines[i].startswith("|")
                      and not lines[i].startswith("`python bench/") and not lines[i].startswith("| "))
    # blocks of this section, and of the section the memory-model and warm-start prose read (above them)
    related = [b for b in blocks if b.section == section
               or (section in CHECKED_PROSE[1:3] and b.section == CHECKED_PROSE[0])]
    text = "\n".join("\n".join(block.body) for block in related)
    percents = {float(x) for x in re.findall(r"(\d+(?:\.\d+)?)\s?%", text)}
    decimals = {float(x.replace(",", "")) for x in re.findall(r"\d+(?:,\d{3})*\.\d+", text)}
    quoted_percents = {float(x) for x in re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s?%", prose)}
    quoted_decimals = {float(x.replace(",", "")) for x in re.findall(r"(?<![\w.])\d+(?:,\d{3})*\.\d+(?![\d.])(?!\s?%)", prose)}
    missing = sorted((quoted_percents - percents - decimals) | (quoted_decimals - decimals))
    assert not missing, f"section {section!r} quotes {missing}, found in none of its blocks"
