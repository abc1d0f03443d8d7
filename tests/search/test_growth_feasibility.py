"""The memory model's kept frontier and evidence give the answers of a scan of every observation (issue 27).

:class:`tuner.search.feasibility.FeasibilityModel` keeps, as observations arrive, the fitting local measurements
no other fitting one is costlier than, and the local OOMs and limited peaks, so that a prediction does not scan the
whole study. Here its predictions (skip, reason, predicted peak, witness) are compared with a from-scratch scan of
every observation — the model's rules as written in its module docstring — on random studies of ordered, unordered
and no-effect parameters, with OOMs, peaks past the limit and a warm-start prior.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tuner.search.feasibility import FeasibilityModel, Observation, Prediction
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec

SPEC = """\
name: memory_growth
workload: {class: "tuner.workloads.fake:FakeWorkload"}
parameters:
  frames: {type: int, low: 8, high: 64, step: 8}
  size: {type: categorical, choices: ["256*256", "512*512", "768*768"]}
  chunks: {type: categorical, choices: [1, 2, 4], memory: decreases}
  mode: {type: categorical, choices: [fast, exact]}
  steps: {type: int, low: 1, high: 50, memory: none}
objectives:
  - {metric: latency_p50_s, direction: minimize}
constraints:
  - {metric: peak_vram_gb, max: "0.85 * gpu_memory_gb"}
budget: {trials: 4}
"""
LIMIT_GB = 0.85 * 48.0


def random_setting(rng: random.Random) -> dict[str, Any]:
    return {
        "frames": rng.choice(range(8, 65, 8)),
        "size": rng.choice(["256*256", "512*512", "768*768"]),
        "chunks": rng.choice([1, 2, 4]),
        "mode": rng.choice(["fast", "exact"]),
        "steps": rng.randint(1, 50),
    }


def random_observation(rng: random.Random, number: int, source: str = "local") -> Observation:
    params = random_setting(rng)
    if rng.random() < 0.1:
        return Observation(params, {}, True, source, number)
    cost = params["frames"] * {"256*256": 1, "512*512": 4, "768*768": 9}[params["size"]] / params["chunks"]
    peaks = {"peak_vram_gb": cost * rng.uniform(0.05, 0.25)} if rng.random() < 0.9 else {}
    return Observation(params, peaks, False, source, number)


def scan(
    model: FeasibilityModel, local: list[Observation], prior: list[Observation], params: dict[str, Any]
) -> Prediction:
    """The model's rules over every observation, from scratch (what it answered before it kept a frontier): the
    witnesses found by a full scan, judged by the model's own :meth:`FeasibilityModel.verdict`."""
    live = [
        w for w in prior if not any(model.within_limits(u) and model.no_costlier(w.params, u.params) for u in local)
    ]
    if any(model.within_limits(u) and model.no_costlier(params, u.params) for u in local):
        return Prediction(False)
    return model.verdict([w for w in (*local, *live) if model.no_costlier(w.params, params)])


@pytest.mark.parametrize("seed", range(6))
def test_predictions_equal_a_scan_of_every_observation(seed: int) -> None:
    rng = random.Random(seed)
    spec = parse_spec(SPEC)
    prior = [random_observation(rng, n, "warm_start:h100") for n in range(rng.randint(0, 15))]
    model = FeasibilityModel(spec, plan_constraints(spec, {"gpu_memory_gb": 48.0}), prior)
    assert model.limits == {"peak_vram_gb": LIMIT_GB}
    local: list[Observation] = []
    skipped = 0
    for number in range(150):
        for _ in range(5):
            params = random_setting(rng)
            kept, scanned = model.predict(params), scan(model, local, prior, params)
            assert kept == scanned, (seed, number, params)
            skipped += kept.skip
        observation = random_observation(rng, number)
        model.observe(observation)
        local.append(observation)
        assert model.live_prior() == [
            w for w in prior if not any(model.within_limits(u) and model.no_costlier(w.params, u.params) for u in local)
        ]
    assert 0 < skipped < 150 * 5, "both verdicts were compared"


def test_the_frontier_stays_small_when_one_parameter_grows() -> None:
    """A study of one ordered parameter: the frontier is the costliest fitting setting, whatever the study size."""
    spec = parse_spec(SPEC)
    model = FeasibilityModel(spec, plan_constraints(spec, {"gpu_memory_gb": 48.0}))
    for number in range(2000):
        model.observe(
            Observation(
                {"frames": 8 + number % 57, "size": "256*256", "chunks": 1, "mode": "fast", "steps": number % 50 + 1},
                {"peak_vram_gb": 1.0},
                False,
                "local",
                number,
            )
        )
    assert len(model._frontier) == 1 and model.observations == 2000
