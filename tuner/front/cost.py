"""A study's cost as every view shows it: its lines, its MLflow metrics, the export's block, a trial's figures.

The sums are :func:`tuner.storage.cost.study_cost`'s (its module docstring is the contract:
``used`` = runs measured OK, ``wasted`` = runs that ended OOM / TIMEOUT / CRASH / INVALID or were
given back, ``avoided`` = an estimate of what copies, predicted OOMs and refused settings did not
spend). This module only words and shapes them, from the same stored trials, so ``tuner run``'s
summary, ``tuner status``, ``tuner show``, the MLflow study run, the service and the export agree.

Units: device-seconds (keys ending ``_s``) and device-hours (``_h``): a GPU-hour for a CUDA study, a
CPU-slot hour otherwise (:func:`tuner.storage.cost.device_unit`). ``used + wasted`` is exactly the sum
of the trials' recorded ``device_s`` (``recorded``); ``avoided`` is never part of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuner.storage.cost import (
    SECONDS_PER_HOUR,
    StudyCost,
    device_budget_s,
    device_unit,
    format_hours,
    study_cost,
    summary_line,
)
from tuner.storage.records import TrialRecord

__all__ = [
    "cost_of_records",
    "budget_hours",
    "cost_lines",
    "cost_metrics",
    "device_s_text",
    "trial_cost_lines",
    "trial_cost_document",
    "export_cost_block",
    "runs_counted",
    "phase_shares_line",
    "scored_off_device_line",
]

METRIC_PREFIX = "cost_"  # the MLflow study run's metrics: cost_used_device_h, cost_wasted_device_h, ...


def cost_of_records(records: Sequence[TrialRecord]) -> StudyCost:
    """The study's used / wasted / avoided device-seconds from its stored trial records."""
    return study_cost([record.costed() for record in records])


def budget_hours(stored: Any) -> float | None:
    """A stored ``budget_device_hours`` as device-hours; None when absent or not a positive number."""
    seconds = device_budget_s(stored)
    return None if seconds is None else seconds / SECONDS_PER_HOUR


def runs_counted(cost: StudyCost) -> int:
    """Runs whose recorded device-seconds the study's total holds (used + wasted)."""
    return sum(cost.used.values()) + sum(cost.wasted.values())


def cost_lines(cost: StudyCost, device: str | None, budget_device_hours: float | None = None) -> list[str]:
    """The lines a view prints: :func:`tuner.storage.cost.summary_line` with the recorded device-seconds
    the sums add up to; then how ``avoided`` was estimated (when something was avoided) and the runs
    whose cost is unknown (when there are any)."""
    lines = [
        f"{summary_line(cost, device, budget_device_hours)}; {_seconds(cost.recorded_s)} device-s recorded "
        f"by {runs_counted(cost)} runs (used + wasted)"
    ]
    if cost.avoided_estimate:
        lines.append(f"avoided is an estimate: {cost.avoided_estimate}")
    if cost.unknown:
        lines.append(f"{cost.unknown} run(s) without a recorded cost (their coordinator died): not counted")
    return lines


SHARE_WORDS = (("measured", "measured"), ("warmup", "warm-up"), ("startup", "start-up"), ("evaluation", "scoring"))
"""The phases :func:`phase_shares_line` names, in its order (stored name, word); the rest is ``other``. Short
words: the line stays within 80 columns (``scoring`` is the quality evaluation)."""


def phase_shares_line(cost: StudyCost) -> str | None:
    """One line: each phase's share of the study's recorded device time, e.g. ``device time: measured 76 %,
    warm-up 9 %, start-up 8 %, scoring 5 %, other 2 %`` (``other``: finishing -- samples, the saved output
    -- and time no worker reported; ``start-up`` holds process starts, the model's loads and reloads). None
    when no run recorded a phase."""
    phases = {phase: float(seconds) for phase, seconds in cost.phases_s.items() if seconds > 0}
    total = sum(phases.values())
    if total <= 0:
        return None
    parts = [(word, phases.pop(phase, 0.0)) for phase, word in SHARE_WORDS]
    parts.append(("other", sum(phases.values())))
    return "device time: " + ", ".join(f"{word} {100 * seconds / total:.0f} %" for word, seconds in parts)


