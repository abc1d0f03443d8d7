"""GPU inventory and fingerprint: no-GPU behaviour here, CUDA_VISIBLE_DEVICES parsing, GPU checks."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tuner import gpu, host

UUIDS = [
    "GPU-aaaa1111-0000-0000-0000-000000000000",
    "GPU-bbbb2222-0000-0000-0000-000000000000",
    "GPU-bbbb3333-0000-0000-0000-000000000000",
    "GPU-cccc4444-0000-0000-0000-000000000000",
]

FINGERPRINT_KEYS = {
    "gpu_type",
    "gpu_name",
    "gpu_count",
    "gpu_memory_gb",
    "driver_version",
    "cuda_driver_version",
    "torch_version",
    "python_version",
    "hostname",
    "cpu_model",
    "cpu_cores",
    "cpu_cores_usable",
    "host_memory_gb",
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("", []),
        ("-1", []),
        ("2", [2]),
        ("2,0", [2, 0]),
        (" 1 , 3 ", [1, 3]),
        ("0,7,1", [0]),  # out of range stops parsing
        ("1,x,2", [1]),  # invalid entry stops parsing
        ("1gpu,2", [1, 2]),  # strtoul-style: leading digits count
        ("1,1", []),  # a repeat hides everything
        ("GPU-cccc4444-0000-0000-0000-000000000000", [3]),
        ("GPU-cccc,GPU-aaaa", [3, 0]),  # unique prefixes
        ("GPU-bbbb,GPU-aaaa", []),  # ambiguous prefix stops at once
        ("GPU-aaaa,GPU-bbbb2222", [0, 1]),
        ("GPU-aaaa,GPU-ffff,GPU-cccc", [0]),  # unknown uuid stops parsing
        ("GPU-aaaa,1", [0]),  # the first entry picks the form
        ("GPU-aaaa,GPU-aaaa1111", []),  # same device twice
        ("MIG-aaaa1111-0000", []),  # MIG entries are not mapped
    ],
)
def test_parse_cuda_visible_devices(value: str | None, expected: list[int]) -> None:
    assert gpu.parse_cuda_visible_devices(value, UUIDS) == expected


def test_parse_cuda_visible_devices_without_devices() -> None:
    assert gpu.parse_cuda_visible_devices(None, []) == []
    assert gpu.parse_cuda_visible_devices("0", []) == []


def test_fingerprint_has_every_key_as_a_string() -> None:
    print_ = gpu.fingerprint()
    assert set(print_) == FINGERPRINT_KEYS
    assert all(isinstance(value, str) and value for value in print_.values())
    assert print_["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert int(print_["cpu_cores"]) >= 1
    assert float(print_["host_memory_gb"]) > 0


def test_fingerprint_does_not_import_torch() -> None:
    code = "import sys; from tuner import gpu; gpu.fingerprint(); print('torch' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert output.strip() == "False"


def test_without_nvml_everything_degrades_honestly() -> None:
    available, reason = gpu.nvml_available()
    if available:
        pytest.skip("NVML works on this machine")
    assert reason  # says why
    assert gpu.list_gpus() == []
    assert gpu.visible_gpu_indices() == []
    assert gpu.gpu_type() == "cpu"
    assert gpu.gpu_memory_gb() is None
    assert gpu.nvml_process_tree_memory_bytes([os.getpid()]) is None
    fingerprint = gpu.fingerprint()
    assert fingerprint["gpu_type"] == "cpu"
    for key in ("gpu_name", "gpu_count", "gpu_memory_gb", "driver_version", "cuda_driver_version"):
        assert fingerprint[key] == f"unavailable ({reason})"


def test_nvml_available_reports_a_reason_only_when_unavailable() -> None:
    available, reason = gpu.nvml_available()
    assert (reason is None) == available


def test_process_tree_pids_includes_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        pids = gpu.process_tree_pids(os.getpid())
        assert pids[0] == os.getpid()
        assert child.pid in pids
        assert gpu.process_tree_pids(child.pid) == [child.pid]
    finally:
        child.kill()
        child.wait(timeout=30)
    assert gpu.process_tree_pids(child.pid) == []


def test_nvml_process_tree_memory_of_no_pids_is_unknown() -> None:
    assert gpu.nvml_process_tree_memory_bytes([]) is None


class FakeProcess:
    def __init__(self, pid: int, used: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used


class FakeNvmlError(Exception):
    pass


class FakeFunctionNotFound(FakeNvmlError):
    pass


class FakePynvml:
    """Two devices; device 1 lacks the _v3 compute list (an older driver)."""

    NVMLError = FakeNvmlError
    NVMLError_FunctionNotFound = FakeFunctionNotFound

    def __init__(self) -> None:
        self.compute = {0: [FakeProcess(10, 100), FakeProcess(11, None)], 1: [FakeProcess(10, 50)]}
        self.graphics = {0: [FakeProcess(10, 100), FakeProcess(12, 7)], 1: []}

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: int) -> list[FakeProcess]:
        if handle == 1:
            raise FakeFunctionNotFound()
        return self.compute[handle]

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: int) -> list[FakeProcess]:
        return self.compute[handle]

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: int) -> list[FakeProcess]:
        return self.graphics[handle]

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: int) -> list[FakeProcess]:
        raise FakeNvmlError("not supported")


def test_tree_memory_sums_devices_dedupes_lists_and_skips_unknown() -> None:
    fake = FakePynvml()
    assert gpu.device_process_memory(fake, 0) == {10: 100, 11: None, 12: 7}
    # pid 10: 100 on device 0 (listed twice, counted once) + 50 on device 1 (via _v2).
    assert gpu.tree_memory_from_handles(fake, [0, 1], [10]) == 150
    assert gpu.tree_memory_from_handles(fake, [0, 1], [10, 11, 12]) == 157
    assert gpu.tree_memory_from_handles(fake, [0, 1], [11]) is None  # usedGpuMemory unknown
    assert gpu.tree_memory_from_handles(fake, [0, 1], [99]) is None


@pytest.mark.gpu
def test_nvml_agrees_with_torch_on_a_gpu_machine() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    available, reason = gpu.nvml_available()
    assert available, reason
    assert len(gpu.visible_gpu_indices()) == torch.cuda.device_count()
    assert gpu.gpu_type() == torch.cuda.get_device_name(0)
    total_gb = torch.cuda.get_device_properties(0).total_memory / 1e9
    assert gpu.gpu_memory_gb() == pytest.approx(total_gb, rel=0.02)
    fingerprint = gpu.fingerprint()
    assert fingerprint["gpu_count"] == str(torch.cuda.device_count())
    assert not fingerprint["driver_version"].startswith("unavailable")


def test_idle_cores_sees_another_process_keeping_a_core_busy() -> None:
    """A real busy-loop process: fewer idle cores than this process may use (at least one always)."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        idle, total = host.idle_cores(1.0)
    finally:
        busy.kill()
        busy.wait(10)
    assert 1 <= idle < total or total == 1
