"""A trial's sustained-load curve (``measurement.sustained``) and what was predicted of it before it ran, as
``tuner show`` prints them.

One row per level of streams: the calls completed, items per hour, latency p50 / p95 (s), and what stopped a
level (a failed call, the workload's bound on overlapping calls, the measurement window); the knee -- the level
whose figures are the trial's ``sustained_*`` metrics (:func:`tuner.evaluators.runtime.sustained.knee`) -- is
marked ``*`` (the worker flags its row). Lines stay within 80 columns: a
level's note goes on its own line under the table.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

WIDTH = 80


def _number(value: Any, digits: str = ".4g") -> str:
    return format(value, digits) if isinstance(value, (int, float)) else "-"


def _table(levels: Sequence[Mapping[str, Any]], indent: str) -> list[str]:
    rows = [["streams", "calls", "items/h", "p50 (s)", "p95 (s)"]]
    notes = []
    for level in levels:
        mark = "*" if level.get("knee") else " "
        rows.append(
            [
                f"{mark}{level.get('streams')}",
                str(level.get("calls", 0)),
                _number(level.get("throughput_per_hour"), ".5g"),
                _number(level.get("latency_p50_s")),
                _number(level.get("latency_p95_s")),
            ]
        )
        problem = level.get("error") or level.get("note")
        if problem:
            notes += textwrap.wrap(
                f"{level.get('streams')} streams: {problem}",
                WIDTH,
                initial_indent=indent + "  ",
                subsequent_indent=indent + "    ",
            )
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return [indent + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows] + notes


def load_lines(sustained: Any) -> list[str]:
    """The lines of the curve (none when the trial ran no sustained load). ``sustained``: the stored levels (a
    list of level rows, the knee's with ``"knee": true``; or input name -> list for a trial of several inputs)."""
    if not sustained:
        return []
    title = "sustained load (*: the knee, past which streams add less than knee_gain):"
    if isinstance(sustained, Mapping):
        lines = [title]
        for name, levels in sustained.items():
            lines += [f"  input {name}:", *_table(levels, "    ")]
        return lines
    return [title, *_table(sustained, "  ")]


def prediction_lines(prediction: Mapping[str, Mapping[str, Any]] | None, metrics: Mapping[str, Any]) -> list[str]:
    """What was predicted before the trial ran, with its interval and the measured error (none: no prediction;
    :mod:`tuner.search.prediction`)."""
    if not prediction:
        return []
    from tuner.search.prediction import prediction_errors

    errors = prediction_errors(prediction, metrics)
    fitted = max(int(p.get("fitted_on", 0)) for p in prediction.values())
    lines = [
        f"predicted before it ran (fitted on {fitted} trials"
        f"{' and a warm start' if any(p.get('prior') for p in prediction.values()) else ''}):"
    ]
    for name, p in prediction.items():
        unit = (metrics.get(name) or {}).get("unit", "")
        error = f"; measured {errors[name]:+.0%}" if name in errors else ""
        lines.append(f"  {name} {p['value']:.4g} {unit} [{p['low']:.4g}, {p['high']:.4g}]{error}".rstrip())
    return lines
