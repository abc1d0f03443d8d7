"""What lets another trial start (:class:`StartRules`): the trial budget, the device-hour budget, the other hosts,
the wall-time budget (:class:`WallBudget`), an exhausted search space; and the one exception, a dead host's rerun.

**Trials** (``budget_trials``) count trials that ran a workload (reference and baseline included) on every host;
trials running elsewhere hold budget, so coordinators together overshoot by at most the slots in flight.
Rule-rejected, copied and skipped trials do not count. A dead host's trial held a place every host counted:
its rerun is ``owed`` (:func:`tuner.storage.attributes.owed`) and starts even past a budget the live hosts
filled meanwhile -- so a coordinator whose budget is spent stays while a trial runs on another host, until it
ends or is reclaimed. **Device-seconds** (``budget_device_s``) count what the study's runs held
(:mod:`tuner.storage.cost`), the same way. A grid that proposed every setting, or :data:`EXHAUSTED_AFTER`
proposals in a row that needed no run, end the study as exhausted (proposals set aside for a reload still run).

**Wall time**: a promise about when the run ends, not only about when the last trial may start. The budget counts
from when the invocation started (``tuner run``'s command, before the study was opened) and keeps ``reserve_s``
seconds for what follows the last trial (closing MLflow, the summary, the export): the trials' share ends at the
*deadline* = start + budget - reserve. A trial starts only when its predicted duration
(:class:`tuner.search.duration.DurationForecast`, from the study's finished runs) ends by the deadline; the first
one that would not stops the invocation, with the prediction in the reason (its setting is queued again for ``tuner
resume``). The reference is never held back (nothing compares without it); before any run there is nothing to
predict from, and only the deadline itself stops a start.

Units: seconds; times are ``time.monotonic()`` readings.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.search.duration import DurationForecast
from tuner.storage.cost import device_budget_verdict

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from tuner.study.coordinator_state import LoopState
    from tuner.study.shared import SharedView

EXHAUSTED_AFTER = 100
"""Proposals in a row that needed no run (copies, walls, skips) after which the search space counts as exhausted."""


@dataclass
class WallBudget:
    """``limit_s`` seconds from ``started`` (None: no limit), ``reserve_s`` of them kept for the finish."""

    limit_s: float | None
    started: float
    reserve_s: float = 0.0
    refused: str | None = None  # why a trial was not started: no trial starts after it

    @property
    def deadline(self) -> float | None:
        """When (monotonic) the last trial must have ended; None without a limit."""
        if self.limit_s is None:
            return None
        return self.started + max(self.limit_s - self.reserve_s, 0.0)

    def left_s(self, now: float | None = None) -> float | None:
        """Seconds left until :attr:`deadline` (never below 0); None without a limit."""
        deadline = self.deadline
        return None if deadline is None else max(deadline - (time.monotonic() if now is None else now), 0.0)

    def stop_reason(self, now: float | None = None) -> str | None:
        """Why no trial may start now (the deadline passed, or one was refused); None while they may."""
        if self.refused is not None:
            return self.refused
        left = self.left_s(now)
        return "wall time spent" if left is not None and left <= 0 else None

    def admits(
        self,
        number: int,
        params: Mapping[str, Any],
        finished: Sequence[FrozenTrial],
        space: Mapping[str, BaseDistribution],
        now: float | None = None,
    ) -> bool:
        """Whether trial ``number`` of ``params`` is predicted to end by the deadline (True without a limit or a
        prediction); when not, :attr:`refused` says so and no later trial starts either."""
        left = self.left_s(now)
        if left is None:
            return True
        predicted = DurationForecast.fit(finished, space).predict_s(params)
        if predicted is None or predicted <= left:
            return True
        self.refused = (
            f"wall time: trial {number} was predicted to take {predicted:.0f} s, past the "
            f"{self.limit_s:g} s budget ({left:.0f} s left for trials, {self.reserve_s:.0f} s kept to "
            f"finish); its setting is queued for 'tuner resume'"
        )
        return False


@dataclass
class StartRules:
    """Whether another trial may start on this host (see the module docstring); ``sampler``: the study's (a grid's
    ``exhausted`` says it proposed every setting)."""

    budget_trials: int | None
    budget_device_s: float | None
    wall: WallBudget
    sampler: Any

    def asks_over(self, state: LoopState) -> bool:
        """Whether asking again is pointless: the grid proposed every setting, or the last proposals all needed no
        run (:data:`EXHAUSTED_AFTER`)."""
        return bool(getattr(self.sampler, "exhausted", False)) or state.idle_proposals >= EXHAUSTED_AFTER

    def may_start(self, state: LoopState, view: SharedView) -> bool:
        """Whether another trial may start now; when not, why (``state.blocked``: other hosts may still free the
        way; ``state.stopped``: the study stops)."""
        if self._trial_budget_spent(state, view):
            state.blocked = view.running_elsewhere > 0  # others may fail (a place frees) or die (their rerun is owed)
        elif self.device_budget_spent(state, view):
            pass
        elif view.exclusive_elsewhere or view.reference_pending_elsewhere:
            state.blocked = True  # the reference or baseline runs alone on another host
        elif self.wall.stop_reason() is not None:
            state.stopped = self.wall.stop_reason() or ""
        elif self.asks_over(state) and not state.order.aside:  # those set aside still run
            state.stopped = (
                "grid exhausted: every setting was proposed"
                if getattr(self.sampler, "exhausted", False)
                else f"search space exhausted ({EXHAUSTED_AFTER} proposals in a row needed no run)"
            )
        else:
            return True
        return False

    def device_budget_spent(self, state: LoopState, view: SharedView) -> bool:
        """Whether the device-hour budget stops new trials (:func:`~tuner.storage.cost.device_budget_verdict`)."""
        verdict = self._device_verdict(state, view)
        if verdict == "wait":
            state.blocked = not state.inflight
        elif verdict is not None:
            state.stopped = verdict
        return verdict is not None

    def owed_may_start(self, state: LoopState, view: SharedView, stopping: bool) -> bool:
        """Whether a dead host's rerun may start past a spent trial budget: it waits oldest (the next ask gets it,
        ``view.owed_next``), a slot is free, and nothing but the trial budget stops new trials."""
        if not view.owed_next or state.held is not None or not state.free_slots:
            return False
        if stopping or state.exclusive or view.exclusive_elsewhere or view.reference_pending_elsewhere:
            return False
        spent = self._trial_budget_spent(state, view)
        return spent and self._device_verdict(state, view) is None and self.wall.stop_reason() is None

    def _trial_budget_spent(self, state: LoopState, view: SharedView) -> bool:
        """Whether the trial budget (every host's measured and running trials) lets no other trial start."""
        total = self.budget_trials
        return total is not None and (state.remaining(total, view.measured, view.running_elsewhere) or 0) <= 0

    def _device_verdict(self, state: LoopState, view: SharedView) -> str | None:
        running = len(state.inflight) + view.running_elsewhere
        return device_budget_verdict(self.budget_device_s, view.spent_device_s, running, view.median_run_device_s)
