"""The wall-time budget of one invocation: a promise about when the run ends, not only about when the last
trial may start.

The budget counts from when the invocation started (``tuner run``'s command, before the study was opened)
and keeps ``reserve_s`` seconds for what follows the last trial (closing MLflow, the summary, the export):
the trials' share ends at the *deadline* = start + budget - reserve. A trial starts only when its predicted
duration (:class:`tuner.search.duration.DurationForecast`, from the study's finished runs) ends by the
deadline; the first one that would not stops the invocation, with the prediction in the reason (its
setting is queued again for ``tuner resume``). The reference is never held back (nothing compares without
it); before any run there is nothing to predict from, and only the deadline itself stops a start.

Units: seconds; times are ``time.monotonic()`` readings.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.search.duration import DurationForecast

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial


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
