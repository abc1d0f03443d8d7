"""GPU inventory, the machine's fingerprint and process-tree GPU memory, all no-GPU safe.

Everything here talks to the NVIDIA driver through NVML (``pynvml``, from the
``nvidia-ml-py`` package), which is imported lazily; torch is never imported. On
a machine without a driver every function degrades to an honest answer: no GPUs,
``gpu_type() == "cpu"``, ``None`` for memory, and ``"unavailable (<reason>)"``
strings in the fingerprint.

Units: memory in GB means 1e9 bytes (decimal gigabytes), the same unit that
:mod:`tuner.evaluators.memory` reports.

Indices: NVML numbers devices by PCI order and ignores ``CUDA_VISIBLE_DEVICES``;
CUDA (and torch) number only the visible devices. :func:`visible_gpu_indices`
maps one to the other the way torch does, so "visible GPU 0" here is the device
a worker sees as ``cuda:0``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil

from tuner.errors import HostError
from tuner.host import BYTES_PER_GB, host_fingerprint, unavailable

# Per-process GPU memory lists, newest NVML function first (older drivers lack _v3).
_PROCESS_LIST_FUNCTIONS: tuple[tuple[str, ...], ...] = (
    ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"),
    ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2"),
    ("nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2"),
)


class NvmlUnavailable(HostError, RuntimeError):
    """NVML cannot be used here; ``str(error)`` is the human-readable reason."""


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as NVML sees it.

    ``index`` is the NVML index (PCI order, ignores ``CUDA_VISIBLE_DEVICES``);
    ``memory_total_gb`` is total device memory in GB (1e9 bytes); ``uuid`` is
    NVML's ``GPU-...`` identifier.
    """

    index: int
    name: str
    memory_total_gb: float
    uuid: str


def _text(value: Any) -> str:
    """NVML strings are ``bytes`` in old pynvml releases and ``str`` in new ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as error:
        raise NvmlUnavailable(f"pynvml (nvidia-ml-py) is not installed: {error}") from error
    return pynvml


@contextmanager
def nvml_session() -> Iterator[Any]:
    """Initialise NVML for the duration of the block and yield the ``pynvml`` module.

    Raises :class:`NvmlUnavailable` (with the reason) when NVML cannot be
    initialised, and turns an ``NVMLError`` escaping the block into one too.
    NVML keeps a reference count, so nested sessions are fine.
    """
    pynvml = _import_pynvml()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML init failed: {error}") from error
    try:
        yield pynvml
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML query failed: {error}") from error
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def nvml_available() -> tuple[bool, str | None]:
    """``(True, None)`` when NVML initialises, else ``(False, reason)``."""
    try:
        with nvml_session():
            return True, None
    except NvmlUnavailable as error:
        return False, str(error)


def _device_count(pynvml: Any) -> int:
    return int(pynvml.nvmlDeviceGetCount())


def _gpu_info(pynvml: Any, index: int) -> GpuInfo | None:
    """The device at NVML ``index``, or None when NVML cannot describe it."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return GpuInfo(
            index=index,
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            memory_total_gb=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) / BYTES_PER_GB,
            uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        )
    except pynvml.NVMLError:
        return None


def _inventory(pynvml: Any) -> list[GpuInfo | None]:
    """Every NVML index, with None where a device cannot be queried (keeps indices aligned)."""
    return [_gpu_info(pynvml, index) for index in range(_device_count(pynvml))]


def list_gpus() -> list[GpuInfo]:
    """All GPUs NVML can describe, in NVML index order; ``[]`` without a usable driver."""
    try:
        with nvml_session() as pynvml:
            return [gpu for gpu in _inventory(pynvml) if gpu is not None]
    except NvmlUnavailable:
        return []


def _strtoul_prefix(text: str) -> int:
    """The integer ``text`` starts with (like C ``strtoul``), or -1 when it has none."""
    digits = ""
    for position, char in enumerate(text):
        if char.isdigit() or (position == 0 and char in "+-"):
            digits += char
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return -1


def _uuid_ordinal(candidate: str, uuids: list[str]) -> int:
    """Index of the one uuid that ``candidate`` prefixes; -1 when none or ambiguous."""
    matches = [index for index, uuid in enumerate(uuids) if uuid.startswith(candidate)]
    return matches[0] if len(matches) == 1 else -1


