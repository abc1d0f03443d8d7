"""Sustained load: the loaded workload driven by N concurrent streams for a set time, and the knee over N.

After a trial's measured repeats, ``measurement.sustained`` drives the same loaded call from ``streams`` threads
at once (each stream: call, synchronise, call again, until the level's ``duration_s`` is over), for each level of
``streams`` in turn (ascending). A level's figures (:class:`LoadLevel`): the calls and items its streams
completed, its wall seconds (from the streams' common start to the last call's end: no call starts after the
level's window, the calls in flight finish), throughput = items / wall seconds (so the drain of the last calls
counts against it: a lower bound on the steady rate), and the calls' latency p50 / p95.

The **knee** is the level past which more streams stop paying: the first level whose next level raises the
throughput by less than ``knee_gain`` (default 10 %); with every step paying, the last level. The trial reports
the knee's figures as metrics (:data:`SUSTAINED_METRICS`: ``sustained_throughput_per_hour``,
``sustained_latency_p50_s`` / ``_p95_s``, ``sustained_streams``), so a study can have a front of latency against
sustained throughput, and the whole curve in its ``info["sustained"]``.

Concurrency is threads in the worker: a workload declares how many of its ``run`` calls may overlap
(:attr:`tuner.workloads.base.Workload.concurrent_calls`, default 1); a level above it is not run and says why.
A level whose calls fail (an out-of-memory at four streams) is recorded with the reason, and no higher level
runs; when the first level fails the error is the trial's (its outcome as for any call). On a device each
call's time includes the synchronise after it, which waits for the device's queued work (other streams'
included): the time a request's result is ready when read. Levels start only while the input's measurement
window has room for one more call (by the calls measured so far); a level cut by the window says so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuner.results import Direction, Metric

SUSTAINED_METRICS: dict[str, tuple[str, Direction]] = {
    "sustained_throughput_per_hour": ("items/h", "maximize"),
    "sustained_latency_p50_s": ("s", "minimize"),
    "sustained_latency_p95_s": ("s", "minimize"),
    "sustained_streams": ("streams", "maximize"),
}


@dataclass
class LoadLevel:
    """One level of sustained load: ``streams`` concurrent streams for (up to) ``duration_s`` seconds."""

    streams: int
    duration_s: float
    latencies_s: list[float] = field(default_factory=list)
    items: int = 0
    wall_s: float = 0.0
    error: BaseException | None = None
    note: str | None = None  # why the level did not run, or ran shorter

    @property
    def ran(self) -> bool:
        """Whether the level completed calls without an error."""
        return self.error is None and bool(self.latencies_s)

    @property
    def throughput_per_hour(self) -> float:
        """Items completed per hour of the level's wall time."""
        return self.items * 3600.0 / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The level as plain data (the trial's ``info["sustained"]`` rows): seconds, items/h, counts."""
        row: dict[str, Any] = {
            "streams": self.streams,
            "calls": len(self.latencies_s),
            "items": self.items,
            "wall_s": round(self.wall_s, 6),
        }
        if self.ran:
            row.update(
                throughput_per_hour=round(self.throughput_per_hour, 6),
                latency_p50_s=round(float(np.percentile(self.latencies_s, 50)), 6),
                latency_p95_s=round(float(np.percentile(self.latencies_s, 95)), 6),
            )
        if self.error is not None:
            row["error"] = f"{type(self.error).__name__}: {self.error}"
        if self.note:
            row["note"] = self.note
        return row


def drive_level(
    call: Callable[[], Any],
    synchronize: Callable[[], None],
    items_of: Callable[[Any], int],
    streams: int,
    duration_s: float,
    deadline: float,
    last_call_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> LoadLevel:
    """Run one level (see the module docstring): ``streams`` threads calling ``call`` until ``duration_s`` is over
    or, sooner, until a call started then would end after ``deadline`` (``clock`` seconds) by ``last_call_s``."""
    level = LoadLevel(streams, duration_s)
    started = clock()
    end = min(started + duration_s, deadline - last_call_s)
    if end <= started:
        level.note = "no time left in the measurement window for a call at this level"
        return level
    if end < started + duration_s:
        level.note = f"cut to {end - started:.3g} s of {duration_s:g} s by the measurement window"
    lock = threading.Lock()
    failed = threading.Event()

    def stream() -> None:
        while not failed.is_set() and clock() < end:
            began = clock()
            try:
                output = call()
                synchronize()
            except BaseException as error:  # the level's failure, re-raised by the caller when it is the first
                with lock:
                    level.error = level.error or error
                failed.set()
                return
            with lock:
                level.latencies_s.append(clock() - began)
                level.items += items_of(output)

    threads = [threading.Thread(target=stream, name=f"tuner-stream-{index}", daemon=True) for index in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    level.wall_s = clock() - started
    return level


def drive(
    call: Callable[[], Any],
    synchronize: Callable[[], None],
    items_of: Callable[[Any], int],
    levels: Sequence[int],
    duration_s: float,
    concurrent_calls: int,
    deadline: float,
    last_call_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> list[LoadLevel]:
    """Every level in ``levels`` (ascending) in turn; stops after a failed level. Raises the first level's error
    (the trial fails as its calls do). ``concurrent_calls``: the workload's bound on overlapping calls."""
    done: list[LoadLevel] = []
    for streams in levels:
        if streams > concurrent_calls:
            level = LoadLevel(streams, duration_s)
            level.note = (
                f"the workload allows {concurrent_calls} overlapping call(s) per process "
                f"(Workload.concurrent_calls), not {streams}"
            )
            done.append(level)
            break
        level = drive_level(call, synchronize, items_of, streams, duration_s, deadline, last_call_s, clock)
        if level.error is not None and not done:
            raise level.error
        done.append(level)
        if not level.ran:
            break
        last_call_s = max(last_call_s, max(level.latencies_s))
    return done


def knee(levels: Sequence[LoadLevel], knee_gain: float) -> LoadLevel | None:
    """The level past which one more level raises throughput by less than ``knee_gain`` (a fraction); with every
    step paying, the last level that ran; None when none ran."""
    ran = [level for level in levels if level.ran]
    for current, following in zip(ran, ran[1:]):
        if following.throughput_per_hour < (1.0 + knee_gain) * current.throughput_per_hour:
            return current
    return ran[-1] if ran else None


def curve_rows(levels: Sequence[LoadLevel], knee_gain: float) -> list[dict[str, Any]]:
    """Each level's :meth:`LoadLevel.summary`, the knee's with ``"knee": True`` (the trial's ``info["sustained"]``)."""
    chosen = knee(levels, knee_gain)
    return [{**level.summary(), **({"knee": True} if level is chosen else {})} for level in levels]


def sustained_metrics(levels: Sequence[LoadLevel], knee_gain: float) -> list[Metric]:
    """The :data:`SUSTAINED_METRICS` at the knee; unavailable with the first level's reason when none ran."""
    chosen = knee(levels, knee_gain)
    if chosen is None:
        first = levels[0] if levels else None
        why = (
            (first.note or (f"{type(first.error).__name__}: {first.error}" if first.error else None))
            if first is not None
            else None
        ) or "no sustained level ran"
        return [Metric.unavailable(name, unit, direction, why) for name, (unit, direction) in SUSTAINED_METRICS.items()]
    values = {
        "sustained_throughput_per_hour": chosen.throughput_per_hour,
        "sustained_latency_p50_s": float(np.percentile(chosen.latencies_s, 50)),
        "sustained_latency_p95_s": float(np.percentile(chosen.latencies_s, 95)),
        "sustained_streams": float(chosen.streams),
    }
    return [Metric(name, values[name], unit, direction) for name, (unit, direction) in SUSTAINED_METRICS.items()]
