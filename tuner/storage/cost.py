"""What tuning cost, in device-seconds: per trial, and summed per study by what it bought.

**Per trial** (:func:`trial_cost`, stored as the trial attribute ``cost`` when a run's result is
told): ``device_s`` = the runner's wall time (seconds, process start to exit as seen from
outside) × the devices of the slot it held (the GPUs of ``gpu:0,1`` = 2; a CPU slot counts as
one device), split by phase (:mod:`tuner.runner.measure.phases`): ``startup`` (process start, imports,
the model's load, teardown: what the worker's phases leave of the wall time), ``warmup``,
``measured``, ``evaluation``, ``finish``, and ``unattributed`` (a worker killed or dead before
it reported). The phases add up to ``device_s``.

**Per study** (:func:`study_cost`), every trial in one of three sums:

* ``used``: runs measured OK (constraint-violating ones too: they were measured);
* ``wasted``: runs that started and ended OOM, TIMEOUT, CRASH or INVALID (the workload refused
  the setting after starting), and runs given back (interrupted) whose time is known;
* ``avoided`` (an estimate, never part of the recorded total): a copy of a measured setting
  (exactly its original's ``device_s``), a setting skipped as a predicted OOM (the median
  ``device_s`` of the study's OOM runs, or of all its runs while it has none), a setting a rule
  refused and one skipped as predicted dominated (the median of all runs). :attr:`StudyCost.avoided_estimate` says which medians.

``used_s + wasted_s`` is exactly the sum of the trials' recorded ``device_s``
(:attr:`StudyCost.recorded_s`). A trial whose coordinator died (reclaimed as stale) has no
result and so no recorded cost: :attr:`StudyCost.unknown` counts them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.results import Outcome, TrialResult
from tuner.runner.measure.phases import INFO_KEY, PHASES

SECONDS_PER_HOUR = 3600.0
WASTED_OUTCOMES = (Outcome.OOM.value, Outcome.TIMEOUT.value, Outcome.CRASH.value, Outcome.INVALID.value, "INTERRUPTED")


def slot_devices(slot_label: str | None) -> int:
    """The devices a slot holds: the GPUs listed in ``gpu:<ids>`` (``gpu:0,1`` -> 2); 1 for a CPU slot."""
    if slot_label and slot_label.startswith("gpu:"):
        ids = [part for part in slot_label[4:].split(",") if part.strip()]
        return max(len(ids), 1)
    return 1


def trial_cost(result: TrialResult, slot_label: str | None) -> dict[str, Any]:
    """The ``cost`` attribute of a run: ``device_s``, ``wall_s``, ``devices`` and ``phases_device_s``
    (phase -> device-seconds, adding up to ``device_s``; see the module docstring)."""
    devices = slot_devices(slot_label)
    wall = max(float(result.wall_time_s or 0.0), 0.0)
    reported = result.info.get(INFO_KEY) if isinstance(result.info, Mapping) else None
    phases = dict.fromkeys(PHASES, 0.0)
    if isinstance(reported, Mapping) and reported:
        worker = {p: max(float(reported.get(p) or 0.0), 0.0) for p in PHASES[:-1]}
        inside = sum(worker.values())
        scale = wall / inside if inside > wall > 0 else 1.0  # clocks differ by a hair: never more than the wall
        phases.update({p: s * scale for p, s in worker.items()})
        phases["startup"] += max(wall - inside * scale, 0.0)  # process start, imports, teardown
    else:
        phases["unattributed"] = wall  # killed, timed out, or died before reporting
    return {
        "device_s": round(wall * devices, 6),
        "wall_s": round(wall, 6),
        "devices": devices,
        "phases_device_s": {p: round(s * devices, 6) for p, s in phases.items()},
    }


def device_budget_s(device_hours: Any) -> float | None:
    """A stored ``budget_device_hours`` in device-seconds; None when absent or not a positive number."""
    if isinstance(device_hours, (int, float)) and not isinstance(device_hours, bool) and device_hours > 0:
        return float(device_hours) * SECONDS_PER_HOUR
    return None


def device_budget_verdict(
    budget_s: float | None, spent_s: float, running: int, median_run_s: float | None
) -> str | None:
    """Whether a device budget of ``budget_s`` device-seconds lets another trial start: None (yes),
    ``"wait"`` (only the ``running`` runs, counted at the median run's cost, would spend it: they may end
    under it) or why the study stops (``spent_s`` reached the budget). Overshoot: at most the runs in
    flight when it was reached, one trial's cost on one slot."""
    if budget_s is None:
        return None
    if spent_s >= budget_s:
        return (
            f"device-hour budget spent ({spent_s / SECONDS_PER_HOUR:.3g} of "
            f"{budget_s / SECONDS_PER_HOUR:g} device-hours)"
        )
    if running and spent_s + running * (median_run_s or 0.0) >= budget_s:
        return "wait"
    return None


