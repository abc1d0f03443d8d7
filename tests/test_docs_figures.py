"""Every figure the docs state comes from a committed raw result, or is a setting that says where it lives.

The documents: README.md, docs/*.md and the model cards docs/models/*.md (``bench/report.py``'s ``DOCS``).

* **Report blocks** (``<!-- report: python ... -->`` ... ``<!-- /report -->``) are what their command prints
  from committed raw results (``bench/results/``, ``bench/tables/``, the checkpoints): ``bench/report.py
  --check`` reruns each command (without git: ``GIT_DIR`` names no repository, so a ``git clone --depth 1``
  reprints every block) and a figure edited by hand inside a block fails naming its section.
* **Every other figure** (``bench/doc_figures.py``): a number with a decimal point or a %, a whole number
  with a unit of time, size, frequency, rate or ratio (``2817 s``, ``3x``, ``100 Hz``), or any number in a
  table cell of numbers only, must be printed by a report block of its section. Not figures: code
  (fenced or inline), versions, dates, names with digits (``Wan2.1``), whole numbers without a unit.
* **The allow-mechanism, kept small and strict**: ``<!-- figures: settings PATH:NAME[,NAME] -->`` — the
  figure is a default, cap, threshold or test set-up of the project, and its value (or its value in base
  units) must be a numeric literal where NAME stands in PATH, or the check fails; ``<!-- figures: source
  CITATION -->`` — quoted from an outside source, named for a reviewer. A marker ends the line it covers,
  or stands alone before the paragraph or table it covers; one that covers no figure, or names a missing
  file or name, fails too. A measurement never goes under a marker: it gets a raw result and a block, or
  it is said without a figure.
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
# Sections of benchmarks.md with no block: a design whose figures are the check script's own caps (markers).
DESIGN_ONLY = ("bench/gpu_check.sh — the CUDA paths on a real GPU",)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


doc_figures = _load("doc_figures")
report = doc_figures.report
WITH_BLOCKS = [doc for doc in report.DOCS if report.blocks(doc.read_text().splitlines())]


def _name(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("doc", WITH_BLOCKS, ids=_name)
def test_every_block_matches_its_command(doc: Path):
    problems = report.check(doc)
    assert not problems, "\n\n".join(problems) + "\n\nregenerate: python bench/report.py --write"


@pytest.mark.parametrize("doc", report.DOCS, ids=_name)
def test_every_figure_is_traced(doc: Path):
    assert doc_figures.problems(doc) == []


def test_report_commands_run_without_git():
    """A block's command cannot read git (history or HEAD): what CI on a shallow clone or a tarball reprints."""
    with pytest.raises(RuntimeError, match="exited 128"):
        report.run(
            "python -c \"import subprocess, sys; sys.exit(subprocess.run(['git', 'rev-parse', 'HEAD']).returncode)\""
        )


def test_every_measured_section_has_a_block():
    """Each ``##`` section of benchmarks.md that is not a design is printed, at least in part, from committed
    raw results (a ``###`` subsection may lean on its parent's or another section's blocks)."""
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


@pytest.mark.parametrize(
    "doc, original, changed, section",
    [
        ("benchmarks.md", "253 -> 77 device-s", "253 -> 70 device-s", "Device-seconds to the front"),  # a fenced block
        (
            "models.md",
            "| `use_cache` false | 2.60 s, 5.79x;",
            "| `use_cache` false | 2.60 s, 6.79x;",
            "What was measured where",
        ),  # the models table
    ],
)
def test_an_edited_figure_in_a_fenced_block_or_the_models_table_fails(
    tmp_path: Path, doc: str, original: str, changed: str, section: str
):
    text = (ROOT / "docs" / doc).read_text()
    assert text.count(original) == 1
    edited = tmp_path / doc
    edited.write_text(text.replace(original, changed))
    problems = report.check(edited)
    assert len(problems) == 1 and f"section '{section}'" in problems[0]


def test_write_restores_an_edited_block(tmp_path: Path):
    edited = tmp_path / "benchmarks.md"
    shutil.copy(DOC, edited)
    edited.write_text(edited.read_text().replace("| sweep | 468 1/1 |", "| sweep | 432 1/1 |", 1))
    assert report.write(edited) == 1
    assert edited.read_text() == DOC.read_text()


def test_an_unclosed_block_is_an_error():
    with pytest.raises(ValueError, match="not closed"):
        report.blocks(["## s", "<!-- report: python bench/fleet.py --report -->", "| 1 |"])


def _problems(text: str) -> list[str]:
    return doc_figures.problems(ROOT / "docs" / "example.md", text)


def _stated(text: str) -> list[str]:
    """The figures the check finds untraced in ``text`` (a document with no blocks and no markers)."""
    return [problem.split(" states ")[1].split(", printed by")[0].strip("'") for problem in _problems(text)]


def test_a_stray_figure_fails_whole_numbers_with_units_included():
    text = (
        "## Runs\n\nThe recorded runs took 2817 s in all, 0.36 CPU-s each instead of 0.8, and 39 % of a core;\n"
        "each took 17–36 s, 3x the baseline, at 100 Hz, with 4 GB and 2 MiB to spare (~0.4 ms per read).\n"
    )
    assert _stated(text) == [
        "2817 s",
        "0.36 CPU-s",
        "0.8",
        "39 %",
        "17",
        "36 s",
        "3x",
        "100 Hz",
        "4 GB",
        "2 MiB",
        "0.4 ms",
    ]


