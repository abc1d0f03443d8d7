"""Ctrl-C and SIGTERM while a session runs: the first stops the coordinator, the second exits at once (130).

Both signals say the same words (``stopping`` / ``exiting`` notices). The runner's
processes are outside the coordinator's process group, so a signal to the whole
group reaches only the coordinator, which decides. Outside the main thread (where
Python cannot install handlers) nothing is installed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

from tuner.session.events import Notice, SessionListener

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Signals that stop a session like Ctrl-C (a terminal's SIGINT; SIGTERM from ``kill``, a scheduler, systemd)."""

INTERRUPTED_EXIT = 130


@contextlib.contextmanager
def stop_on_signals(interrupt: Callable[[], None], listener: SessionListener) -> Iterator[None]:
    """Inside: the first Ctrl-C or SIGTERM calls ``interrupt`` (trials in flight end within seconds, recorded
    INTERRUPTED and queued again; the caller then names ``tuner resume``); the second exits the process at
    once with status :data:`INTERRUPTED_EXIT`. The previous handlers come back on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses: list[float] = []

    def on_interrupt(signum: int, frame: object) -> None:
        presses.append(time.monotonic())
        if len(presses) == 1:
            interrupt()
            listener.on_notice(
                Notice(
                    "stopping", "stopping: no new trials; trials in flight end within seconds (Ctrl-C again: exit now)"
                )
            )
            return
        listener.on_notice(Notice("exiting", "exiting now: 'tuner resume' re-runs the trials that were in flight"))
        os._exit(INTERRUPTED_EXIT)

    previous = {signum: signal.signal(signum, on_interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
