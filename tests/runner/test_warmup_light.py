"""A lighter warm-up (issue 38, item 4): a workload that can warm a new shape with a cheaper call
(:meth:`tuner.workloads.base.Workload.warmup_settings`: one denoising step instead of many) gets its warm-up
calls made with it. Latency truth: a known-answer workload's p50 after the one-step warm-up is within 2 % of
the known answer and of the p50 after a full warm-up; the one-step warm-up served 1 step, not the setting's 5;
the trial records what the warm-up changed; a light warm-up is never counted as a repeat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.evaluators.latency import LatencySettings, measure_latency
from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.measure.warmup import AUTO
from tuner.runner.warm import WarmRunner

STEP_S = 0.05  # ShapeWarmingWorkload sleeps this per step once its shape is warm
STEPS = 5
TRUTH = 0.02  # issue 38: how far a warm-up choice may move a known-answer p50


def _request(tmp_path: Path, number: int, settings: dict[str, Any]) -> TrialRequest:
    return TrialRequest(
        study_name="warmup_light",
        trial_number=number,
        workload_class="tuner.workloads.fake:ShapeWarmingWorkload",
        settings={"call_ms": STEP_S * 1000, "first_call_ms": 300, "steps": STEPS, **settings},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": AUTO, "min_repeats": 4, "max_repeats": 4},
        timeout_s=120.0,
        workdir=str(tmp_path / f"trial_{number}"),
    )


def test_a_one_step_warmup_warms_the_shape_and_keeps_the_known_answer(tmp_path: Path) -> None:
    runner = WarmRunner()
    try:
        results = [
            runner.run(_request(tmp_path, number, settings), Slot(0, None, 1))
            for number, settings in enumerate(
                [
                    {"shape": "full"},  # new shape, the warm-up is the call itself
                    {"shape": "light", "light": True},  # new shape, warmed by one step
                ]
            )
        ]
    finally:
        runner.close()
    for result in results:
        assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    known = STEP_S * STEPS
    p50 = [float(r.metrics["latency_p50_s"].value) for r in results]
    for value in p50:
        assert abs(value - known) / known < TRUTH, f"p50 {value:.4f} s against the known {known} s"
    assert abs(p50[1] - p50[0]) / p50[0] < TRUTH, "the light warm-up times as the full one does"
    assert [r.info["warmup"] for r in results] == [1, 1], "each new shape warmed once"
    assert [r.info["warmup_counted"] for r in results] == [0, 0], "a first call 300 ms slower is never a repeat"
    assert "warmup_with" not in results[0].info
    assert results[1].info["warmup_with"] == {"steps": 1}, "the trial says what its warm-up changed"
    served = [r.metrics["count_steps_served"].value for r in results]
    assert served[0] == (1 + 4) * STEPS, "full: a 5-step warm-up and four 5-step repeats"
    assert served[1] - served[0] == 1 + 4 * STEPS, "light: a 1-step warm-up, then the same four repeats"


def test_a_light_warmup_as_fast_as_the_repeats_is_still_not_a_repeat() -> None:
    """Its output is another setting's: under ``auto`` a full warm-up as fast as the repeats counts as one of
    them, a light one never does (a fake clock: every call takes 1 s)."""
    now = [0.0]

    def clock() -> float:
        return now[0]

    def call() -> str:
        now[0] += 1.0
        return "full"

    def light() -> str:
        now[0] += 1.0
        return "light"

    settings = LatencySettings(warmup=1, min_repeats=2, max_repeats=2, count_warmup_within=0.04)
    counted, _ = measure_latency(call, lambda: None, settings, clock=clock)
    stats, last = measure_latency(call, lambda: None, settings, clock=clock, warmup_call=light)
    assert counted.warmup_counted and counted.warmup == 0, "the full warm-up, as fast, counted: one call saved"
    assert not stats.warmup_counted and stats.samples_s == (1.0, 1.0) and stats.warmup == 1, "two more calls"
    assert last == "full", "the value returned is the timed call's"