def test_a_hand_table_of_numbers_fails_whole_numbers_included():
    text = "## Runs\n\n| method | trials | share |\n| --- | --- | --- |\n| sweep | 468 1/1 | 12 |\n| tpe | 61 | 3 |\n"
    assert _stated(text) == ["468", "1", "12", "61", "3"]  # "1/1": the numerator (a denominator is no figure)


def test_what_is_no_figure():
    text = """## 3. Setup

1. Install optuna 5.0 with Python 3.11, 3.12 and 3.13 (`torch>=2.5`, torch 2.14.1; CUDA 13); see issue #36.
2. Run `max_new_tokens=64` or `sleep 0.5` on 127.0.0.1 on 2026-12-03T08:07:12Z, sizes 720*400 and 832x480,
   the Wan2.1-T2V-1.3B model (x86-64), HV@40 over 16 trials and 4 GPUs, a 7B model.

```
took 2817 s, 0.36 CPU-s
```

| layer | what |
| --- | --- |
| 2 | cli |
| 1 | session |
| 0 | storage |

| Python | torch |
| --- | --- |
| 3.12 | 2.11 |
"""
    assert _problems(text) == []


def test_a_block_of_its_section_traces_a_figure_and_a_whole_number_needs_its_unit():
    command = "python bench/cost_aware.py --report"
    printed = report.run(command)
    seconds = re.search(r"(\d+) s of replay wall time", "\n".join(printed))
    assert seconds is not None, "the report states the replay time"
    took = f"{seconds.group(1)} s"
    text = "\n".join(
        [
            "## Device-seconds",
            "",
            f"<!-- report: {command} -->",
            *printed,
            "<!-- /report -->",
            "",
            f"The replays took {took} and 5531 trials; 0.69x for ei-per-sqrt-second.",
            "",
            "## Elsewhere",
            "",
            "The same 0.69x here is no block's.",
        ]
    )
    assert _stated(text) == ["0.69x"]
    assert _stated(text.replace(f"took {took}", "took 5466 s")) == ["5466 s", "0.69x"]
    assert _stated(text.replace(f"took {took}", f"took {seconds.group(1)} ms")) == [f"{seconds.group(1)} ms", "0.69x"]


def test_the_known_offender_fails_again_if_typed_back():
    text = DOC.read_text()
    stated = re.search(r"\(2026-12-03 to 2026-12-07, (\d+) s of replay", text)
    assert stated is not None, "the sentence that once stated a replay time no block printed"
    typed, wrong = stated.group(0), int(stated.group(1)) - 65  # the block's own figure, typed back off by a minute
    assert text.count(typed) == 1
    problems = doc_figures.problems(DOC, text.replace(typed, f"(2026-12-03 to 2026-12-07, {wrong} s of replay"))
    assert len(problems) == 1 and f"states '{wrong} s'" in problems[0] and "Device-seconds to the front" in problems[0]


def test_a_settings_marker_holds_the_value_to_the_code_it_names():
    marker = "<!-- figures: settings tuner/storage/outage.py:DEFAULT_OUTAGE_BOUND_S -->"
    assert _problems(f"## Outages\n\nAn outage is waited out for 120 s. {marker}\n") == []
    assert _stated("## Outages\n\nAn outage is waited out for 120 s.\n") == ["120 s"]
    wrong = _problems(f"## Outages\n\nAn outage is waited out for 90 s. {marker}\n")
    assert wrong == ["docs/example.md:3: '90 s' is no literal of the settings its marker names"]
    # a marker alone on a line covers the table (or paragraph) after it; units convert (50 ms = 0.05 s)
    table = (
        "<!-- figures: settings tuner/storage/outage.py:FIRST_WAIT_S,LONGEST_WAIT_S -->\n"
        "| wait | value |\n| --- | --- |\n| first | 500 ms |\n| longest | 5 s |\n"
    )
    assert _problems(f"## Outages\n\n{table}") == []
    assert _problems(f"## Outages\n\n{table.replace('5 s', '6 s')}") == [
        "docs/example.md:7: '6 s' is no literal of the settings its marker names"
    ]


def test_a_bad_marker_fails():
    missing = _problems("## A\n\nWaits 120 s. <!-- figures: settings tuner/nowhere.py:X -->\n")
    assert any("not PATH:NAME of a file of the project" in problem for problem in missing)
    unknown = _problems("## A\n\nWaits 120 s. <!-- figures: settings tuner/storage/outage.py:NO_SUCH_NAME -->\n")
    assert any("'NO_SUCH_NAME' does not stand in tuner/storage/outage.py" in problem for problem in unknown)
    idle = _problems("## A\n\nWaits a while. <!-- figures: settings tuner/storage/outage.py:LONGEST_WAIT_S -->\n")
    assert idle == ["docs/example.md:3: the figures marker covers no figure"]
    kind = _problems("## A\n\nWaits 5 s. <!-- figures: measured trust me -->\n")
    assert kind == [
        "docs/example.md:3: a figures marker is 'settings PATH:NAME ...' or 'source CITATION'",
        "docs/example.md:3: section 'A' states '5 s', printed by none of its report blocks and under no figures marker",
    ]


def test_a_source_marker_names_where_an_outside_figure_comes_from():
    cited = "<!-- figures: source https://example.org/survey-2026, table 3 -->"
    assert _problems(f"## Domain\n\n39 % of the studied clips were over-compressed. {cited}\n") == []
    assert _stated("## Domain\n\n39 % of the studied clips were over-compressed.\n") == ["39 %"]
