"""The warm runner passes the runner conformance suite; the python adapter loads once across trials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner
from tuner.runner.warm import WarmRunner
from tuner.spec.adapters import PythonSpec
from tuner.testing.runner_conformance import ISOLATION_CASES, RUNNER_CASES, RunnerCase, check_runner_case, make_request
from tuner.testing.runner_conformance import RUNNER_CASES as CASES

AVQA_INPUTS = {"question_set": "heldout", "num_questions": 2, "first_question": 0, "clip_seconds": 4.0}
AVQA_PARAMS = {
    "video_fps": 2.0,
    "max_frames": 8,
    "audio_sample_rate": 16000,
    "max_audio_seconds": 4.0,
    "max_new_tokens": 6,
    "num_beams": 1,
    "use_cache": True,
    "batch_size": 1,
    "precision": "fp32",
}


@pytest.fixture(scope="module")
def warm() -> Any:
    runner = WarmRunner()
    yield runner
    runner.close()


@pytest.mark.parametrize("case", RUNNER_CASES + ISOLATION_CASES, ids=lambda c: c.name)
def test_warm_runner_conformance(case: RunnerCase, warm: WarmRunner, tmp_path: Path) -> None:
    check_runner_case(warm, case, tmp_path)


def test_warm_runner_keeps_one_process_and_replaces_it_after_a_crash(warm: WarmRunner, tmp_path: Path) -> None:
    ok = CASES[0]
    first = warm.run(make_request(ok, tmp_path / "a"), Slot(0, None, 1))
    second = warm.run(make_request(ok, tmp_path / "b"), Slot(0, None, 1))
    assert first.info["warm_worker_pid"] == second.info["warm_worker_pid"]
    crash = next(c for c in RUNNER_CASES if c.name == "raise")
    failed = warm.run(make_request(crash, tmp_path / "c"), Slot(0, None, 1))
    assert failed.outcome is Outcome.CRASH and failed.info.get("warm_worker_restarted")
    third = warm.run(make_request(ok, tmp_path / "d"), Slot(0, None, 1))
    assert third.outcome is Outcome.OK and third.info["warm_worker_pid"] != first.info["warm_worker_pid"]
    assert (tmp_path / "d" / "worker.log").exists()


def avqa_request(tmp_path: Path, number: int, load_log: Path, **params: Any) -> TrialRequest:
    block = PythonSpec(
        factory="standins.avqa_factory:make_avqa_model",
        kwargs={"load_log": str(load_log), "workdir": str(tmp_path)},
        reload_on=["precision"],
    )
    return TrialRequest(
        study_name="warm",
        trial_number=number,
        workload_class="tuner.adapters.python:PythonAdapterWorkload",
        settings={**AVQA_PARAMS, **params},
        inputs=AVQA_INPUTS,
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=300,
        workdir=str(tmp_path / f"trial_{number}"),
        quality_metrics=[],
        workload_options={"adapter": "python", **block.model_dump(mode="json")},
    )


def test_warm_python_worker_runs_ten_trials_with_one_load(tmp_path: Path) -> None:
    load_log = tmp_path / "loads.txt"
    runner = WarmRunner()
    try:
        results = [
            runner.run(
                avqa_request(tmp_path, n, load_log, max_new_tokens=[2, 4, 6][n % 3], num_beams=[1, 3][n % 2]),
                Slot(0, None, 1),
            )
            for n in range(10)
        ]
        assert all(r.outcome is Outcome.OK for r in results), [(r.reason, r.log_tail[-500:]) for r in results]
        assert len(load_log.read_text().splitlines()) == 1, "ten trials, one load"
        assert {r.metrics["count_adapter_loads"].value for r in results} == {1.0}
        assert len({r.info["warm_worker_pid"] for r in results}) == 1
        assert all(r.metrics["latency_p50_s"].available and r.metrics["peak_rss_gb"].available for r in results)
        assert all(r.invocation and r.invocation["target"] == "standins.avqa_factory:make_avqa_model" for r in results)
        changed = runner.run(avqa_request(tmp_path, 10, load_log, precision="bf16"), Slot(0, None, 1))
        assert changed.outcome is Outcome.OK, changed.reason
        assert len(load_log.read_text().splitlines()) == 2, "a reload_on parameter changed: one more load"
    finally:
        runner.close()


def test_fresh_processes_load_for_every_trial(tmp_path: Path) -> None:
    load_log = tmp_path / "loads.txt"
    runner = SubprocessRunner(launcher="exec")
    try:
        for n in range(2):
            result = runner.run(avqa_request(tmp_path, n, load_log), Slot(0, None, 1))
            assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-800:])
    finally:
        runner.close()
    assert len(load_log.read_text().splitlines()) == 2
