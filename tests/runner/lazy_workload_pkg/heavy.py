"""The lazily imported module: it notes the process that imported it (tests only)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tuner.workloads.base import RunContext, Workload, WorkloadOutput

IMPORTED_BY_PID = os.getpid()


class LazyWorkload(Workload):
    """Says whether its module was imported before this process forked (by the fork server)."""

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        return WorkloadOutput(counters={"imported_before_fork": float(os.getpid() != IMPORTED_BY_PID)})
