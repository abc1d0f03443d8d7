"""InlineRunner: runs the worker's code in the calling process (no isolation).

For tests and debugging only: it shares the coordinator's process, so a
segfault or a hang takes the caller with it and ``timeout_s`` is not enforced.
It passes the same conformance tests as :class:`SubprocessRunner` for every
outcome a Python exception can produce (OK, OOM, INVALID, CRASH). Processes a
trial starts are not killed for it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from tuner.results import TrialResult
from tuner.runner.base import Runner, ScratchPolicy, Slot, TrialRequest, with_trial_disk_usage
from tuner.runner.worker import execute


class InlineRunner(Runner):
    """Executes requests in this process, one at a time per caller thread."""

    def __init__(self, scratch: ScratchPolicy | None = None) -> None:
        """``scratch``: what to do with a trial directory over its limit (:class:`~tuner.runner.base.ScratchPolicy`)."""
        self.scratch = scratch or ScratchPolicy()

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        started = time.perf_counter()
        result = execute(request)
        return with_trial_disk_usage(
            replace(result, wall_time_s=time.perf_counter() - started), Path(request.workdir), self.scratch
        )