def device_s_of(cost: Any) -> float | None:
    """The ``device_s`` of a stored ``cost`` attribute; None when absent or malformed."""
    if isinstance(cost, Mapping):
        value = cost.get("device_s")
        if isinstance(value, (int, float)) and value >= 0:
            return float(value)
    return None


@dataclass(frozen=True)
class CostedTrial:
    """What :func:`study_cost` needs of one stored trial (see :meth:`tuner.storage.records.TrialRecord.costed`)."""

    number: int
    outcome: str
    measured: bool
    duplicate_of: int | None
    cost: Mapping[str, Any] | None


@dataclass(frozen=True)
class StudyCost:
    """A study's device-seconds by what they bought (see the module docstring). Seconds throughout;
    :meth:`hours` converts. ``counts``: trials in each sum by outcome (``copy`` for copies)."""

    used_s: float = 0.0
    wasted_s: float = 0.0
    avoided_s: float = 0.0
    used: Mapping[str, int] = field(default_factory=dict)
    wasted: Mapping[str, int] = field(default_factory=dict)
    avoided: Mapping[str, int] = field(default_factory=dict)
    phases_s: Mapping[str, float] = field(default_factory=dict)
    avoided_estimate: str = ""
    unknown: int = 0  # runs without a recorded cost (their coordinator died)

    @property
    def recorded_s(self) -> float:
        """Device-seconds the study's runs held: ``used_s + wasted_s``."""
        return self.used_s + self.wasted_s

    @staticmethod
    def hours(seconds: float) -> float:
        return seconds / SECONDS_PER_HOUR

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: hours and seconds of each sum, the counts, the phases and the estimate's rule."""
        return {
            "used_device_h": round(self.hours(self.used_s), 6),
            "wasted_device_h": round(self.hours(self.wasted_s), 6),
            "avoided_device_h": round(self.hours(self.avoided_s), 6),
            "recorded_device_h": round(self.hours(self.recorded_s), 6),
            "used_device_s": round(self.used_s, 3),
            "wasted_device_s": round(self.wasted_s, 3),
            "avoided_device_s": round(self.avoided_s, 3),
            "used_trials": dict(self.used),
            "wasted_trials": dict(self.wasted),
            "avoided_trials": dict(self.avoided),
            "phases_device_s": {k: round(v, 3) for k, v in self.phases_s.items()},
            "avoided_estimate": self.avoided_estimate,
            "runs_without_cost": self.unknown,
        }


def study_cost(trials: Sequence[CostedTrial]) -> StudyCost:
    """Sum ``trials`` into used / wasted / avoided (see the module docstring)."""
    costs = {t.number: device_s_of(t.cost) for t in trials}
    runs = [t for t in trials if costs[t.number] is not None and t.duplicate_of is None]
    used = [t for t in runs if t.outcome == Outcome.OK.value]
    wasted = [t for t in runs if t.outcome in WASTED_OUTCOMES]
    all_median = _median([costs[t.number] for t in runs])
    oom_median = _median([costs[t.number] for t in runs if t.outcome == Outcome.OOM.value])
    avoided_s, avoided = 0.0, dict[str, int]()
    for trial in trials:
        kind, estimate = _avoided(trial, costs, all_median, oom_median)
        if kind is not None:
            avoided[kind] = avoided.get(kind, 0) + 1
            avoided_s += estimate
    phases = dict.fromkeys(PHASES, 0.0)
    for trial in [*used, *wasted]:
        for phase, seconds in ((trial.cost or {}).get("phases_device_s") or {}).items():
            if phase in phases and isinstance(seconds, (int, float)):
                phases[phase] += float(seconds)
    unknown = sum(1 for t in trials if t.measured and costs[t.number] is None and t.duplicate_of is None)
    return StudyCost(
        used_s=sum(costs[t.number] or 0.0 for t in used),
        wasted_s=sum(costs[t.number] or 0.0 for t in wasted),
        avoided_s=avoided_s,
        used=_count(used),
        wasted=_count(wasted),
        avoided=avoided,
        phases_s=phases,
        avoided_estimate=_estimate_rule(avoided, runs, all_median, oom_median),
        unknown=unknown,
    )


