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
from collections.abc import Callable

PHASES = ("startup", "warmup", "measured", "evaluation", "finish", "unattributed")
WORKER_PHASES = PHASES[:-1]  # what a worker can report
INFO_KEY = "phases_s"  # TrialResult.info key: phase -> seconds


class _Marks:
    """The mapping view :func:`~tuner.evaluators.latency.measure_latency` writes: ``marks[phase] = at`` begins
    ``phase`` at ``at`` (seconds on the clock's scale)."""

    def __init__(self, clock: PhaseClock) -> None:
        self._clock = clock

    def __setitem__(self, phase: str, at: float) -> None:
        self._clock.begin(phase, at)


class PhaseClock:
    """Marks when each phase begins; :meth:`seconds` gives each phase's seconds up to now.

    ``clock`` returns seconds (monotonic). A phase lasts until the next one begins; a phase that begins
    again (a trial of several inputs warms up and measures each) adds to its seconds. ``measured`` is
    marked by the latency protocol when a warm-up ends, through :attr:`marks`. Phases never begun last 0 s.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._current = "startup"
        self._since = clock()
        self._totals = dict.fromkeys(WORKER_PHASES, 0.0)
        self.marks = _Marks(self)

    def mark(self, phase: str) -> None:
        """``phase`` (one of :data:`WORKER_PHASES`) begins now."""
        self.begin(phase, self._clock())

    def begin(self, phase: str, at: float) -> None:
        """``phase`` begins at ``at`` (the clock's seconds); the phase running until then is charged to there."""
        if phase not in WORKER_PHASES:
            raise ValueError(f"unknown phase {phase!r}; phases: {WORKER_PHASES}")
        self._totals[self._current] += max(0.0, at - self._since)
        self._current, self._since = phase, max(at, self._since)

    def move(self, seconds: float, source: str, target: str) -> None:
        """Charge ``seconds`` already spent in ``source`` to ``target`` instead (a warm-up call counted as a
        measured repeat once the repeats showed it was one); at most what ``source`` holds."""
        if source not in WORKER_PHASES or target not in WORKER_PHASES:
            raise ValueError(f"unknown phase {source!r} or {target!r}; phases: {WORKER_PHASES}")
        moved = min(max(0.0, seconds), self._totals[source])
        self._totals[source] -= moved
        self._totals[target] += moved

    def seconds(self) -> dict[str, float]:
        """Each worker phase's seconds up to now."""
        totals = dict(self._totals)
        totals[self._current] += max(0.0, self._clock() - self._since)
        return {phase: round(seconds, 6) for phase, seconds in totals.items()}
