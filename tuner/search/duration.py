"""How long a setting's run will likely take, before it runs: what the wall-time budget is checked against.

A wall-time budget is a promise about the whole run, so the coordinator starts no trial that its
predicted duration would carry past the budget (:mod:`tuner.study.budgets`). The prediction,
in seconds of wall time seen from outside the worker (the ``wall_s`` of the run's recorded
``cost``, :mod:`tuner.storage.cost`; the worker's own ``wall_time_s`` for a run recorded without it):

* with at least :data:`MIN_MODEL_RUNS` measured OK runs, the cost model of the cost-aware sampler
  (:class:`tuner.search.cost_aware.CostModel`: log seconds ridge-linear in the parameters) fitted on
  those wall times, times a safety margin: the largest factor by which the model under-predicted one
  of the runs it was fitted on, at least :data:`MIN_MARGIN` (a budget is a promise: an estimate too
  low breaks it, one too high only leaves a trial out);
* before that, the longest run so far (the reference, the costliest setting of most specs, runs first);
* before any run: no prediction (the reference must run whatever it costs).

Never more than the trial's own time limit: a run that reaches it is killed. Units: seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome
from tuner.search.cost_aware import CostModel
from tuner.storage.attributes import cost_of, is_measured, outcome_of, wall_time_s_of

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

MIN_MODEL_RUNS = 3
"""Measured OK runs before the model predicts (fewer: the longest run so far)."""

MIN_MARGIN = 1.25
"""The smallest safety factor on the model's prediction."""

RIDGE = 0.1
"""The model's L2 penalty: small, so that a costlier setting is predicted costlier from a few runs."""


def run_wall_s(trial: FrozenTrial) -> float | None:
    """Seconds the run of ``trial`` held its slot (its recorded ``cost.wall_s``, else the worker's wall time);
    None when it ran nothing or recorded neither."""
    if not is_measured(trial):
        return None
    cost = cost_of(trial)
    wall = cost.get("wall_s") if isinstance(cost, Mapping) else None
    if wall is None:
        wall = wall_time_s_of(trial)
    return float(wall) if isinstance(wall, (int, float)) and wall > 0 else None


@dataclass(frozen=True)
class DurationForecast:
    """A run's predicted wall time from a study's finished runs (see the module docstring)."""

    model: CostModel | None
    margin: float
    longest_s: float | None
    runs: int

    @staticmethod
    def fit(trials: Sequence[FrozenTrial], space: Mapping[str, BaseDistribution]) -> DurationForecast:
        """The forecast from ``trials`` (finished ones; the rest are ignored) over the parameters ``space``."""
        ok = [t for t in trials if outcome_of(t) == Outcome.OK.value and run_wall_s(t) is not None]
        walls = [run_wall_s(t) or 0.0 for t in ok]
        longest = max(walls) if walls else None
        model = (
            CostModel.fit(ok, space, ridge=RIDGE, seconds_of=run_wall_s, min_runs=MIN_MODEL_RUNS)
            if space and len(ok) >= MIN_MODEL_RUNS
            else None
        )
        margin = MIN_MARGIN
        if model is not None:
            for trial, wall in zip(ok, walls):
                if all(name in trial.params for name in space):
                    margin = max(margin, wall / model.predict_s(trial.params))
        return DurationForecast(model, margin, longest, len(ok))

    def predict_s(self, params: Mapping[str, Any], timeout_s: float | None = None) -> float | None:
        """Seconds a run of ``params`` will likely hold its slot (at most ``timeout_s``, its time limit, when
        given); None before any run."""
        predicted: float | None = self.longest_s
        if self.model is not None and all(name in params for name in self.model.space):
            predicted = self.model.predict_s(params) * self.margin
        if predicted is None or not math.isfinite(predicted):
            return None
        return min(predicted, timeout_s) if timeout_s is not None else predicted