def scored_off_device_line(records: Sequence[TrialRecord]) -> str | None:
    """One line on the trials whose quality a scorer process scored beside the next trial (``quality_scored``,
    :mod:`tuner.runner.scoring`): how many, the scorer's seconds (not device time), and how many scorers failed;
    None when there were none."""
    scored = [r.quality_scored for r in records if r.quality_scored]
    if not scored:
        return None
    failed = sum(1 for s in scored if s.get("failed"))
    seconds = sum(float(s.get("seconds") or 0.0) for s in scored)
    return (
        f"quality of {len(scored)} trial(s) scored off the device, beside the next trial: {_seconds(seconds)} s "
        f"in the scorer, not device time" + (f"; {failed} scorer(s) failed (quality unavailable)" if failed else "")
    )


def cost_metrics(cost: StudyCost) -> dict[str, float]:
    """The MLflow study run's cost metrics, in device-hours: ``cost_used_device_h``, ``cost_wasted_device_h``,
    ``cost_avoided_device_h``, ``cost_recorded_device_h`` (= used + wasted), and ``cost_wasted_runs``."""
    return {
        f"{METRIC_PREFIX}used_device_h": cost.used_s / SECONDS_PER_HOUR,
        f"{METRIC_PREFIX}wasted_device_h": cost.wasted_s / SECONDS_PER_HOUR,
        f"{METRIC_PREFIX}avoided_device_h": cost.avoided_s / SECONDS_PER_HOUR,
        f"{METRIC_PREFIX}recorded_device_h": cost.recorded_s / SECONDS_PER_HOUR,
        f"{METRIC_PREFIX}wasted_runs": float(sum(cost.wasted.values())),
    }


def device_s_text(seconds: float | None) -> str:
    """A trial's device-seconds in a table cell: ``-`` when it has none (a copy, a skip, not yet told)."""
    return "-" if seconds is None else _seconds(seconds)


def trial_cost_document(record: TrialRecord) -> dict[str, Any] | None:
    """A trial's stored cost, JSON-ready: ``device_s``, ``wall_s``, ``devices``, ``phases_device_s``
    (phase -> device-seconds, adding up to ``device_s``); None when it ran nothing or its cost is unknown."""
    if record.device_s is None or record.cost is None:
        return None
    phases = record.cost.get("phases_device_s")
    return {
        "device_s": record.device_s,
        "wall_s": record.cost.get("wall_s"),
        "devices": record.cost.get("devices"),
        "phases_device_s": dict(phases) if isinstance(phases, Mapping) else {},
    }


def trial_cost_lines(cost: Mapping[str, Any] | None, device: str | None, copy_of: int | None = None) -> list[str]:
    """``tuner show``'s lines for a trial's :func:`trial_cost_document`: device-seconds, devices, wall time
    and the phases (only those that took time)."""
    if cost is None:
        why = (
            f"a copy of trial {copy_of}: it ran nothing (its original's cost counts as avoided)"
            if copy_of is not None
            else "none recorded (it ran nothing, or its coordinator died)"
        )
        return [f"cost: {why}"]
    devices, wall = cost.get("devices"), cost.get("wall_s")
    unit = device_unit(device)
    head = f"cost: {_seconds(cost['device_s'])} device-s ({format_hours(cost['device_s'])} {unit})" + (
        f" = {_seconds(wall)} s wall x {devices} device(s)" if isinstance(wall, (int, float)) else ""
    )
    phases = {k: v for k, v in (cost.get("phases_device_s") or {}).items() if isinstance(v, (int, float)) and v > 0}
    return [head] + [f"  {phase} {_seconds(seconds)} device-s" for phase, seconds in phases.items()]


def export_cost_block(
    cost: StudyCost, device: str | None, chosen: TrialRecord, budget_device_hours: float | None
) -> dict[str, Any]:
    """The export's ``provenance.cost``: what finding this setting cost, at export time: the study's
    used / wasted / avoided / recorded device-hours and the trials in each, the chosen trial's own
    device-seconds, the unit and the device-hour budget (see :class:`tuner.ship.config_schema.CostBlock`)."""
    figures = cost.as_dict()
    return {
        "unit": device_unit(device),
        "device": str(device or "cpu"),
        **{
            key: figures[key]
            for key in (
                "used_device_h",
                "wasted_device_h",
                "avoided_device_h",
                "recorded_device_h",
                "used_trials",
                "wasted_trials",
                "avoided_trials",
                "avoided_estimate",
                "runs_without_cost",
            )
        },
        "recorded_device_s": round(cost.recorded_s, 3),
        "runs": runs_counted(cost),
        "trial_device_s": chosen.device_s,
        "budget_device_hours": budget_device_hours,
    }


def _seconds(value: float) -> str:
    """Device-seconds in words: ``12.3``, ``0.412``, ``1234``."""
    return f"{value:.3g}" if value < 1000 else f"{value:.0f}"
