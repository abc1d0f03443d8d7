"""What a replayed trial would have cost: a SIMULATED run's wall time and phases, from a measured table.

A replay runs nothing, so its trials' device-seconds are modelled from what the table and the
host measured (one device per slot, so device-seconds = seconds):

* ``startup`` — the table's measured per-trial start-up (process start, imports, the model's
  load), ``trial_overhead_s.startup`` in the table's JSON sidecar (written by
  ``bench/tables/measure_overhead.py`` from real trials' recorded phases);
* ``warmup`` — the spec's ``measurement.warmup`` calls (``auto``: one) at the setting's ``latency_p50_s``;
* ``measured`` — the spec's ``measurement.min_repeats`` timed calls at ``latency_p50_s`` (a real
  trial may repeat more until its CV converges: not modelled, the same for every method);
* ``evaluation`` — the sidecar's ``trial_overhead_s.evaluation`` (the quality evaluators);
* an OOM (recorded, or the peak over the declared cap): start-up and one call; a CRASH, INVALID
  or a setting not in the table: start-up only.

A warm python workload with ``reload_on`` (the Wan and Omni tables) reloads its model only when those values
change: where the sidecar's samples show both kinds of run, ``startup`` is the median start-up of the runs
that kept the loaded model and ``reload_s`` that of the runs whose ``reload_on`` values differed from the run
before (a slot's first run loads too); the runner says which a replayed run is
(:class:`~tuner.replay.runner.ReplayRunner` keeps each slot's loaded values). Otherwise every run is charged
the median start-up over all samples, as before.

A table whose sidecar has no ``trial_overhead_s`` models start-up and evaluation as 0 s:
:func:`overhead_note` says so, and the bench prints it. The note also gives the sidecar's
``calls_vs_model`` when present: how much more the measuring script's real trials spent on their
calls than this model's call term (a check, never applied).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.replay.table import MeasuredRow, MeasuredTable
from tuner.results import Outcome, TrialResult
from tuner.runner.measure.warmup import floor_of
from tuner.spec.search.reload import reload_values, reloads_on

OVERHEAD_KEY = "trial_overhead_s"


@dataclass(frozen=True)
class ReplayCostModel:
    """Seconds of each phase of a replayed trial (see the module docstring)."""

    startup_s: float
    evaluation_s: float
    warmup_calls: int
    repeats: int
    measured_overhead: bool  # False: start-up and evaluation are not measured for this table (0 s)
    reload_s: float | None = None  # start-up of a run that loads the model; None: reloads not modelled
    reload_on: tuple[str, ...] = ()  # the parameters whose change reloads (a warm python workload's)

    @staticmethod
    def of(table: MeasuredTable) -> ReplayCostModel:
        overhead = table.sidecar.get(OVERHEAD_KEY)
        measured = isinstance(overhead, Mapping)
        startup = float(overhead.get("startup", 0.0)) if measured else 0.0  # type: ignore[union-attr]
        evaluation = float(overhead.get("evaluation", 0.0)) if measured else 0.0  # type: ignore[union-attr]
        measurement = table.spec.measurement
        warmup = floor_of(measurement.warmup)  # ``auto``: one call, as for a setting new to the process
        reload_on = reloads_on(table.spec)
        split = reload_split(overhead.get("samples") or [], reload_on) if measured and reload_on else None  # type: ignore[union-attr]
        if split is None:
            return ReplayCostModel(startup, evaluation, warmup, measurement.min_repeats, measured)
        kept, reloaded = split
        return ReplayCostModel(kept, evaluation, warmup, measurement.min_repeats, measured, reloaded, reload_on)

    def reloads(self, loaded: tuple[Any, ...] | None, settings: Mapping[str, Any]) -> tuple[bool, tuple[Any, ...]]:
        """Whether a run of ``settings`` on a slot whose model has ``loaded`` values (None: none yet) reloads,
        and the values loaded after it."""
        values = reload_values(self.reload_on, settings)
        return loaded != values, values

    def phases(
        self, row: MeasuredRow | None, result: TrialResult, repeats: int | None = None, reloaded: bool = True
    ) -> dict[str, float]:
        """Seconds per phase of the replayed ``result`` of ``row`` (see the module docstring); ``repeats``: the
        timed calls when fewer than the spec's were made (repeats stopped past a latency ceiling, or settled);
        ``reloaded``: whether the run loaded the model (its start-up is then ``reload_s``, where modelled)."""
        latency = (row.values.get("latency_p50_s") if row is not None else None) or 0.0
        startup = self.reload_s if reloaded and self.reload_s is not None else self.startup_s
        if result.outcome is Outcome.OK:
            return {
                "startup": startup,
                "warmup": self.warmup_calls * latency,
                "measured": (self.repeats if repeats is None else repeats) * latency,
                "evaluation": self.evaluation_s,
                "finish": 0.0,
            }
        if result.outcome is Outcome.OOM:
            return {"startup": startup, "warmup": latency, "measured": 0.0, "evaluation": 0.0, "finish": 0.0}
        return {"startup": startup, "warmup": 0.0, "measured": 0.0, "evaluation": 0.0, "finish": 0.0}

    def trial_seconds(self, row: MeasuredRow | None, result: TrialResult, reloaded: bool = True) -> float:
        """The replayed trial's modelled wall time in seconds (``reloaded``: see :meth:`phases`)."""
        return sum(self.phases(row, result, reloaded=reloaded).values())


def reload_split(samples: Sequence[Mapping[str, Any]], reload_on: tuple[str, ...]) -> tuple[float, float] | None:
    """The median start-up (s) of the OK samples after the first that kept the loaded model, and of those whose
    ``reload_on`` values differ from the sample before (the list is in run order); None unless both occur."""
    kept: list[float] = []
    reloaded: list[float] = []
    previous: tuple[Any, ...] | None = None
    for index, sample in enumerate(samples):
        values = reload_values(reload_on, sample.get("settings") or {})
        startup = (sample.get("phases_s") or {}).get("startup")
        if index > 0 and sample.get("outcome") == "OK" and isinstance(startup, (int, float)):
            (reloaded if values != previous else kept).append(float(startup))
        previous = values
    if not kept or not reloaded:
        return None
    return statistics.median(kept), statistics.median(reloaded)


def overhead_note(table: MeasuredTable) -> str:
    """One line on how the table's per-trial start-up and evaluation are modelled."""
    model = ReplayCostModel.of(table)
    if not model.measured_overhead:
        return (
            f"{table.hardware.label}: no measured per-trial start-up / evaluation ({OVERHEAD_KEY} missing from "
            "the sidecar): modelled as 0 s; costs are the calls' only"
        )
    overhead: Mapping[str, Any] = table.sidecar.get(OVERHEAD_KEY, {})
    where, check = overhead.get("source", "the sidecar"), overhead.get("calls_vs_model")
    checked = (
        f"; the real trials measured there spent {check:.3g} x that on their calls (a fresh process, repeats "
        f"until the CV converges; not modelled)"
        if isinstance(check, (int, float))
        else ""
    )
    reloads = (
        f" ({model.reload_s:.3g} s for a run that loads the model: the first, or a change of "
        f"{', '.join(model.reload_on)})"
        if model.reload_s is not None
        else ""
    )
    return (
        f"{table.hardware.label}: per trial start-up {model.startup_s:.3g} s{reloads} + evaluation "
        f"{model.evaluation_s:.3g} s "
        f"(measured: {where}) + ({model.warmup_calls} warm-up + {model.repeats} timed calls) x latency_p50_s"
        f"{checked}"
    )
