"""Runner paths that only a GPU exercised, run in real worker processes on the simulated device.

Each worker process gets its own :class:`tuner.testing.simulated_cuda.SimulatedCudaDevice`
(installed by the workload's ``setup``), kept across a warm worker's trials like a
real CUDA context and cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner, slot_environment
from tuner.runner.warm import WarmRunner

WORKLOAD = "tuner.testing.simulated_workloads:SimulatedKernelWorkload"
MIB_IN_GB = 2**20 / 1e9


def _request(tmp_path: Path, number: int, settings: dict[str, Any], **measurement: Any) -> TrialRequest:
    return TrialRequest(
        study_name="simulated_cuda",
        trial_number=number,
        workload_class=WORKLOAD,
        settings=settings,
        inputs={},
        seed=0,
        device="cuda",
        measurement={"warmup": 1, "min_repeats": 2, "max_repeats": 2, **measurement},
        timeout_s=60.0,
        workdir=str(tmp_path / f"t{number}"),
    )


def _run(runner: Runner, request: TrialRequest, slot: Slot) -> TrialResult:
    result = runner.run(request, slot)
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-2000:])
    return result


def _gb(result: TrialResult, name: str) -> float:
    value = result.metrics[name].value
    assert value is not None, (name, result.metrics[name])
    return value


def test_warm_worker_peaks_are_each_trials_own(tmp_path: Path) -> None:
    """A large trial, then a small one, in one warm worker: the small trial's reserved, NVML-like and
    device peaks are its own, not the cache the large one left (returned between trials)."""
    runner = WarmRunner()
    slot = Slot(0, "0", 1)
    try:
        large = _run(runner, _request(tmp_path, 1, {"kernel_ms": 5, "activations_mb": 4000, "weights_mb": 200}), slot)
        pid = runner.worker_pid(slot)
        small = _run(runner, _request(tmp_path, 2, {"kernel_ms": 5, "activations_mb": 500, "weights_mb": 200}), slot)
        assert runner.worker_pid(slot) == pid, "both trials ran in one warm worker"
    finally:
        runner.close()
    assert _gb(large, "peak_vram_reserved_gb") == pytest.approx(4200 * MIB_IN_GB, rel=0.01)
    assert _gb(small, "peak_vram_reserved_gb") == pytest.approx(700 * MIB_IN_GB, rel=0.01)
    assert _gb(small, "peak_vram_nvml_gb") < 0.5 * _gb(large, "peak_vram_nvml_gb")
    assert _gb(small, "peak_vram_device_gb") == _gb(small, "peak_vram_nvml_gb")
    assert _gb(small, "peak_vram_gb") == pytest.approx(700 * MIB_IN_GB, rel=0.01)


def test_fork_server_that_initialised_cuda_refuses_to_fork_trials(tmp_path: Path) -> None:
    """A preloaded warm-up that touches CUDA: every trial is a CRASH naming it (a forked child could
    not use CUDA), not a failure somewhere inside CUDA."""
    runner = SubprocessRunner(preload=["tuner.testing.simulated_workloads:initialise_in_this_process"])
    try:
        result = runner.run(_request(tmp_path, 1, {"kernel_ms": 5}), Slot(0, "0", 1))
    finally:
        runner.close()
    assert result.outcome is Outcome.CRASH
    assert "fork server initialised CUDA while preloading" in str(result.reason)
    assert "initialise_in_this_process" in str(result.reason)


def test_a_clean_fork_server_runs_the_same_trial(tmp_path: Path) -> None:
    runner = SubprocessRunner(preload=["tuner.testing.simulated_workloads"])
    try:
        result = _run(runner, _request(tmp_path, 1, {"kernel_ms": 5, "activations_mb": 64}), Slot(0, "0", 1))
    finally:
        runner.close()
    assert _gb(result, "latency_p50_s") >= 0.005


def test_the_slot_counts_gpus_in_pci_order_and_the_trial_records_what_it_saw(tmp_path: Path) -> None:
    assert slot_environment(Slot(0, "1", 1), {"PATH": "/usr/bin"})["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    runner = SubprocessRunner(launcher="exec")
    try:
        result = _run(runner, _request(tmp_path, 1, {"kernel_ms": 5}), Slot(0, "1", 1))
    finally:
        runner.close()
    used = result.info["device_used"]
    assert used["cuda_visible_devices"] == "1" and used["cuda_device_order"] == "PCI_BUS_ID"
    assert used["nvml_indices"] == [], "no NVML here: no device was seen holding the trial's memory"
    assert "torch_device" in used["unavailable"], "torch did not initialise CUDA in this worker"


def test_memory_sampler_can_be_turned_off_per_study(tmp_path: Path) -> None:
    runner = SubprocessRunner()
    try:
        result = _run(
            runner, _request(tmp_path, 1, {"kernel_ms": 5, "activations_mb": 100}, memory_sample_hz=0), Slot(0, "0", 1)
        )
    finally:
        runner.close()
    assert result.metrics["memory_samples"].value == 0
    assert "memory_sample_hz: 0" in str(result.metrics["peak_vram_nvml_gb"].reason)
    assert _gb(result, "peak_vram_device_gb") == _gb(result, "peak_vram_reserved_gb")


def test_a_simulated_device_oom_is_an_oom(tmp_path: Path) -> None:
    runner = SubprocessRunner()
    try:
        result = runner.run(_request(tmp_path, 1, {"kernel_ms": 5, "activations_mb": 200_000}), Slot(0, "0", 1))
    finally:
        runner.close()
    assert result.outcome is Outcome.OOM, (result.reason, result.log_tail[-1000:])
    assert "out of memory" in str(result.reason)
