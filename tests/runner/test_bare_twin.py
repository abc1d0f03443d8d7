"""The bare twin (issue 40, item 1): the same loaded call timed with nothing of the tuner around it, beside
the tuner's measured calls, in the same worker; its ratio says how much of the tuner's figure is the tuner.
Here the plumbing (real worker processes, the simulated asynchronous device, the tiny CPU avatar); the ratios
themselves are measured by ``bench/bare_twin.py``, not asserted by a timed test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.evaluators.runtime.bare_twin import bare_timings, twin_metrics
from tuner.results import Metric, Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.spec.loading import parse_spec


def request(tmp_path: Path, workload: str, settings: dict[str, Any], device: str, **extra: Any) -> TrialRequest:
    return TrialRequest(
        study_name="twin",
        trial_number=0,
        workload_class=workload,
        settings=settings,
        inputs=extra.pop("inputs", {}),
        seed=0,
        device=device,
        measurement={"warmup": 1, "min_repeats": 3, "max_repeats": 3, "bare_twin": 3},
        timeout_s=120.0,
        workdir=str(tmp_path / "trial"),
    )


def test_the_twin_runs_beside_the_measured_calls_on_the_simulated_device(tmp_path: Path) -> None:
    runner = SubprocessRunner(preload=["tuner.testing.simulated_workloads"])
    try:
        result = runner.run(
            request(tmp_path, "tuner.testing.simulated_workloads:SimulatedKernelWorkload", {"kernel_ms": 20}, "cuda"),
            Slot(0, "0", 1),
        )
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    bare, ratio = result.metrics["bare_p50_s"].value, result.metrics["twin_ratio"].value
    assert bare is not None and bare >= 0.019, "the bare call waits for the asynchronous kernel too"
    assert ratio == pytest.approx(result.metrics["latency_p50_s"].value / bare)


def test_the_twin_of_the_tiny_avatar_on_the_cpu(tmp_path: Path) -> None:
    runner = SubprocessRunner()
    try:
        result = runner.run(
            request(
                tmp_path,
                "tuner.workloads.avatar_dit:AvatarDiTWorkload",
                {"infer_frames": 6, "sample_steps": 1, "resolution": 32},
                "cpu",
                inputs={"audio_seconds": 1.0, "fps": 12, "output_size": 32},
            ),
            Slot(0, None, 1),
        )
    finally:
        runner.close()
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    assert (result.metrics["bare_p50_s"].value or 0) > 0 and (result.metrics["twin_ratio"].value or 0) > 0


def test_no_room_for_a_bare_call_is_said_and_a_spec_asks_for_at_most_50() -> None:
    assert bare_timings(lambda: None, lambda: None, 3, deadline=-1.0) == []
    metrics = {m.name: m for m in twin_metrics([], Metric("latency_p50_s", 0.1, "s", "minimize"))}
    assert metrics["twin_ratio"].value is None and "no time left" in str(metrics["twin_ratio"].reason)
    spec = """
name: t
workload: {class: "tuner.workloads.fake:FakeWorkload"}
parameters: {noise: {type: categorical, choices: [0]}}
objectives: [{metric: twin_ratio, direction: minimize}]
measurement: {bare_twin: 51}
budget: {trials: 1}
"""
    with pytest.raises(Exception, match="bare_twin"):
        parse_spec(spec)
