"""ReplayRunner: the table's record comes back as the TrialResult, nothing runs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from replay_fixtures import write_tiny_table

from tuner.replay.runner import ReplayRunner
from tuner.replay.table import load_hardware_types, load_table
from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest


def request(tmp_path: Path, number: int, **settings) -> TrialRequest:
    workdir = tmp_path / f"trial_{number}"
    workdir.mkdir(parents=True, exist_ok=True)
    return TrialRequest(
        study_name="s",
        trial_number=number,
        workload_class="tuner.workloads.fake:FakeWorkload",
        settings={"mode": "a", **settings, "derived_value": 1},
        inputs={},
        seed=0,
        device="cpu",
        measurement={},
        timeout_s=10,
        workdir=str(workdir),
    )


def runner(tmp_path: Path, **options) -> ReplayRunner:
    return ReplayRunner(load_table(load_hardware_types(write_tiny_table(tmp_path / "t", **options))["tiny:cpu1t"]))


def test_it_returns_the_recorded_metrics(tmp_path: Path) -> None:
    replay = runner(tmp_path)
    result = replay.run(request(tmp_path, 1, steps=2, res=32, fast=False), Slot(0, None, 1))
    assert result.outcome is Outcome.OK
    assert result.metric_value("latency_p50_s") == pytest.approx(0.1)
    assert result.metric_value("stlpips_alex") == pytest.approx(0.25)
    assert result.metric_value("psnr_db") == pytest.approx(20)
    disk_gb = result.metric_value("trial_disk_gb")
    assert disk_gb is not None and disk_gb < 1e-3  # the empty trial directory
    assert "simulated" in result.info and replay.runs == 1


def test_over_the_cap_is_oom_and_a_missing_setting_a_crash(tmp_path: Path) -> None:
    replay = runner(tmp_path, missing=({"steps": 2, "res": 32, "fast": True},))
    oom = replay.run(request(tmp_path, 1, steps=3, res=64, fast=False), Slot(0, None, 1))
    missing = replay.run(request(tmp_path, 2, steps=2, res=32, fast=True), Slot(0, None, 1))
    assert oom.outcome is Outcome.OOM and "measured peak 1.3 GB > declared cap 1.25 GB" in (oom.reason or "")
    assert missing.outcome is Outcome.CRASH and missing.reason == "replayed: not in table"
    assert replay.runs == 2


def test_it_never_raises_and_counts_runs_from_many_threads(tmp_path: Path) -> None:
    replay = runner(tmp_path)
    broken = request(tmp_path, 1, steps=2, res=32)  # "fast" missing: the lookup cannot find it
    requests = [request(tmp_path, n, steps=1 + n % 4, res=32, fast=bool(n % 2)) for n in range(40)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda r: replay.run(r, Slot(0, None, 1)), [*requests, broken]))
    assert results[-1].outcome is Outcome.CRASH
    assert replay.runs == 41
    assert {r.outcome for r in results[:-1]} <= {Outcome.OK, Outcome.CRASH}
