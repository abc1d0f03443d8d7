"""A wake-up call the coordinator's loop sleeps on (issue 27: waiting costs nothing).

The loop sleeps until a trial in flight ends (its future's done-callback calls
:meth:`Wakeup.set` from the slot's thread), an interrupt comes (Ctrl-C: :meth:`Wakeup.set` from a
signal handler) or the next thing it must do is due (the timeout it passes to :meth:`Wakeup.wait`).

It is a self-pipe: :meth:`set` writes one byte without blocking and takes no lock, so it is safe
in a signal handler that interrupts the waiting thread itself (a :class:`threading.Event` is not:
its lock is not re-entrant). Linux and macOS (``select.poll``).
"""

from __future__ import annotations

import math
import os
import select
import weakref
from typing import Any


class Wakeup:
    """One waiting thread; any number of setters (threads, signal handlers). The pipe is closed when the
    object is collected (never earlier: a setter still holding it must not write to a reused descriptor)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._poll = select.poll()
        self._poll.register(self._read, select.POLLIN)
        weakref.finalize(self, _close, self._read, self._write)

    def set(self, *_: Any) -> None:
        """Wake the waiter (now, or its next :meth:`wait` returns at once). Signal-safe; any arguments are
        ignored (so it serves as a future's done-callback)."""
        try:
            os.write(self._write, b"\0")
        except OSError:  # the pipe is full: a wake-up is pending anyway
            pass

    def wait(self, timeout_s: float) -> bool:
        """Sleep until :meth:`set` is called or ``timeout_s`` seconds pass (rounded up to the millisecond);
        whether it was set. Clears what was set."""
        ready = self._poll.poll(min(max(0, math.ceil(timeout_s * 1000)), 2**31 - 1))
        if not ready:
            return False
        try:
            while os.read(self._read, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        return True


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
