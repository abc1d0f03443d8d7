"""The JSON sidecar of a measured table: who measured it, on what host, and each run's load.

Shared by ``build_tables.py`` and ``anchored_build.py``: :func:`sidecar_head` gives the keys every table's
sidecar opens with (the table, its spec and fixed knobs, the hardware type, the host's CPU, cores, torch and
Python), :func:`run_record` one build run (its start, seconds and 1-minute load average before and after).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from table_definitions import ROOT, TABLES


def cpu_model() -> str:
    """The host CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def sidecar_head(table: str, settings: int, hardware: str, threads: int, onednn: bool, cpu: str) -> dict[str, Any]:
    """The opening keys of ``table``'s sidecar, in the order every sidecar keeps them."""
    import torch

    return {
        "table": table,
        "spec": str(TABLES[table].spec_path.relative_to(ROOT)),
        "fixed": TABLES[table].fixed,
        "settings": settings,
        "hardware": hardware,
        "torch_threads": threads,
        "onednn": onednn,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "inputs_override": TABLES[table].inputs,
    }


def run_record(started: float, load_before: tuple[float, ...] | list[float], **extra: Any) -> dict[str, Any]:
    """One build run: its UTC start, duration (s), the load average before and now, and ``extra`` keys."""
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        **extra,
    }