def parse_cuda_visible_devices(value: str | None, uuids: list[str]) -> list[int]:
    """NVML indices made visible by a ``CUDA_VISIBLE_DEVICES`` value, in CUDA order.

    ``uuids`` are the NVML device UUIDs (``GPU-...``) in NVML index order. The
    rules follow CUDA as torch implements them (``torch.cuda._parse_visible_devices``):

    * ``None`` (unset): every device.
    * A list of ordinals (``"2,0"``) or of ``GPU-`` UUIDs or unique UUID prefixes;
      the first entry decides which. Parsing stops at the first entry that is
      invalid (not a number, out of range, unknown or ambiguous UUID), keeping
      the entries before it; so ``""`` and ``"-1"`` hide every device.
    * A repeated device hides every device.
    * ``MIG-`` entries are not mapped to their parent GPU: they yield ``[]``.
    """
    if value is None:
        return list(range(len(uuids)))
    entries = [entry.strip() for entry in value.split(",")]
    visible: list[int] = []
    by_uuid = entries[0].startswith("GPU-")
    for entry in entries:
        if by_uuid:
            index = _uuid_ordinal(entry, uuids) if entry.startswith("GPU-") else -1
        else:
            index = _strtoul_prefix(entry)
            if index >= len(uuids):
                index = -1
        if index < 0:
            break
        if index in visible:
            return []
        visible.append(index)
    return visible


def _visible(inventory: list[GpuInfo | None]) -> list[GpuInfo]:
    """The GPUs of ``inventory`` visible under ``CUDA_VISIBLE_DEVICES``, in CUDA order."""
    uuids = [gpu.uuid if gpu is not None else "" for gpu in inventory]
    indices = parse_cuda_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)
    return [gpu for gpu in (inventory[index] for index in indices) if gpu is not None]


def _visible_gpus() -> list[GpuInfo]:
    try:
        with nvml_session() as pynvml:
            return _visible(_inventory(pynvml))
    except NvmlUnavailable:
        return []


def visible_gpu_indices() -> list[int]:
    """NVML indices of the GPUs visible under ``CUDA_VISIBLE_DEVICES`` (all when unset).

    Devices NVML cannot query are left out; ``[]`` without a usable driver.
    """
    return [gpu.index for gpu in _visible_gpus()]


def gpu_type() -> str:
    """Name of visible GPU 0 (e.g. ``"NVIDIA H200"``), or ``"cpu"`` when none is visible."""
    visible = _visible_gpus()
    return visible[0].name if visible else "cpu"


def resolve_device(requested: str) -> str:
    """The device a spec's ``workload.device`` means on this host.

    ``auto`` is ``cuda`` when NVML sees a GPU, else ``cpu``. Raises
    :class:`ValueError` (the message says what to use instead) for ``cuda``
    on a host without one.
    """
    if requested == "auto":
        return "cuda" if list_gpus() else "cpu"
    if requested == "cuda" and not list_gpus():
        raise ValueError(
            "cuda, but no NVIDIA GPU is visible here (NVML found none); use "
            "'device: auto' (a GPU when one is visible, else the CPU) or 'device: cpu'"
        )
    return requested


def gpu_memory_gb() -> float | None:
    """Total memory of visible GPU 0 in GB (1e9 bytes); ``None`` when none is visible."""
    visible = _visible_gpus()
    return visible[0].memory_total_gb if visible else None


