"""Every figure a document states outside its report blocks, and where each one comes from.

A **figure** is a number a reader takes for a fact of this software's speed, size or quality:

* a number with a decimal point (``0.36``, ``1e-4``) or a percent (``95 %``);
* a whole number with a unit of time, size, frequency, rate or ratio (``2817 s``, ``4 GB``, ``100 Hz``,
  ``3x``, ``600 device-s``: :data:`doc_figure_vocabulary.UNITS`), each end of a range (``17–36 s``) included;
* every number in a table cell that holds nothing but numbers (``| 468 1/1 |``, ``| 0.969 |``).

Not figures: what stands in code (fenced blocks, ``inline code``), HTML comments and link targets;
versions (two dots; after a version operator; after a name of :data:`doc_figure_vocabulary.VERSIONED` or in a table column
headed by one; continuing a list of versions: "Python 3.11, 3.12 and 3.13"); numbers that are part of a
name or a date (``Wan2.1``, ``T2V-1.3B``, ``x86-64``, ``HV@40``, ``2026-12-03``); whole numbers without a
unit (section and list numbers, counts, issue numbers, sizes such as 720*400); a table column of
consecutive integers (an index).

Every figure must be **traced**, one of:

1. **printed by a report block** of its section, or of the section :data:`doc_figure_vocabulary.READS` names for it: the
   block is what its command prints from committed raw results (``bench/report.py --check``). A decimal
   or a percent is compared as a number (a percent may be printed as a fraction, 95 % as 0.95); a whole
   number with a unit must be printed with that unit (``2799 s``).
2. **a setting of the project**, under ``<!-- figures: settings PATH:NAME[,NAME...] [PATH:NAME...] -->``:
   the figure's value, or its value in base units (50 ms as 0.05, 2 MiB as 2097152, 10 % as 0.1), is a
   numeric literal where NAME stands in PATH (the line naming it and the lines indented under it). For the
   project's defaults, caps, thresholds and test set-ups; never for a measurement.
3. **quoted from an outside source**, under ``<!-- figures: source CITATION -->`` (a URL, or a document
   named so that it can be found): read by a reviewer, not by this check.

A marker at the end of a line covers that line; a marker alone on a line covers the lines that follow it up
to the next blank line (a paragraph, a list, a table). A marker naming a missing file or name, or covering
no figure, is a problem too: markers stay few, and each one says where its numbers live.

Usage: ``python bench/doc_figures.py [DOC ...]`` (default: every document of ``bench/report.py``'s DOCS);
one line per problem, exit 1 when there is any.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402  (bench/report.py: the report blocks)
from doc_figure_vocabulary import READS, UNIT_FACTORS, UNITS, VERSIONED  # noqa: E402

ROOT = report.ROOT

_NUM = r"(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:[eE][-−]?\d+)?(?![.,]?\d)(?!\.[\d*xX])"
_UNIT = "|".join(re.escape(unit) for unit in UNITS if unit != "%")
_RUN = re.compile(
    rf"(?<![\w.@/^#$])(?<!\w[-−])(?P<run>{_NUM}(?:\s?[–\-−]\s?{_NUM})*)"
    rf"(?:(?P<space>\s?)(?P<unit>%|(?:{_UNIT})(?![A-Za-z0-9_]))|(?P<ratio>[x×])(?![\w]))?(?![A-Za-z_])"
)
_ONE = re.compile(_NUM)
_SPAN = r"`(?:[^`\n]|\n(?!\n))*`"  # a code span: it may cross a line break, never a blank line
_CODE = re.compile(rf"{_SPAN}|<!--.*?-->|\]\([^)\n]*\)|<https?://[^>\n]*>|https?://\S+")
_MARKER = re.compile(r"<!--\s*figures:\s*(?P<kind>\S+)\s*(?P<args>.*?)\s*-->")
_LITERAL = re.compile(r"(?<![\w.])\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_VERSION_BEFORE = re.compile(
    r"(?:(?P<name>[A-Za-z][\w.+-]*)(?:\([^()]*\))?(?:\s+(?:from|between|since))?"
    r"\s*\(?\s*(?:[<>=!~]=?|==)?\s*v?"
    r"|(?<![\s(])(?:[<>=!~]=)v?|\bv)$"
)  # pip style (torch>=2.5) or v2.5
_LISTED = re.compile(r"(?<![\w.])(\d+(?:\.\d+)+)\s*(?:,|and|or|to|/|–|-|\(and|\(or)\s*(?:and\s+)?$")


@dataclass(frozen=True)
class Figure:
    """One figure: where it stands, as written, its value and unit (``""``, ``"%"``, ``"x"``, ``"s"`` ...)."""

    line: int  # 1-based
    text: str
    value: float
    unit: str
    section: str
    whole: bool  # written without a decimal point or exponent


@dataclass(frozen=True)
class Marker:
    """A ``<!-- figures: ... -->`` marker: its kind, its arguments, and the lines (0-based) it covers."""

    line: int  # 0-based line of the marker
    kind: str
    args: str
    covers: tuple[int, ...]


def _value(number: str) -> float:
    return float(number.replace(",", "").replace("−", "-"))


def masked(line: str) -> str:
    """``line`` with code spans, HTML comments, link targets and URLs blanked (same length)."""
    return _CODE.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), line)


def _plain(line: str) -> str:
    """``line`` with only the backticks of its code spans blanked (same length): what names a version."""
    return re.sub(_SPAN, lambda match: f" {match.group(0)[1:-1]} ", line)


def _is_version(plain: str, start: int, number: str) -> bool:
    """Whether the dotted ``number`` at ``start`` of the line ``plain`` is a version (see the module doc)."""
    if number.count(".") != 1 or re.search(r"[eE]", number):
        return False
    before = plain[:start]
    listed = _LISTED.search(before)
    if listed and (listed.group(1).count(".") >= 2 or _is_version(plain, listed.start(1), listed.group(1))):
        return True
    found = _VERSION_BEFORE.search(before)
    if found is None:
        return False
    name = found.group("name")
    base = "" if name is None else name.lower().rstrip(":").split(".")[0]
    return name is None or base in VERSIONED or base.rstrip("s").endswith("version")


def line_figures(
    line: str,
    number: int,
    section: str,
    header: str = "",
    bare_cell: bool = False,
    before: str = "",
    shown: tuple[str, str] | None = None,
) -> list[Figure]:
    """The figures of one line (or table cell) as written: ``header`` is its table column's header, if any;
    ``bare_cell`` makes every number a figure (a cell of numbers only); ``before`` is the line above in
    the same paragraph (a version's name may end it); ``shown`` the line :func:`masked` and :func:`_plain`
    when its paragraph was (a code span may cross lines)."""
    if _plain(header).strip().lower() in VERSIONED:
        return []
    text, plain = shown or (masked(line), _plain(line))
    context = before + " " if before.strip() else ""
    plain = context + plain
    found: list[Figure] = []
    for match in _RUN.finditer(text):
        unit = match.group("unit") or match.group("ratio") or ""
        numbers = list(_ONE.finditer(match.group("run")))
        for item in numbers:
            written = item.group(0)
            start = match.start("run") + item.start()
            if _is_version(plain, len(context) + start, written):
                continue
            whole = not re.search(r"[.eE]", written)
            if whole and not unit and not bare_cell:
                continue
            as_written = written + (match.group("space") or "") + unit if item is numbers[-1] and unit else written
            found.append(Figure(number, as_written, _value(written), "x" if unit == "×" else unit, section, whole))
    return found


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def _bare(cell: str) -> bool:
    """A cell of numbers only (with units, signs, arrows, fractions, ±)."""
    shown = masked(re.sub(_SPAN, " code ", cell)).replace("**", "")  # a code span is words, not numbers
    return bool(re.search(r"\d", shown)) and not re.search(r"[A-Za-z]", _RUN.sub(" ", shown))


def _index_column(values: list[str]) -> bool:
    if len(values) < 2 or not all(re.fullmatch(r"\d+", value) for value in values):
        return False
    steps = {int(b) - int(a) for a, b in zip(values, values[1:])}
    return steps in ({1}, {-1})


def _table_figures(rows: list[tuple[int, str]], section: str) -> list[Figure]:
    header = _cells(rows[0][1])
    body = [(i, _cells(text)) for i, text in rows[1:] if not re.fullmatch(r"[\s|:\-]+", text)]
    found = line_figures(" | ".join(header), rows[0][0] + 1, section)
    index = {c for c in range(len(header)) if _index_column([cells[c] for _, cells in body if c < len(cells)])}
    for i, cells in body:
        for column, cell in enumerate(cells):
            if column in index:
                continue
            name = header[column] if column < len(header) else ""
            found += line_figures(cell, i + 1, section, name, bare_cell=_bare(cell))
    return found


def _markers(lines: Sequence[str], skipped: set[int]) -> list[Marker]:
    found = []
    for i, line in enumerate(lines):
        if i in skipped:
            continue
        for match in _MARKER.finditer(re.sub(_SPAN, lambda span: " " * len(span.group(0)), line)):  # not in code
            if line[: match.start()].strip():
                covers: tuple[int, ...] = (i,)
            else:
                end = next((j for j in range(i + 1, len(lines)) if not lines[j].strip()), len(lines))
                covers = tuple(range(i + 1, end))
            found.append(Marker(i, match.group("kind"), match.group("args"), covers))
    return found


def _literals(spec: str) -> tuple[set[float], list[str]]:
    """The numeric literals where each ``PATH:NAME[,NAME]`` of a settings marker's arguments stands."""
    values: set[float] = set()
    problems = []
    for item in spec.split():
        path, _, names = item.partition(":")
        file = ROOT / path
        if not names or not file.is_file():
            problems.append(f"settings marker argument {item!r}: not PATH:NAME of a file of the project")
            continue
        lines = file.read_text().splitlines()
        for name in names.split(","):
            where = [i for i, line in enumerate(lines) if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", line)]
            if not where:
                problems.append(f"settings marker: {name!r} does not stand in {path}")
            for i in where:
                indent = len(lines[i]) - len(lines[i].lstrip())
                block = [lines[i]]
                for following in lines[i + 1 :]:
                    if following.strip() and len(following) - len(following.lstrip()) <= indent:
                        break
                    block.append(following)
                values |= {float(x.replace("_", "")) for x in _LITERAL.findall("\n".join(block))}
    return values, problems


def _as_settings(figure: Figure) -> list[float]:
    """The values a setting may be written as: as stated, in base units, and a time in milliseconds."""
    base = figure.value * UNIT_FACTORS.get(figure.unit, 1.0)
    timed = figure.unit in ("s", "sec", "secs", "second", "seconds", "ms", "min", "minutes", "h", "hours")
    return [figure.value, base] + ([base * 1e3] if timed else [])


def _printed(block_text: str, figure: Figure) -> bool:
    if figure.whole and figure.unit not in ("", "%", "x"):
        pattern = rf"(?<![\w.])({_NUM})\s?{re.escape(figure.unit)}(?![A-Za-z0-9_])"
        return any(math.isclose(_value(x), figure.value, rel_tol=1e-12) for x in re.findall(pattern, block_text))
    printed = {_value(x) for x in _ONE.findall(block_text)}
    wanted = [figure.value] + ([figure.value / 100] if figure.unit == "%" else [])
    return any(math.isclose(value, x, rel_tol=1e-12) for value in wanted for x in printed)


def _indented_code(line: str, above: str, last_text: str, above_is_code: bool) -> bool:
    """An indented code block's line: four spaces in, after a blank line or code, and not in a list."""
    if not line.startswith(("    ", "\t")) or not line.strip():
        return False
    if above_is_code and (above.strip() == "" or above.startswith(("    ", "\t"))):
        return True
    in_list = re.match(r"\s|[-*+] |\d+[.)] ", last_text) is not None
    return above.strip() == "" and not in_list


def document_figures(lines: Sequence[str]) -> tuple[list[Figure], set[int]]:
    """Every figure of a document's lines outside report blocks and code, and the lines it skipped."""
    blocks = report.blocks(lines)
    skipped = {i for block in blocks for i in range(block.start - 1, block.end + 1)}
    fenced, last_text = False, ""  # last_text: the last non-blank line outside code
    for i, line in enumerate(lines):
        if i not in skipped and line.lstrip().startswith(report.FENCE):
            fenced = not fenced
            skipped.add(i)
        elif (
            fenced or i not in skipped and _indented_code(line, lines[i - 1] if i else "", last_text, i - 1 in skipped)
        ):
            skipped.add(i)
        elif line.strip():
            last_text = line
    prose = [
        i not in skipped and bool(line.strip()) and not line.startswith("#") and not line.lstrip().startswith("|")
        for i, line in enumerate(lines)
    ]
    # A paragraph is masked whole: a code span may cross a line break.
    shown_text = "\n".join(line if prose[i] else "" for i, line in enumerate(lines))
    masked_lines = masked(shown_text).split("\n")
    plain_lines = _plain(shown_text).split("\n")
    found: list[Figure] = []
    section, table = "(top)", list[tuple[int, str]]()
    for i, line in enumerate([*lines, ""]):
        if table and (i in skipped or not line.lstrip().startswith("|")):
            found += _table_figures(table, section)
            table = []
        if i in skipped or i == len(lines):
            continue
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        elif line.lstrip().startswith("|"):
            table.append((i, line))
        elif prose[i]:
            before = plain_lines[i - 1] if i and prose[i - 1] else ""
            found += line_figures(line, i + 1, section, before=before, shown=(masked_lines[i], plain_lines[i]))
    return found, skipped


def problems(doc: Path, text: str | None = None) -> list[str]:
    """One line per figure of ``doc`` that no report block prints and no marker covers, and per bad marker."""
    lines = (doc.read_text() if text is None else text).splitlines()
    name = doc.resolve().relative_to(ROOT).as_posix() if doc.resolve().is_relative_to(ROOT) else doc.name
    figures, skipped = document_figures(lines)
    blocks = report.blocks(lines)
    out: list[str] = []
    covered: dict[int, list[Marker]] = {}
    for marker in _markers(lines, skipped):
        for i in marker.covers:
            covered.setdefault(i, []).append(marker)
        if marker.kind not in ("settings", "source") or not marker.args:
            out.append(f"{name}:{marker.line + 1}: a figures marker is 'settings PATH:NAME ...' or 'source CITATION'")
        if not any(figure.line - 1 in marker.covers for figure in figures):
            out.append(f"{name}:{marker.line + 1}: the figures marker covers no figure")
    for figure in figures:
        markers = covered.get(figure.line - 1, [])
        if any(marker.kind == "source" and marker.args for marker in markers):
            continue
        settings = [marker for marker in markers if marker.kind == "settings"]
        if settings:
            values: set[float] = set()
            for marker in settings:
                found, bad = _literals(marker.args)
                values |= found
                out += [f"{name}:{marker.line + 1}: {problem}" for problem in bad]
            if not any(math.isclose(v, x, rel_tol=1e-9) for v in _as_settings(figure) for x in values):
                out.append(f"{name}:{figure.line}: {figure.text!r} is no literal of the settings its marker names")
            continue
        reads = (figure.section, *READS.get((name, figure.section), ()))
        printed = "\n".join(line for block in blocks if block.section in reads for line in block.body)
        if not _printed(printed, figure):
            out.append(
                f"{name}:{figure.line}: section {figure.section!r} states {figure.text!r}, printed by none "
                "of its report blocks and under no figures marker"
            )
    return list(dict.fromkeys(out))


def main(argv: Iterable[str] | None = None) -> int:
    docs = [Path(arg) for arg in (sys.argv[1:] if argv is None else argv)] or list(report.DOCS)
    found = [problem for doc in docs for problem in problems(doc)]
    print("\n".join(found) if found else f"every figure of {len(docs)} document(s) is traced")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
