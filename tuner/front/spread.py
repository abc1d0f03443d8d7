"""The per-input spread of a trial of several inputs (spec ``cases``), as ``tuner show`` prints it.

One row per metric worth comparing across inputs (the quality metrics, the ``shown`` ones -- a study's
objectives -- and :data:`ALWAYS_SHOWN`), one column per input, then the trial's figure (their
mean; a peak's maximum) and the worst input's value; the cliff lines the worker recorded follow
(:func:`tuner.runner.measure.inputs.cliff_lines`). A metric no input has is left out; an input's unavailable figure
shows as ``n/a`` and its reason is listed under the table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from tuner.spec.metrics import QUALITY_METRIC_NAMES

ALWAYS_SHOWN = ("latency_p50_s", "peak_vram_device_gb", "peak_rss_gb")

PerInput = Mapping[str, Mapping[str, Mapping[str, Any]]]
"""input -> metric -> ``{"value"[, "reason"]}`` (``TrialRecord.per_input``)."""


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "n/a"


def _worst(values: Sequence[Any], direction: str) -> Any:
    numbers = [v for v in values if isinstance(v, (int, float))]
    if len(numbers) != len(values) or not numbers:
        return None
    return max(numbers) if direction == "minimize" else min(numbers)


def spread_lines(
    per_input: PerInput, metrics: Mapping[str, Mapping[str, Any]], cliffs: Sequence[str], shown: Collection[str] = ()
) -> list[str]:
    """The lines of the spread (none for a trial of one input). ``metrics``: the trial's stored metrics (their
    units, directions and combined values); ``shown``: metric names to show besides the quality metrics."""
    if not per_input:
        return []
    inputs = list(per_input)
    wanted = set(QUALITY_METRIC_NAMES) | set(shown) | set(ALWAYS_SHOWN)
    names = [
        name
        for name in dict.fromkeys(n for figures in per_input.values() for n in figures)
        if name in wanted and any(per_input[case].get(name, {}).get("value") is not None for case in inputs)
    ]
    rows = [["metric", *inputs, "trial", "worst"]]
    reasons = []
    for name in names:
        stored = metrics.get(name, {})
        unit = stored.get("unit") or ""
        values = [per_input[case].get(name, {}).get("value") for case in inputs]
        label = f"{name} ({unit})" if unit and unit != "1" else name
        rows.append(
            [
                label,
                *map(_cell, values),
                _cell(stored.get("value")),
                _cell(_worst(values, str(stored.get("direction", "minimize")))),
            ]
        )
        reasons += [
            f"  {case} {name}: {per_input[case][name].get('reason') or 'no value'}"
            for case in inputs
            if name in per_input[case] and per_input[case][name].get("value") is None
        ]
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = [f"per input ({len(inputs)} inputs; the trial's figure is their mean, a peak their maximum):"]
    lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    if reasons:
        lines += ["unavailable per input:", *reasons]
    lines += ["cliffs:", *(f"  {line}" for line in cliffs)] if cliffs else ["cliffs: none flagged"]
    return lines
