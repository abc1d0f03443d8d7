"""The wall-time budget keeps its word (issue 41): no trial starts that its predicted duration would carry past
the budget; the prediction comes from the study's own runs (:mod:`tuner.search.duration`).

Times are given to the budget (``now``), never read from a clock: nothing here depends on how fast it runs.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution

from tuner.search.duration import MIN_MARGIN, DurationForecast
from tuner.storage import attributes as names
from tuner.study.budgets import WallBudget

SPACE = {"steps": IntDistribution(1, 8), "resolution": CategoricalDistribution([32, 48, 64])}


def run(steps: int, resolution: int, wall_s: float, outcome: str = "OK") -> optuna.trial.FrozenTrial:
    """A finished measured run that held its slot ``wall_s`` seconds."""
    attrs: dict[str, Any] = {
        names.MEASURED: True,
        names.OUTCOME: outcome,
        names.COST: {"device_s": wall_s, "wall_s": wall_s, "devices": 1},
    }
    return optuna.trial.create_trial(
        params={"steps": steps, "resolution": resolution}, distributions=SPACE, values=[1.0], user_attrs=attrs
    )


# The demo's shape: an expensive reference (all-high), then cheap settings; cost grows with steps x pixels.
RUNS = [run(8, 64, 83.0), run(4, 48, 12.0), run(1, 32, 4.0), run(2, 32, 6.0), run(1, 64, 8.0)]


def test_before_any_run_nothing_is_predicted_then_the_longest_run_stands_in() -> None:
    assert DurationForecast.fit([], SPACE).predict_s({"steps": 1, "resolution": 32}) is None
    assert DurationForecast.fit(RUNS[:2], SPACE).predict_s({"steps": 1, "resolution": 32}) == 83.0
    failed = run(8, 64, 200.0, outcome="CRASH")
    assert DurationForecast.fit([*RUNS[:2], failed], SPACE).predict_s({"steps": 1, "resolution": 32}) == 83.0


def test_the_model_predicts_costly_settings_costly_and_never_below_what_it_was_fitted_on() -> None:
    forecast = DurationForecast.fit(RUNS, SPACE)
    assert forecast.model is not None and forecast.margin >= MIN_MARGIN
    for trial in RUNS:
        assert forecast.predict_s(trial.params) >= trial.user_attrs[names.COST]["wall_s"], trial.params
    cheap, costly = (
        forecast.predict_s({"steps": 1, "resolution": 32}),
        forecast.predict_s({"steps": 8, "resolution": 64}),
    )
    assert cheap is not None and costly is not None and costly > 5 * cheap
    assert forecast.predict_s({"steps": 8, "resolution": 64}, timeout_s=30.0) == 30.0, "a run ends at its limit"


def test_a_trial_that_would_end_past_the_budget_does_not_start_and_none_after_it() -> None:
    budget = WallBudget(limit_s=270.0, started=1000.0, reserve_s=10.0)
    assert budget.deadline == 1260.0 and budget.left_s(now=1100.0) == 160.0
    assert budget.admits(5, {"steps": 1, "resolution": 32}, RUNS, SPACE, now=1100.0)
    assert budget.stop_reason(now=1100.0) is None
    assert not budget.admits(6, {"steps": 8, "resolution": 64}, RUNS, SPACE, now=1200.0)
    assert budget.refused is not None and budget.refused.startswith("wall time: trial 6 was predicted to take")
    assert "270 s budget" in budget.refused and "tuner resume" in budget.refused
    assert budget.stop_reason(now=1200.0) == budget.refused, "once refused, no later trial starts"


def test_past_the_deadline_nothing_starts_and_without_a_limit_everything_may() -> None:
    budget = WallBudget(limit_s=100.0, started=0.0, reserve_s=10.0)
    assert budget.stop_reason(now=95.0) == "wall time spent"
    unlimited = WallBudget(limit_s=None, started=0.0)
    assert unlimited.deadline is None and unlimited.left_s(now=1e9) is None
    assert unlimited.admits(3, {"steps": 8, "resolution": 64}, RUNS, SPACE, now=1e9)
    assert unlimited.stop_reason(now=1e9) is None
