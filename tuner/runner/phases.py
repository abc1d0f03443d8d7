"""Where a trial's wall time went: the phases a worker reports with every result.

A worker marks the moment each phase begins (:class:`PhaseClock`); the phases are
consecutive, so their durations add up to the worker's own time. The runner's
``wall_time_s`` is seen from outside (process start to exit, or the warm worker's
round trip) and is larger; :func:`tuner.storage.cost.trial_cost` charges the
difference to ``startup``. Phases, in order (seconds, wall clock):

``startup``     importing the workload and its ``setup`` (the model's load); outside the
                worker: the process start and the interpreter's imports.
``warmup``      the untimed warm-up calls.
``measured``    the timed repeats (when a call fails, the time up to the failure).
``evaluation``  the quality evaluators against the reference output.
``finish``      samples, the saved output, provenance.
``unattributed`` time the worker could not report: it was killed (timeout, OOM kill,
                signal) or died before writing a result. Only the accounting adds it.
"""

from __future__ import annotations

import time
from typing import Callable

PHASES = ("startup", "warmup", "measured", "evaluation", "finish", "unattributed")
WORKER_PHASES = PHASES[:-1]  # what a worker can report
INFO_KEY = "phases_s"  # TrialResult.info key: phase -> seconds


class PhaseClock:
    """Marks when each phase begins; :meth:`seconds` gives each phase's duration up to now.

    ``clock`` returns seconds (monotonic). Marking a phase that has begun already moves its start
    (``measured`` is marked by the latency protocol when the warm-up ends). Phases never marked
    last 0 s.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.marks: dict[str, float] = {"startup": clock()}

    def mark(self, phase: str) -> None:
        """``phase`` (one of :data:`WORKER_PHASES`) begins now."""
        if phase not in WORKER_PHASES:
            raise ValueError(f"unknown phase {phase!r}; phases: {WORKER_PHASES}")
        self.marks[phase] = self._clock()

    def seconds(self) -> dict[str, float]:
        """Each worker phase's seconds up to now (a phase lasts until the next marked one begins)."""
        now = self._clock()
        begun = sorted((at, phase) for phase, at in self.marks.items())
        durations = {phase: 0.0 for phase in WORKER_PHASES}
        for index, (at, phase) in enumerate(begun):
            end = begun[index + 1][0] if index + 1 < len(begun) else now
            durations[phase] = round(max(0.0, end - at), 6)
        return durations
