"""ReplayRunner: SIMULATED runs — each trial's result is looked up in a measured table, nothing runs.

It serves the search-efficiency benchmark (``bench/search_efficiency.py``): the real coordinator,
samplers and storage replay a study against an exhaustive table in seconds. What a result holds
is :func:`tuner.replay.table.replayed_result`: the recorded outcome and metrics; OOM when the
recorded peak host memory is above the hardware type's declared cap; CRASH ("not in table") for
a setting the table lacks (a table still being measured). A request with a latency ceiling that the row's
latency passes (by :data:`~tuner.evaluators.latency.CEILING_MARGIN`) is modelled as the worker would run it:
one timed call, ``past_ceiling`` in its info; one with latency thresholds none of which lies within that margin of
the row's latency, as settled after :data:`~tuner.evaluators.latency.SETTLE_MIN_SAMPLES` timed calls (where the
spec asks more), ``settled`` in its info. Its ``wall_time_s`` and phases are MODELLED
(:mod:`tuner.replay.cost_model`, a run that changes the slot's ``reload_on`` values charged a reload): what the
trial would have held the device, so the study's
cost accounting (:mod:`tuner.storage.cost`) applies to a replay unchanged.

Runner contract (:mod:`tuner.runner.base`), the parts that apply: ``run`` never raises (a lookup
error becomes CRASH with the reason), may be called from several threads at once (the table is
read-only; the run counter takes a lock), and touches no storage. No process is started, so
there is nothing to kill: ``close`` is a no-op. ``trial_disk_gb`` is measured on the trial
directory the coordinator created (:func:`~tuner.runner.base.with_trial_disk_usage`), as for a
real run — a replay writes nothing there, so it is the empty directory's size.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner.evaluators.latency import CEILING_MARGIN, SETTLE_MIN_SAMPLES
from tuner.replay.cost_model import ReplayCostModel
from tuner.replay.table import MeasuredTable
from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest, with_trial_disk_usage
from tuner.runner.measure.phases import INFO_KEY


class ReplayRunner(Runner):
    """Replays ``table``'s recorded results (simulated runs); :attr:`runs` counts the requests served."""

    def __init__(self, table: MeasuredTable) -> None:
        self.table = table
        self.runs = 0
        self.cost_model = ReplayCostModel.of(table)
        self._lock = threading.Lock()
        self._loaded: dict[int, tuple[Any, ...]] = {}  # slot index -> the reload_on values its model has

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        with self._lock:
            self.runs += 1
            reloaded, self._loaded[slot.index] = self.cost_model.reloads(self._loaded.get(slot.index), request.settings)
        row = None
        try:
            row = self.table.lookup(request.settings)
            result = self.table.result(request.settings)
        except Exception as error:  # noqa: BLE001 - the contract: never raise
            result = TrialResult(Outcome.CRASH, reason=f"replay failed: {type(error).__name__}: {error}")
        latency = (row.values.get("latency_p50_s") if row is not None else None) or 0.0
        ceiling = request.latency_ceiling_s
        past = ceiling is not None and result.outcome is Outcome.OK and latency > ceiling * (1 + CEILING_MARGIN)
        settled = (
            not past
            and result.outcome is Outcome.OK
            and bool(request.latency_thresholds_s)
            and self.cost_model.repeats > SETTLE_MIN_SAMPLES
            and not any(abs(t - latency) <= CEILING_MARGIN * latency for t in request.latency_thresholds_s)
        )
        repeats = 1 if past else SETTLE_MIN_SAMPLES if settled else None
        phases = self.cost_model.phases(row, result, repeats=repeats, reloaded=reloaded)
        info = {
            **result.info,
            **({"past_ceiling": f"repeats stopped: {latency:.4g} s past the ceiling {ceiling:.4g} s"} if past else {}),
            **(
                {"settled": f"repeats stopped settled: {latency:.4g} s, no front latency within 5 %"} if settled else {}
            ),
            "replayed_from": str(self.table.hardware.table_path),
            INFO_KEY: phases,
            "simulated": "values replayed from a measured table; nothing ran; wall time and phases modelled "
            "(tuner.replay.cost_model)",
        }
        result = replace(result, info=info, wall_time_s=sum(phases.values()))
        return with_trial_disk_usage(result, Path(request.workdir))
