"""A coordinator whose slots are all busy sleeps: no read of the study, no turn of its loop until a trial
ends, a heartbeat or a tick is due, or an interrupt comes (issue 27, waiting costs nothing).

Counted, not timed: SQL statements on the study's engine (a SQLAlchemy ``before_cursor_execute`` event)
and turns of the loop (``on_tick`` calls: one per wait) while the only slot's trial blocks on an event the
test holds. The time bounds are generous: they only tell a prompt wake-up from a full tick.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tuner.study.coordinator as coordinator_module
from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.storage import store
from tuner.study.coordinator import TICK_S, Coordinator
from tuner.study.listeners import Summary
from tuner.study.studies import OpenStudy, create_study
from tuner.study.wakeup import Wakeup
from tuner.testing.inline_runner import InlineRunner
from tuner.testing.noop_spec import noop_spec

WINDOW_S = 2.5  # how long the test watches the waiting coordinator
LONG_WAIT_S = 3600.0  # the loop's timers in the wake-up tests: only a wake-up ends a wait within their timeouts


class BlockingRunner(Runner):
    """Each run blocks until :attr:`release` is set (then runs the no-op inline) or the runner is closed
    (then a CRASH, as a killed worker)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.closed = threading.Event()
        self.inline = InlineRunner()

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        self.started.set()
        while not (self.release.wait(0.01) or self.closed.is_set()):
            pass
        if self.closed.is_set():
            return TrialResult(Outcome.CRASH, reason="aborted: the runner was closed while the trial ran")
        return self.inline.run(request, slot)

    def close(self) -> None:
        self.closed.set()


class Ticks:
    """A listener that counts the loop's ticks (one per wait of the loop)."""

    def __init__(self) -> None:
        self.ticks: list[float] = []

    def on_tick(self, elapsed_s: float) -> None:
        self.ticks.append(time.monotonic())

    def on_start(self, *args: Any) -> None: ...
    def on_trial(self, *args: Any) -> None: ...
    def on_finish(self, *args: Any) -> None: ...
    def on_trial_start(self, *args: Any) -> None: ...
    def on_trial_dropped(self, *args: Any) -> None: ...


def waiting_coordinator(tmp_path: Path, runner: Runner, ticks: Ticks) -> tuple[Coordinator, OpenStudy]:
    text = noop_spec("idle", trials=1)
    opened = create_study(parse_spec(text), text, f"sqlite:///{tmp_path / 'idle.db'}", "idle", "random", 1, {})
    coordinator = Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=runner,
        slots=[Slot(0, None, 1)],
        home=tmp_path,
        device="cpu",
        plan=plan_constraints(opened.spec, {}),
        budget_trials=1,
        wall_time_s=None,
        listeners=[ticks],
    )
    return coordinator, opened


def start(coordinator: Coordinator) -> tuple[threading.Thread, list[Summary]]:
    summaries: list[Summary] = []
    thread = threading.Thread(target=lambda: summaries.append(coordinator.run()), daemon=True)
    thread.start()
    return thread, summaries


def _only_a_wakeup_ends_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's own timers far beyond the tests' timeouts: a wait that ends within them was woken, no clock read."""
    monkeypatch.setattr(coordinator_module, "TICK_S", LONG_WAIT_S)
    monkeypatch.setattr(coordinator_module, "RECLAIM_EVERY_S", LONG_WAIT_S)


def test_a_coordinator_whose_slots_are_busy_sleeps(tmp_path: Path) -> None:
    from sqlalchemy import event

    runner, ticks = BlockingRunner(), Ticks()
    coordinator, opened = waiting_coordinator(tmp_path, runner, ticks)
    statements: list[tuple[float, str]] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append((time.monotonic(), statement))

    engine = store.engine_of(opened.study)
    event.listen(engine, "before_cursor_execute", count)
    thread, summaries = start(coordinator)
    try:
        assert runner.started.wait(60), "the trial never started"
        time.sleep(0.3)  # the turn that started the trial ends
        begin, ticks_before = time.monotonic(), len(ticks.ticks)
        time.sleep(WINDOW_S)
        end, ticks_during = time.monotonic(), len(ticks.ticks) - ticks_before
        interval = coordinator._heartbeats.interval_s
    finally:
        runner.release.set()
        thread.join(60)
        event.remove(engine, "before_cursor_execute", count)
    during = [
        s
        for at, s in statements
        if begin <= at <= end
        and "heartbeat" not in s.lower()
        and not s.startswith(("BEGIN", "SELECT CURRENT_TIMESTAMP"))
    ]
    assert during == [], f"{len(during)} statements that are no heartbeat while the slot was busy: {during[:5]}"
    beats = WINDOW_S / interval + 1 if interval else 0
    assert ticks_during <= WINDOW_S / TICK_S + beats + 1, (
        f"{ticks_during} turns of the loop in {WINDOW_S} s (ticks every {TICK_S} s, heartbeats every {interval} s)"
    )
    assert summaries and summaries[0].ran == 1


def test_a_trials_end_wakes_a_waiting_coordinator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _only_a_wakeup_ends_the_wait(monkeypatch)
    runner = BlockingRunner()
    coordinator, _ = waiting_coordinator(tmp_path, runner, Ticks())
    thread, summaries = start(coordinator)
    try:
        assert runner.started.wait(60), "the trial never started"
        runner.release.set()
        thread.join(120)
        assert not thread.is_alive(), "the trial's end did not wake the loop (its next timer is an hour away)"
    finally:
        runner.release.set()
        thread.join(60)
    assert summaries and summaries[0].ran == 1


def test_an_interrupt_wakes_a_waiting_coordinator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator_module, "INTERRUPT_GRACE_S", 0.2)
    _only_a_wakeup_ends_the_wait(monkeypatch)
    runner, ticks = BlockingRunner(), Ticks()
    coordinator, _ = waiting_coordinator(tmp_path, runner, ticks)
    thread, summaries = start(coordinator)
    try:
        assert runner.started.wait(60), "the trial never started"
        coordinator.interrupt()
        assert runner.closed.wait(120), "the interrupt did not wake the wait (its next timer is an hour away)"
        thread.join(60)
    finally:
        runner.release.set()
        thread.join(60)
    assert summaries and summaries[0].interrupted


def test_the_wakeup_wakes_from_another_thread_and_from_a_signal_handler() -> None:
    wakeup = Wakeup()
    assert wakeup.wait(0.01) is False
    timer = threading.Timer(0.1, wakeup.set)
    timer.start()
    began = time.monotonic()
    assert wakeup.wait(30) is True
    assert time.monotonic() - began < 10
    timer.join()
    assert wakeup.wait(0) is False, "a wake-up is cleared once seen"
    wakeup.set()
    wakeup.set()
    assert wakeup.wait(30) is True and wakeup.wait(0) is False, "set twice before the wait: one wake-up"

    previous = signal.signal(signal.SIGUSR1, lambda *_: wakeup.set())
    try:
        threading.Timer(0.1, lambda: os.kill(os.getpid(), signal.SIGUSR1)).start()
        began = time.monotonic()
        assert wakeup.wait(30) is True
        assert time.monotonic() - began < 10
    finally:
        signal.signal(signal.SIGUSR1, previous)
