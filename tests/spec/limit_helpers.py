"""A bound on what a hostile input may cost, shared by the limit tests of the spec loader."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cheap(cpu_s: float = 5.0, traced_mb: float | None = 200.0) -> Iterator[None]:
    """The block must use under ``cpu_s`` CPU seconds and ``traced_mb`` of Python allocations.

    Generous bounds (a shared machine): the point is that nothing grows with the hostile input.
    ``traced_mb=None`` skips tracemalloc (it makes unwinding a RecursionError very slow).
    """
    if traced_mb is not None:
        tracemalloc.start()
    start = time.process_time()
    try:
        yield
    finally:
        cpu = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1] if traced_mb is not None else 0
        tracemalloc.stop()
    assert cpu < cpu_s, f"took {cpu:.1f} s CPU"
    assert traced_mb is None or peak < traced_mb * 2**20, f"allocated {peak / 2**20:.0f} MB"