def _cuda_version_text(version: int) -> str:
    """NVML encodes CUDA 12.4 as 12040."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _gpu_fingerprint() -> dict[str, str]:
    keys = ("gpu_type", "gpu_name", "gpu_count", "gpu_memory_gb", "driver_version", "cuda_driver_version")
    try:
        with nvml_session() as pynvml:
            visible = _visible(_inventory(pynvml))
            driver = _text(pynvml.nvmlSystemGetDriverVersion())
            try:
                cuda = _cuda_version_text(int(pynvml.nvmlSystemGetCudaDriverVersion()))
            except pynvml.NVMLError as error:
                cuda = unavailable(f"NVML: {error}")
    except NvmlUnavailable as error:
        return {key: unavailable(str(error)) for key in keys} | {"gpu_type": "cpu"}
    no_gpu = unavailable("no GPU visible under CUDA_VISIBLE_DEVICES")
    names = list(dict.fromkeys(gpu.name for gpu in visible))
    return {
        "gpu_type": visible[0].name if visible else "cpu",
        "gpu_name": " + ".join(names) if names else no_gpu,
        "gpu_count": str(len(visible)),
        "gpu_memory_gb": f"{visible[0].memory_total_gb:.1f}" if visible else no_gpu,
        "driver_version": driver,
        "cuda_driver_version": cuda,
    }


def fingerprint() -> dict[str, str]:
    """Describe this machine for provenance; every value is a string.

    Keys: ``gpu_type`` (as :func:`gpu_type`), ``gpu_name`` (distinct names of the
    visible GPUs, joined by ``" + "``), ``gpu_count`` (visible GPUs),
    ``gpu_memory_gb`` (visible GPU 0, GB), ``driver_version``,
    ``cuda_driver_version`` (the CUDA version the driver supports, from NVML),
    ``torch_version`` (installed distribution; torch is not imported),
    ``python_version``, ``hostname``, ``cpu_model``, ``cpu_cores`` (logical),
    ``cpu_cores_usable`` (this process's CPU affinity), ``host_memory_gb``.
    A value that cannot be found reads ``"unavailable (<reason>)"``.
    """
    return _gpu_fingerprint() | host_fingerprint()


def process_tree_pids(pid: int) -> list[int]:
    """``pid`` followed by all its living descendants; ``[]`` when ``pid`` is gone.

    Processes that exit while the tree is walked are simply left out.
    """
    try:
        root = psutil.Process(pid)
        children = root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []
    except psutil.AccessDenied:
        return [pid]
    return [pid] + [child.pid for child in children]


def device_process_memory(pynvml: Any, handle: Any) -> dict[int, int | None]:
    """``{pid: usedGpuMemory bytes or None}`` on one device (compute, graphics, MPS).

    A pid listed in several process lists keeps its largest known value. A list
    the driver cannot produce is skipped. ``None`` means NVML does not know.
    """
    used_by_pid: dict[int, int | None] = {}
    for versions in _PROCESS_LIST_FUNCTIONS:
        processes: list[Any] = []
        for function_name in versions:
            function = getattr(pynvml, function_name, None)
            if function is None:
                continue
            try:
                processes = function(handle)
                break
            except pynvml.NVMLError_FunctionNotFound:
                continue
            except pynvml.NVMLError:
                break
        for process in processes:
            used = process.usedGpuMemory
            known = used_by_pid.get(process.pid)
            if used is not None and (known is None or used > known):
                used_by_pid[process.pid] = int(used)
            else:
                used_by_pid.setdefault(process.pid, None)
    return used_by_pid


def tree_memory_by_device(pynvml: Any, handles: Iterable[Any], pids: Iterable[int]) -> dict[int, int]:
    """Position of each handle in ``handles`` (the NVML index, for :func:`all_device_handles`) -> summed
    known ``usedGpuMemory`` bytes of ``pids`` on it; devices where none of them is known are left out."""
    wanted = set(pids)
    per_device: dict[int, int] = {}
    for position, handle in enumerate(handles):
        for pid, used in device_process_memory(pynvml, handle).items():
            if pid in wanted and used is not None:
                per_device[position] = per_device.get(position, 0) + used
    return per_device


def tree_memory_from_handles(pynvml: Any, handles: Iterable[Any], pids: Iterable[int]) -> int | None:
    """Sum of known ``usedGpuMemory`` bytes of ``pids`` over ``handles``; None if none known."""
    per_device = tree_memory_by_device(pynvml, handles, pids)
    return sum(per_device.values()) if per_device else None


def all_device_handles(pynvml: Any) -> list[Any]:
    """NVML handles of every device (per-process memory is wanted on all of them)."""
    return [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(_device_count(pynvml))]


def nvml_process_tree_memory_bytes(pids: Iterable[int]) -> int | None:
    """GPU memory in bytes used by ``pids``, summed over all devices, per NVML.

    Counts compute, graphics and MPS processes. A process whose
    ``usedGpuMemory`` NVML reports as unavailable contributes nothing; the
    result is ``None`` when NVML is unavailable or knows the memory of none of
    ``pids`` (note: inside a container with its own PID namespace NVML reports
    host PIDs, which do not match).
    """
    try:
        with nvml_session() as pynvml:
            return tree_memory_from_handles(pynvml, all_device_handles(pynvml), pids)
    except NvmlUnavailable:
        return None
