"""Facts about this host apart from its GPUs: the CPU side of the fingerprint, and the cores
other processes leave idle. Standard library and psutil only; torch is never imported.

Units: memory in GB means 1e9 bytes (decimal gigabytes), as everywhere in tuner.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket

import psutil

BYTES_PER_GB = 1e9


def unavailable(reason: str) -> str:
    """The fingerprint's value for a fact that cannot be found: ``"unavailable (<reason>)"``."""
    return f"unavailable ({reason})"


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return unavailable("torch is not installed")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError as error:
        lines = []
        fallback_reason = f"cannot read /proc/cpuinfo: {error}"
    else:
        fallback_reason = "no 'model name' in /proc/cpuinfo"
    for field in ("model name", "hardware", "processor"):
        for line in lines:
            key, _, value = line.partition(":")
            value = value.strip()
            if key.strip().lower() == field and value and not value.isdigit():
                return value
    return platform.processor() or unavailable(fallback_reason)


def host_fingerprint() -> dict[str, str]:
    """The CPU side of :func:`tuner.gpu.fingerprint` (torch, Python, hostname, CPU, memory)."""
    logical = psutil.cpu_count(logical=True)
    try:
        usable = str(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError) as error:
        usable = unavailable(f"sched_getaffinity: {error}")
    return {
        "torch_version": _torch_version(),
        "python_version": platform.python_version(),
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_cores": str(logical) if logical else unavailable("psutil cannot count CPUs"),
        "cpu_cores_usable": usable,
        "host_memory_gb": f"{psutil.virtual_memory().total / BYTES_PER_GB:.1f}",
    }


def idle_cores(sample_s: float = 0.5) -> tuple[int, int]:
    """(cores not used by other processes, cores this process may run on), sampled over ``sample_s``.

    The cores in use are the summed per-core utilisation, rounded (one busy-loop
    process on a 2-core host: 1 of 2 idle). At least 1 is reported idle. Used to
    size CPU slots on a busy host: more OpenMP threads than idle cores makes small-op
    models many times slower (a thread that loses its core stalls every barrier).
    """
    total = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_core = psutil.cpu_percent(interval=sample_s, percpu=True)
    busy = int(round(sum(per_core) / 100.0))
    return max(1, min(total, len(per_core)) - busy), total
