"""The latency predicted as a call's once-per-call phases plus the rest (issue 38, item 2: the structure where
the workload reports it). A prefill that grows with frames x pixels plus a decoding that grows with tokens x beams
is a sum of two products: each part is a line in the log features, their sum is not."""

from __future__ import annotations

import random
import statistics
from typing import Any

import numpy as np
import optuna
import pytest

from tuner.search.fitting.split_latency import REST_FLOOR, split_parts
from tuner.search.prediction import LATENCY, OutcomePredictor
from tuner.spec.loading import parse_spec
from tuner.spec.space import distributions

SPEC = """
name: split
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 60}
parameters:
  frames: {type: categorical, choices: [2, 4, 8, 16, 32]}
  pixels: {type: categorical, choices: [6272, 12544, 25088, 50176]}
  max_new_tokens: {type: categorical, choices: [4, 8, 16, 32, 64, 128]}
  num_beams: {type: categorical, choices: [1, 2, 4]}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: peak_rss_gb, direction: minimize}
measurement: {warmup: 0, min_repeats: 3, max_repeats: 3}
budget: {trials: 10}
sampler: {name: random}
seed: 3
"""


def prefill_s(params: dict[str, Any]) -> float:
    return 0.002 + 1e-7 * params["frames"] * params["pixels"]


def decode_s(params: dict[str, Any]) -> float:
    return 0.004 * params["max_new_tokens"] * params["num_beams"]


def finished(params: dict[str, Any], number: int, phases: bool, series: bool = True) -> optuna.trial.FrozenTrial:
    """A measured run; ``phases``: it reports its prefill, and (``series``) its median decoding step, from which
    the predictor also derives its neighbours along max_new_tokens (tuner.search.fitting.count_neighbours)."""
    latency = prefill_s(params) + decode_s(params)
    metrics: dict[str, Any] = {LATENCY: {"value": latency, "unit": "s"}, "peak_rss_gb": {"value": 0.5, "unit": "GB"}}
    if phases:
        metrics["prefill_s"] = {"value": prefill_s(params), "unit": "s"}
        if series:
            metrics["decode_token_s"] = {"value": 0.004 * params["num_beams"], "unit": "s"}
    trial = optuna.trial.create_trial(
        params=params,
        distributions=distributions(parse_spec(SPEC)),
        values=[latency, 0.5],
        user_attrs={"measured": True, "outcome": "OK", "metrics": metrics},
    )
    trial.number = number
    return trial


def settings(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    space = parse_spec(SPEC).parameters
    return [{name: rng.choice(p.choices) for name, p in space.items()} for _ in range(count)]  # type: ignore[union-attr]


def median_error(predictor: OutcomePredictor, unseen: list[dict[str, Any]]) -> float:
    errors = []
    for params in unseen:
        predicted = predictor.predict(params)[LATENCY]
        errors.append(abs((prefill_s(params) + decode_s(params)) / predicted.value - 1.0))
    return statistics.median(errors)


def test_a_sum_of_two_products_is_predicted_by_its_parts() -> None:
    spec = parse_spec(SPEC)
    seen, unseen = settings(24, seed=0), settings(60, seed=1)
    split = OutcomePredictor(spec, distributions(spec))
    split.update([finished(params, number, phases=True) for number, params in enumerate(seen)])
    plain = OutcomePredictor(spec, distributions(spec))
    plain.update([finished(params, number, phases=False) for number, params in enumerate(seen)])
    split_error, plain_error = median_error(split, unseen), median_error(plain, unseen)
    assert split_error < 0.03, f"each part is a product: its line carries it ({split_error:.1%})"
    assert split_error < plain_error / 2, f"one line through the sum bends ({split_error:.1%} vs {plain_error:.1%})"
    predicted = split.predict(unseen[0])[LATENCY]
    assert predicted.low <= predicted.value <= predicted.high and predicted.fitted_on == 24
    rows = split.centres(np.asarray([split_row(spec, p) for p in unseen[:5]]))[LATENCY]
    assert list(rows) == pytest.approx([split.predict(p)[LATENCY].value for p in unseen[:5]], rel=1e-9)


def split_row(spec: Any, params: dict[str, Any]) -> list[float]:
    from tuner.search.prediction import setting_features

    return setting_features(params, distributions(spec), prior=False)


def test_a_run_without_phases_keeps_the_plain_model() -> None:
    """The split needs every run's phases (both parts fitted on the same runs); one run without them (a workload
    that stopped reporting, an older trial) keeps the plain model, whose predictions stand. (No series reported:
    runs derived from it would change the plain model's fit too.)"""
    spec = parse_spec(SPEC)
    seen = settings(12, seed=2)
    mixed = OutcomePredictor(spec, distributions(spec))
    mixed.update([finished(params, number, phases=number != 5, series=False) for number, params in enumerate(seen)])
    plain = OutcomePredictor(spec, distributions(spec))
    plain.update([finished(params, number, phases=False) for number, params in enumerate(seen)])
    probe = settings(1, seed=3)[0]
    assert mixed.predict(probe)[LATENCY].value == pytest.approx(plain.predict(probe)[LATENCY].value, rel=1e-12)


def test_the_parts_of_a_call() -> None:
    figures = {"text_s": {"value": 0.1}, "decode_s": {"value": 0.2}, "denoise_s": {"value": 0.6}}
    once, rest = split_parts(1.0, figures)  # type: ignore[misc]
    assert (once, rest) == (pytest.approx(0.3), pytest.approx(0.7)), "the loop is the rest, not a once-phase"
    assert split_parts(1.0, {"decode_token_s": {"value": 0.01}}) is None, "a per-token figure is not a phase"
    assert split_parts(0.25, {"prefill_s": {"value": 0.3}}) == (0.3, pytest.approx(REST_FLOOR * 0.25))
    assert split_parts(1.0, {"prefill_s": {"value": None, "reason": "not reported"}}) is None
