"""Facts about this host apart from its GPUs: the CPU side of the fingerprint, the cores other
processes leave idle, the kernel's OOM-kill count of this cgroup, and a TCP port free now
(:func:`free_port`: for ``tuner ui`` / ``dashboard`` and the test servers). Standard library and
psutil only; torch is never imported.

Units: memory in GB means 1e9 bytes (decimal gigabytes), as everywhere in tuner.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from pathlib import Path

import psutil

BYTES_PER_GB = 1e9
MEMORY_EVENTS_ENV = "TUNER_MEMORY_EVENTS"
"""Path of the file :func:`oom_kill_count` reads instead of this process's cgroup's (tests point it at their own)."""


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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (OSError when ``host`` is not an address of this machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


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


def oom_kill_count() -> int | None:
    """How many processes of this process's cgroup the kernel's OOM killer has killed so far.

    Read from the ``oom_kill`` line of cgroup v2 ``memory.events`` (hierarchical:
    it counts the cgroup and those below it), or of cgroup v1
    ``memory.oom_control``; :data:`MEMORY_EVENTS_ENV` names another file of the
    same shape. ``None`` when nothing can be read. Compare two readings taken
    around a trial: a rise means an OOM kill happened meanwhile (in parallel slots
    sharing the cgroup, possibly another trial's).
    """
    override = os.environ.get(MEMORY_EVENTS_ENV)
    candidates = [Path(override)] if override else _cgroup_memory_files()
    for path in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def _cgroup_memory_files() -> list[Path]:
    """This process's cgroup ``memory.events`` (v2) and ``memory.oom_control`` (v1), where they exist."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    unified: list[Path] = []
    legacy: list[Path] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        relative = path.strip().lstrip("/")
        if controllers == "":
            unified.append(Path("/sys/fs/cgroup") / relative / "memory.events")
        elif "memory" in controllers.split(","):
            legacy.append(Path("/sys/fs/cgroup/memory") / relative / "memory.oom_control")
    return unified + legacy
