"""Intervals that hold what they claim (issue 38, item 2): a prediction's interval reaches at least the study's own
recorded errors out of sample -- each trial's recorded prediction against its measurement -- not only the
held-out errors of the runs fitted, which understate the error at settings the sampler asks next."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
import pytest

from tuner.search.fitting.recorded_errors import MIN_ERRORS, WINDOW, RecordedErrors
from tuner.search.prediction import LATENCY, OutcomePredictor
from tuner.spec.loading import parse_spec
from tuner.spec.space import distributions

SPEC = """
name: recorded
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 60}
parameters:
  sleep_s: {type: float, low: 0.004, high: 0.04, log: true}
  frames: {type: int, low: 2, high: 16}
objectives:
  - {metric: latency_p50_s, direction: minimize}
measurement: {warmup: 0, min_repeats: 3, max_repeats: 3}
budget: {trials: 10}
sampler: {name: random}
"""


def latency(value: float) -> dict[str, Any]:
    return {LATENCY: {"value": value, "unit": "s"}}


def test_half_width_is_the_coverage_quantile_of_the_latest_absolute_log_errors() -> None:
    errors = RecordedErrors(0.8)
    ratios = [1.1, 0.8, 1.3, 0.95, 1.02, 0.7, 1.25, 1.05]
    for count, ratio in enumerate(ratios, start=1):
        errors.add({LATENCY: {"value": 2.0, "low": 1.9, "high": 2.1}}, latency(2.0 * ratio))
        expected = None if count < MIN_ERRORS else float(np.quantile(np.abs(np.log(ratios[:count])), 0.8))
        assert errors.half_width(LATENCY) == pytest.approx(expected), f"after {count} errors"
    assert errors.half_width("peak_rss_gb") is None, "a metric never predicted"


def test_only_the_latest_window_counts_and_unusable_records_are_left_out() -> None:
    errors = RecordedErrors(0.8)
    for _ in range(10):  # old, large errors (a model fitted on few runs)
        errors.add({LATENCY: {"value": 1.0}}, latency(3.0))
    for _ in range(WINDOW):
        errors.add({LATENCY: {"value": 1.0}}, latency(1.05))
    errors.add({LATENCY: {"value": 0.0}}, latency(1.0))  # no ratio to a zero prediction
    errors.add({LATENCY: {"value": 1.0}}, {})  # not measured
    errors.add(None, latency(5.0))  # ran without a prediction
    errors.add({LATENCY: {"value": float("nan")}}, latency(5.0))
    assert errors.half_width(LATENCY) == pytest.approx(math.log(1.05))


def test_an_interval_widens_never_narrows_and_a_quality_keeps_its_own_scale() -> None:
    errors = RecordedErrors(0.8, linear={"text_f1"})
    for measured in (0.5, 0.7, 0.6, 0.4):
        errors.add({"text_f1": {"value": 0.6}}, {"text_f1": {"value": measured}})
    width = errors.half_width("text_f1")
    assert width == pytest.approx(float(np.quantile([0.1, 0.1, 0.0, 0.2], 0.8)))
    assert errors.widened("text_f1", 0.5, 0.45, 0.9) == pytest.approx((0.5 - width, 0.9))
    assert errors.widened(LATENCY, 0.0, -0.1, 0.1) == (-0.1, 0.1), "no record: the interval as it was"
    with pytest.raises(ValueError, match="coverage"):
        RecordedErrors(1.0)


def finished(
    spec_text: str, params: dict[str, Any], measured: float, predicted: float | None
) -> optuna.trial.FrozenTrial:
    attrs: dict[str, Any] = {"measured": True, "outcome": "OK", "metrics": latency(measured)}
    if predicted is not None:
        attrs["prediction"] = {LATENCY: {"value": predicted, "low": predicted, "high": predicted, "fitted_on": 3}}
    return optuna.trial.create_trial(
        params=params, distributions=distributions(parse_spec(spec_text)), values=[measured], user_attrs=attrs
    )


def test_a_study_whose_predictions_missed_by_half_gets_intervals_that_wide() -> None:
    """The runs are a clean product (the fit's held-out errors are tiny), but each was recorded as predicted 1.5x
    off: the next interval reaches the recorded miss either side. A warm start's trials (another GPU type) and
    their records do not count."""
    spec = parse_spec(SPEC)

    def cost(sleep_s: float, frames: int) -> float:
        return 0.5 * sleep_s * frames

    grid = [(0.004, 2), (0.04, 16), (0.01, 4), (0.02, 8), (0.008, 12), (0.03, 3), (0.006, 10), (0.015, 5)]
    unseen = {"sleep_s": 0.012, "frames": 7}
    plain = OutcomePredictor(spec, distributions(spec))
    plain.update([finished(SPEC, {"sleep_s": s, "frames": f}, cost(s, f), None) for s, f in grid])
    narrow = plain.predict(unseen)[LATENCY]
    assert narrow.high / narrow.value < 1.2, "a clean product: the held-out errors alone give a narrow interval"

    prior = [finished(SPEC, {"sleep_s": s, "frames": f}, cost(s, f), cost(s, f) * 5) for s, f in grid]
    recorded = OutcomePredictor(spec, distributions(spec), prior=prior)
    own = [finished(SPEC, {"sleep_s": s, "frames": f}, cost(s, f), cost(s, f) / 1.5) for s, f in grid]
    recorded.update(own)
    wide = recorded.predict(unseen)[LATENCY]
    assert wide.value == pytest.approx(narrow.value, rel=0.05), "the centre is the model's, unchanged"
    assert wide.high / wide.value == pytest.approx(1.5, rel=1e-6) and wide.low / wide.value == pytest.approx(1 / 1.5)
