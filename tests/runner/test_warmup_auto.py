"""Warm up only what is new to the process (issue 38, item 4): ``measurement.warmup: auto`` makes the warm-up
calls a workload that knows its warm-up asks for -- none for a setting already warm -- and counts a warm-up
call as fast as the repeats as one of them; the latency truth holds: a known-answer workload's p50 moves < 2 %
whether the warm-up was skipped, counted or made, while a warm-up wrongly skipped would move it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.measure.warmup import AUTO, floor_of, planned_warmup
from tuner.runner.warm import WarmRunner
from tuner.spec.measure.measurement import MeasurementSpec
from tuner.workloads.base import RunContext, Workload, WorkloadOutput

CALL_S = 0.2  # the known answer: ShapeWarmingWorkload's call once its shape is warm
TRUTH = 0.02  # issue 38: a skipped or counted warm-up moves the p50 by at most 2 %


class _Stub(Workload):
    def __init__(self, needed: int, knows: bool) -> None:
        self.needed, self.knows = needed, knows

    def warmup_calls(self, params: Mapping[str, Any]) -> int:
        return self.needed

    def knows_warmup(self) -> bool:
        return self.knows

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        return WorkloadOutput()


def test_the_planned_warmup_of_each_contract() -> None:
    assert planned_warmup(2, _Stub(0, knows=True), {}) == 2, "an int is a floor, even for a workload that knows"
    assert planned_warmup(1, _Stub(3, knows=False), {}) == 3, "the workload raises it (compiling)"
    assert planned_warmup(None, _Stub(0, knows=False), {}) == 1, "no figure: the protocol's default"
    assert planned_warmup(AUTO, _Stub(0, knows=True), {}) == 0, "auto, known warm: no warm-up"
    assert planned_warmup(AUTO, _Stub(3, knows=True), {}) == 3, "auto, known new: exactly what it needs"
    assert planned_warmup(AUTO, _Stub(0, knows=False), {}) == 1, "auto, a workload that cannot tell: one"
    assert floor_of(AUTO) == 1 and floor_of(4) == 4


def test_the_spec_takes_auto_or_a_count() -> None:
    assert MeasurementSpec(warmup="auto").warmup == "auto"
    assert MeasurementSpec(warmup=0).warmup == 0 and MeasurementSpec().warmup == 1
    for bad in (-1, "sometimes"):
        with pytest.raises(ValidationError):
            MeasurementSpec(warmup=bad)


def _request(tmp_path: Path, number: int, settings: dict[str, Any], warmup: int | str, repeats: int) -> TrialRequest:
    return TrialRequest(
        study_name="warmup_auto",
        trial_number=number,
        workload_class="tuner.workloads.fake:ShapeWarmingWorkload",
        settings={"call_ms": CALL_S * 1000, "first_call_ms": 300, **settings},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": warmup, "min_repeats": repeats, "max_repeats": repeats},
        timeout_s=120.0,
        workdir=str(tmp_path / f"trial_{number}"),
    )


def test_a_skipped_or_counted_warmup_keeps_a_known_answer_p50(tmp_path: Path) -> None:
    runner = WarmRunner()
    try:
        results = [
            runner.run(_request(tmp_path, number, settings, warmup, repeats), Slot(0, None, 1))
            for number, (settings, warmup, repeats) in enumerate(
                [
                    ({"shape": "a"}, AUTO, 5),  # new to the process: warmed up once
                    ({"shape": "a"}, AUTO, 5),  # warm: skipped
                    ({"shape": "a"}, 1, 5),  # warm, made anyway: the spec's int
                    ({"shape": "c", "first_call_ms": 6}, AUTO, 2),  # new, its first call 3 % slower: counted
                    ({"shape": "b", "honest": False}, AUTO, 2),
                ]
            )
        ]  # new, but claimed warm: the control
    finally:
        runner.close()
    for result in results:
        assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    assert [r.info["warmup"] for r in results] == [1, 0, 1, 0, 0]
    assert [r.info["warmup_counted"] for r in results] == [0, 0, 0, 1, 0], "only a first call as fast as the rest"
    assert len({r.info.get("warm_worker_pid") for r in results}) == 1, "one warm process"
    p50 = [float(r.metrics["latency_p50_s"].value) for r in results]
    for value in p50[:4]:
        assert abs(value - CALL_S) / CALL_S < TRUTH, f"p50 {value:.4f} s against the known {CALL_S} s"
    assert abs(p50[1] - p50[0]) / p50[0] < TRUTH and abs(p50[2] - p50[1]) / p50[1] < TRUTH
    assert p50[4] > CALL_S * 1.5, "a warm-up wrongly skipped lands in the timed calls: the check has teeth"
    phases = [r.info["phases_s"] for r in results]
    assert phases[1]["warmup"] < 0.05 < phases[0]["warmup"]
    assert phases[3]["warmup"] < 0.05 and phases[3]["measured"] > 2 * CALL_S, "the counted call is measured time"
    calls = [r.metrics["count_calls"].value for r in results]
    assert results[3].metrics["repeats"].value == 2 and calls[3] - calls[2] == 2, (
        "two samples from two calls: the counted warm-up saved one"
    )
