"""The closing Pareto-front summary as plain text lines that fit a terminal's width.

:func:`front_lines` turns a :class:`~tuner.session.events.FrontSummary` into lines, none wider
than the width asked for (for widths >= :data:`MIN_WIDTH`), except a single ``name=value`` item
that is wider on its own (it is never cut). Both renderers print these same lines: plain
(:class:`tuner.session.text.TextSession`) and rich (:class:`tuner.cli.session.ConsoleSession`,
which may bold the lines :func:`marks_chosen` picks out)::

    Pareto front (5 trials): latency_p50_s (min, s), stlpips_alex (min)
      trial  role    latency_p50_s  stlpips_alex  speed-up
    *    12  search        0.412 s        0.0213     2.31x
          infer_frames=33, sample_steps=8, resolution=480x832, online_decode=True
         21  search       0.9512 s        0.0102     1.00x  NOISY
          infer_frames=81, sample_steps=16, resolution=720x1280, online_decode=True
    same on every front trial: batch_size=1, precision=bf16
    * chosen: trial 12 by knee — 2.31x faster than the baseline (trial 1); stlpips_alex
      0.0213 vs the reference's 0 (baseline 0.034)

When the table is wider than the width, each trial's row is stacked instead (``* trial 12
search: latency_p50_s 0.412 s, ...`` wrapped).

Every parameter that varies across the front is shown in full under its trial's row; the ones
every front trial shares are listed once. Pure: no terminal, no I/O.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.session.events import FrontSummary
    from tuner.storage.records import TrialRecord

MIN_WIDTH = 60
"""The narrowest width :func:`front_lines` promises to fit (narrower: best effort)."""

MARK = "*"
"""The mark column's sign for :attr:`FrontSummary.chosen` (also how the chosen line starts)."""

GAP = "  "
"""Between two table columns."""

PARAM_INDENT = " " * 6
"""Where a trial's parameters start, under its row (past the mark, inside the trial column)."""

CONTINUATION_INDENT = "  "
"""Where a wrapped title, ``same on every`` or chosen line continues."""

UNITLESS = frozenset({"", "1"})
"""Units that are not printed after a value."""


def front_lines(summary: FrontSummary, width: int) -> list[str]:
    """The front of ``summary`` as lines of at most ``width`` characters (see the module docstring).

    Contract: for ``width >= MIN_WIDTH`` no line is longer than ``width`` unless it is one
    ``name=value`` parameter item alone on its (indented) line; every varying parameter of a front
    trial appears, whole, in that trial's block (its row and the lines under it, up to the next
    row); the shared ones on the ``same on every front trial:`` line (absent when none is shared,
    and with a single-trial front, whose parameters all go under its row). The chosen trial's row
    starts with :data:`MARK`; so does the closing ``chosen`` line (absent when ``chosen`` is None).
    """
    front = summary.front
    count = f"{len(front)} trial{'' if len(front) == 1 else 's'}"
    objectives = [
        f"{name} ({_direction(direction)}{_unit_suffix(summary, name, ', ')})"
        for name, direction in zip(summary.objective_names, summary.directions)
    ]
    comparator = summary.comparator
    if comparator is not None and summary.speed_metric is not None:
        against = summary.headline.against if summary.headline is not None else "baseline"
        objectives.append(f"speed-up vs the {against} (trial {comparator.number})")
    lines = wrap_items(objectives, width, f"Pareto front ({count}): ", CONTINUATION_INDENT)
    varying, shared = split_params(front)
    rows = _rows(summary)
    table = _table(rows)
    fits = all(len(line) <= width for line in table)
    if fits:
        lines.append(table[0])
    for index, record in enumerate(front):
        if fits:
            lines.append(table[index + 1])
        else:
            lines += _stacked_row(summary, rows[0], rows[index + 1], width)
        items = [f"{name}={_text(record.params[name])}" for name in varying if name in record.params]
        lines += wrap_items(items, width, PARAM_INDENT, PARAM_INDENT)
    if not front:
        lines.append(f"{CONTINUATION_INDENT}(no trial is on the front)")
    if shared:
        lines += wrap_items(
            [f"{name}={_text(value)}" for name, value in shared.items()],
            width,
            "same on every front trial: ",
            CONTINUATION_INDENT,
        )
    if summary.chosen is not None:
        lines += textwrap.wrap(
            chosen_text(summary),
            width,
            subsequent_indent=CONTINUATION_INDENT,
            break_long_words=False,
            break_on_hyphens=False,
        )
    return lines


def marks_chosen(line: str) -> bool:
    """Whether ``line`` (one of :func:`front_lines`) is the chosen trial's row or the chosen line."""
    return line.startswith(MARK + " ")


def split_params(front: Sequence[TrialRecord]) -> tuple[list[str], dict[str, Any]]:
    """``(varying, shared)``: the parameter names whose value differs across ``front`` (or that some
    trials lack), in first-seen order; and ``name -> value`` of the ones every trial has alike. A
    single trial's parameters all count as varying (they are shown under its row)."""
    names: list[str] = []
    for record in front:
        names += [name for name in record.params if name not in names]
    if len(front) < 2:
        return names, {}
    shared = {
        name: front[0].params[name]
        for name in names
        if all(name in r.params and _same(r.params[name], front[0].params[name]) for r in front)
    }
    return [name for name in names if name not in shared], shared