def _avoided(
    trial: CostedTrial, costs: Mapping[int, float | None], all_median: float | None, oom_median: float | None
) -> tuple[str | None, float]:
    """(kind, estimated device-seconds) of a trial that avoided a run; (None, 0) for any other."""
    if trial.duplicate_of is not None:
        return "copy", costs.get(trial.duplicate_of) or 0.0
    if trial.outcome == Outcome.SKIPPED_PREDICTED_OOM.value:
        estimate = oom_median if oom_median is not None else all_median
        return "predicted OOM", estimate or 0.0
    if trial.outcome == Outcome.SKIPPED_PREDICTED_DOMINATED.value:
        return "predicted dominated", all_median or 0.0
    if trial.outcome == Outcome.INVALID.value and not trial.measured:
        return "refused by rules", all_median or 0.0
    return None, 0.0


def _estimate_rule(
    avoided: Mapping[str, int], runs: Sequence[CostedTrial], all_median: float | None, oom_median: float | None
) -> str:
    """How the avoided sum was estimated, in one line (empty when nothing was avoided)."""
    if not avoided:
        return ""
    parts = []
    if avoided.get("copy"):
        parts.append("a copy: its original's recorded cost")
    if avoided.get("predicted OOM"):
        parts.append(
            f"a predicted OOM: the median OOM run ({oom_median:.3g} device-s)"
            if oom_median is not None
            else f"a predicted OOM: the median run ({all_median or 0:.3g} device-s; no OOM run yet)"
        )
    for kind, words in (
        ("refused by rules", "a refused setting"),
        ("predicted dominated", "a predicted-dominated one"),
    ):
        if avoided.get(kind):
            parts.append(f"{words}: the median run ({all_median or 0:.3g} device-s of {len(runs)} runs)")
    return "; ".join(parts)


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _count(trials: Sequence[CostedTrial]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.outcome] = counts.get(trial.outcome, 0) + 1
    return counts


def device_unit(device: str | None) -> str:
    """The unit views print: ``GPU-h`` for a CUDA study, ``CPU-h`` (CPU-slot hours) otherwise."""
    return "GPU-h" if device == "cuda" else "CPU-h"


def format_hours(seconds: float) -> str:
    """Device-seconds as hours, at most three significant digits in plain decimals at any size:
    ``0.0000495`` / ``0.01`` / ``1.25`` / ``130``."""
    hours = seconds / SECONDS_PER_HOUR
    if hours <= 0:
        return "0"
    if hours >= 100:
        return f"{hours:.0f}"
    text = f"{hours:.{max(0, 2 - math.floor(math.log10(hours)))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def summary_line(cost: StudyCost, device: str | None, budget_device_hours: float | None = None) -> str:
    """One line: used / wasted / avoided in the study's device unit, with counts and the budget."""
    unit = device_unit(device)
    wasted = ", ".join(f"{n} {o}" for o, n in sorted(cost.wasted.items()))
    avoided = ", ".join(f"{n} {k}" for k, n in sorted(cost.avoided.items()))
    line = (
        f"{unit}: used {format_hours(cost.used_s)} ({sum(cost.used.values())} runs OK), "
        f"wasted {format_hours(cost.wasted_s)}{f' ({wasted})' if wasted else ''}, "
        f"avoided ~{format_hours(cost.avoided_s)}{f' ({avoided})' if avoided else ''}"
    )
    if budget_device_hours is not None:
        line += f"; budget {budget_device_hours:g} {unit}"
    return line
