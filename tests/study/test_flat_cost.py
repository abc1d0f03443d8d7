"""A coordinator's cost per trial does not grow with the study, and a coordinator waiting on busy slots
reads nothing (issue 27).

Counted, not timed: SQL statements on the study's engine (a SQLAlchemy ``before_cursor_execute``
event, as ``bench/growth.py`` counts them) and reads of a trial's stored attributes
(``FrozenTrial.user_attrs``: every scan over a study's trials goes through it), per trial of the
coordinator's steady loop — from the first trial it told to the last — in a study of 10 finished
trials and in one of 1,000. The large study is filled in one transaction
(:func:`tuner.storage.store.add_finished_trials`) with copies of a trial the coordinator measured, so
every copy carries a real trial's attributes (environment, provenance, log tail, worker info).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import FrozenTrial, create_trial

from tuner.results import TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.storage import store
from tuner.study.coordinator import Coordinator
from tuner.study.studies import OpenStudy, create_study
from tuner.testing.inline_runner import InlineRunner
from tuner.testing.noop_spec import noop_spec

STEADY_TRIALS = 6  # trials the coordinator runs in the grown study (the first and last bound the count)


def new_study(tmp_path: Path, name: str) -> OpenStudy:
    text = noop_spec(name, trials=3)
    return create_study(parse_spec(text), text, f"sqlite:///{tmp_path / (name + '.db')}", name, "random", 3, {})


def coordinator(
    opened: OpenStudy, home: Path, budget: int, runner: Runner | None = None, listeners: list[Any] | None = None
) -> Coordinator:
    return Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=runner or InlineRunner(),
        slots=[Slot(0, None, 1)],
        home=home,
        device="cpu",
        plan=plan_constraints(opened.spec, {}),
        budget_trials=budget,
        wall_time_s=None,
        listeners=listeners or [],
    )


def grow(opened: OpenStudy, home: Path, finished: int) -> int:
    """Measure 3 trials, then add copies of the last one until the study has ``finished`` trials; the study's
    measured count."""
    coordinator(opened, home, budget=3).run()
    template = opened.study.get_trials()[-1]
    copies = []
    for index in range(finished - 3):
        attrs = {**template.user_attrs, "candidate_key": f"grown-{index}"}
        copies.append(
            create_trial(
                state=template.state,
                values=[v * (1 + index * 1e-6) for v in template.values],
                params={"x": 10**8 + index},
                distributions=template.distributions,
                user_attrs=attrs,
                system_attrs=dict(template.system_attrs),
            )
        )
    store.add_finished_trials(opened.study, copies)
    return sum(1 for t in opened.study.get_trials() if t.user_attrs.get("measured"))


@dataclass
class Counter:
    """Statements on the study's engine and ``FrozenTrial.user_attrs`` reads, between two marks."""

    statements: int = 0
    attribute_reads: int = 0
    marks: list[tuple[int, int]] = field(default_factory=list)

    def on_trial(self, trial: FrozenTrial, done: int, total: int | None, front_size: int, elapsed_s: float) -> None:
        self.marks.append((self.statements, self.attribute_reads))

    def on_start(self, *args: Any) -> None: ...
    def on_finish(self, *args: Any) -> None: ...
    def on_trial_start(self, *args: Any) -> None: ...
    def on_tick(self, *args: Any) -> None: ...
    def on_trial_dropped(self, *args: Any) -> None: ...

    def per_trial(self) -> tuple[float, float]:
        (s0, a0), (s1, a1) = self.marks[0], self.marks[-1]
        trials = len(self.marks) - 1
        return (s1 - s0) / trials, (a1 - a0) / trials


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``counting(opened)``: a :class:`Counter` attached to the study's engine and to every trial's attributes."""
    from sqlalchemy import event

    counters: list[Counter] = []
    engines: list[Any] = []
    original = FrozenTrial.user_attrs

    def reads(trial: FrozenTrial) -> dict[str, Any]:
        for counter in counters:
            counter.attribute_reads += 1
        return original.fget(trial)  # type: ignore[no-any-return, union-attr]

    monkeypatch.setattr(FrozenTrial, "user_attrs", property(reads, original.fset))

    def attach(opened: OpenStudy) -> Counter:
        counter = Counter()

        def count(*_: Any) -> None:
            counter.statements += 1

        engine = store.engine_of(opened.study)
        event.listen(engine, "before_cursor_execute", count)
        engines.append((engine, count))
        counters.append(counter)
        return counter

    yield attach
    for engine, count in engines:
        event.remove(engine, "before_cursor_execute", count)


def steady_cost(tmp_path: Path, finished: int, attach: Any) -> tuple[float, float]:
    opened = new_study(tmp_path, f"flat{finished}")
    measured = grow(opened, tmp_path, finished)
    assert len(opened.study.get_trials()) == finished
    counter = attach(opened)
    coordinator(opened, tmp_path, budget=measured + STEADY_TRIALS, listeners=[counter]).run()
    assert len(counter.marks) == STEADY_TRIALS
    return counter.per_trial()


def test_cost_per_trial_does_not_grow_with_the_study(tmp_path: Path, counting: Any) -> None:
    small_sql, small_reads = steady_cost(tmp_path, 10, counting)
    large_sql, large_reads = steady_cost(tmp_path, 1000, counting)
    assert large_sql <= small_sql + 1, f"SQL statements per trial: {small_sql} at 10 trials, {large_sql} at 1,000"
    assert large_reads <= small_reads + 5, (
        f"trial attribute reads per trial: {small_reads} at 10 trials, "
        f"{large_reads} at 1,000 (a scan over the study each turn?)"
    )


class SleepingRunner(Runner):
    """Holds its slot ``sleep_s`` seconds (as a GPU trial does, the CPU idle), then runs the no-op inline;
    records when each run started and ended (``time.monotonic()``)."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s
        self.inline = InlineRunner()
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        started = time.monotonic()
        time.sleep(self.sleep_s)
        result = self.inline.run(request, slot)
        with self._lock:
            self.spans.append((started, time.monotonic()))
        return result


def test_a_coordinator_whose_slots_are_busy_reads_nothing(tmp_path: Path) -> None:
    """While its only slot runs a long trial, the coordinator neither reads the study nor burns CPU;
    only heartbeats (every ``heartbeat_interval``) and the stale-trial check (every 5 s) may touch the
    storage, and neither falls in a 3 s trial that starts the run."""
    from sqlalchemy import event

    opened = new_study(tmp_path, "waiting")
    statements: list[tuple[float, str]] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append((time.monotonic(), statement))

    engine = store.engine_of(opened.study)
    event.listen(engine, "before_cursor_execute", count)
    runner = SleepingRunner(3.0)
    cpu_before = time.process_time()
    coordinator(opened, tmp_path, budget=1, runner=runner).run()
    cpu_s = time.process_time() - cpu_before
    event.remove(engine, "before_cursor_execute", count)
    ((started, ended),) = runner.spans
    during = [s for at, s in statements if started + 0.5 <= at <= ended - 0.1 and "trial_heartbeats" not in s]
    assert during == [], f"{len(during)} statements while the slot was busy: {during[:5]}"
    assert cpu_s < 2.5, f"{cpu_s:.2f} s of CPU for a run that mostly waited 3 s"
