"""Peak GPU memory of a command's process tree counts torchrun's ranks (NVML faked at its boundary only).

The processes are real (the torchrun stand-in and two ranks); only the driver's
per-process memory list is simulated, because this machine has no NVIDIA driver.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from adapter_helpers import STANDINS

from tuner import gpu
from tuner.evaluators.memory import ProcessTreeSampler

GIB = 2**30


@dataclass
class SimulatedNvmlProcess:
    pid: int
    usedGpuMemory: int | None


class SimulatedNvmlError(Exception):
    pass


class SimulatedPynvml:
    """Stands in for ``pynvml`` on one device: every live process running ``rank.py`` holds 1 GiB."""

    NVMLError = SimulatedNvmlError
    NVMLError_FunctionNotFound = SimulatedNvmlError

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: int) -> list[SimulatedNvmlProcess]:
        found = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            cmdline = process.info.get("cmdline") or []
            if len(cmdline) > 1 and cmdline[1].endswith("rank.py"):
                found.append(SimulatedNvmlProcess(process.info["pid"], GIB))
        return found

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: int) -> list[SimulatedNvmlProcess]:
        return []

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: int) -> list[SimulatedNvmlProcess]:
        return []


def test_nvml_peak_of_a_command_tree_counts_every_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_import_pynvml", lambda: SimulatedPynvml())
    rank = tmp_path / "rank.py"
    rank.write_text("import time\ntime.sleep(1.5)\n")
    launcher = subprocess.Popen(
        [sys.executable, str(STANDINS / "torchrun_standin.py"), "--nproc_per_node", "3", str(rank)]
    )
    try:
        with ProcessTreeSampler(launcher.pid, sample_hz=50) as sampler:
            assert launcher.wait(timeout=60) == 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert sampler.nvml_reason is None
    assert sampler.peak_nvml_bytes == 3 * GIB, "the three ranks under the launcher are all counted"