def chosen_text(summary: FrontSummary) -> str:
    """The closing line, unwrapped: which trial the rule chose, its speed-up (over the baseline when it meets the
    export rule, else the reference, and how the baseline fails it: :attr:`FrontSummary.headline`) and,
    for each objective but the speed metric, its value beside the reference's and the baseline's.
    A chosen trial off the front says so, with all its objective values (when its record is known:
    on the front, or the baseline or reference)."""
    number = summary.chosen
    record = chosen_record(summary)
    on_front = any(r.number == number for r in summary.front)
    head = f"{MARK} chosen: trial {number}{'' if on_front else ' (not on the front)'}"
    if summary.rule:
        head += f" by {summary.rule}"
    if record is None:
        return head + " — its measurements are not in this summary"
    parts: list[str] = []
    speedup = summary.speedup(record)
    baseline = summary.baseline
    if baseline is not None and baseline.number == number:
        parts.append("the baseline itself: the rule found nothing faster that meets it")
    elif summary.headline is not None and summary.headline.chosen.number == number:
        parts.append(summary.headline.text())
    elif speedup is not None and baseline is not None:
        faster = f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"
        parts.append(f"{faster} than the baseline (trial {baseline.number})")
    for index, name in enumerate(summary.objective_names):
        if name == summary.speed_metric and on_front:
            continue
        value = objective_value(record, name, index)
        if value is None:
            continue
        part = f"{name} {_value(summary, name, value)}"
        if name != summary.speed_metric:
            theirs = objective_value(summary.reference, name, index) if summary.reference else None
            base = objective_value(baseline, name, index) if baseline else None
            if theirs is not None:
                part += f" vs the reference's {_value(summary, name, theirs)}"
            if base is not None and baseline is not None and baseline.number != number:
                part += f" ({'' if theirs is not None else 'vs '}baseline {_value(summary, name, base)})"
        parts.append(part)
    return head + (" — " + "; ".join(parts) if parts else "")


def chosen_record(summary: FrontSummary) -> TrialRecord | None:
    """The record of :attr:`FrontSummary.chosen`: its own record when given, else the one on the front, the
    baseline or the reference with its number (None)."""
    candidates = [summary.chosen_record, *summary.front, summary.baseline, summary.reference]
    return next((r for r in candidates if r is not None and r.number == summary.chosen), None)


def objective_value(record: TrialRecord, name: str, index: int) -> float | None:
    """``record``'s measured value of objective ``name`` (the ``index``-th): its stored metric, else
    its objective value (not a placeholder); None when it has neither."""
    value = record.metric_value(name)
    if value is None and record.values is not None and not record.placeholder and index < len(record.values):
        value = float(record.values[index])
    return value


def wrap_items(items: Sequence[str], width: int, first: str, indent: str, sep: str = ", ") -> list[str]:
    """``items`` joined by ``sep`` after ``first``, broken between items so each line fits ``width``;
    lines after the first start with ``indent``. An item is never broken: one wider than the width
    stands alone on its line. A label ``first`` that leaves no room for the first item stands alone.
    No items: no lines."""
    if not items:
        return []
    comma = sep.rstrip()  # what ends a line that more items follow
    lines: list[str] = []
    line, empty = first, True
    for index, item in enumerate(items):
        tail = len(comma) if index < len(items) - 1 else 0
        if empty:
            if len(line) + len(item) + tail > width and line.strip() and line != indent:
                lines.append(line.rstrip())
                line = indent
            line, empty = line + item, False
        elif len(line) + len(sep) + len(item) + tail <= width:
            line += sep + item
        else:
            lines.append(line + comma)
            line = indent + item
    lines.append(line)
    return lines


def _rows(summary: FrontSummary) -> list[list[str]]:
    """The table's cells: a header, then one row per front trial (mark, trial, role, objectives, the
    summary's extra metrics, speed-up, flag)."""
    rows = [["", "trial", "role", *summary.objective_names, *summary.extra_metrics, "speed-up", ""]]
    for record in summary.front:
        values = []
        for index, name in enumerate(summary.objective_names):
            value = objective_value(record, name, index)
            values.append("-" if value is None else _value(summary, name, value))
        for name in summary.extra_metrics:
            extra = record.metric_value(name)
            values.append("-" if extra is None else _value(summary, name, extra))
        speedup = summary.speedup(record)
        rows.append(
            [
                MARK if record.number == summary.chosen else "",
                str(record.number),
                record.role_shown,
                *values,
                "-" if speedup is None else f"{speedup:.2f}x",
                "NOISY" if record.noisy else "",
            ]
        )
    return rows


def _table(rows: list[list[str]]) -> list[str]:
    """``rows`` as aligned lines: numbers right-aligned, the role and flag left; trailing blanks dropped."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    widths[0] = len(MARK)
    last = len(widths) - 1
    lines = []
    for row in rows:
        cells = [cell.ljust(w) if i in (0, 2, last) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append((cells[0] + " " + GAP.join(cells[1:])).rstrip())
    return lines


def _stacked_row(summary: FrontSummary, header: list[str], row: list[str], width: int) -> list[str]:
    """One trial's row when the table is wider than ``width``: ``* trial 12 search:`` and its
    cells as ``name value`` items, wrapped."""
    first = f"{row[0] or ' '} trial {row[1]} {row[2]}: "
    cells = [f"{name} {cell}" for name, cell in zip(header[3:-1], row[3:-1])] + ([row[-1]] if row[-1] else [])
    return wrap_items(cells, width, first, " " * 4)


def _direction(direction: str) -> str:
    return {"minimize": "min", "maximize": "max"}.get(direction, direction)


def _unit_suffix(summary: FrontSummary, name: str, sep: str) -> str:
    unit = summary.units.get(name, "")
    return "" if unit in UNITLESS else f"{sep}{unit}"


def _value(summary: FrontSummary, name: str, value: float) -> str:
    """``value`` to 4 significant digits, its unit after it (``0.412 s``)."""
    return f"{value:.4g}{_unit_suffix(summary, name, ' ')}"


def _text(value: Any) -> str:
    return str(value)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # an odd stored value that cannot be compared: call it different
        return False
