"""The live display while a study runs: trial n/N, last outcome, front size, elapsed / ETA,
and the trials running now with their own clocks. A study without a trial budget (a wall time
only) shows "n measured" and no ETA: there is no N to count towards.

On a terminal it is a Rich live panel redrawn once a second (:data:`LIVE_REFRESH_HZ`), so the
clocks (whole seconds) move between trials; waiting on a long trial, the redraws cost ~0.2 % of a
core (four a second cost ~0.7 %: issue 27, waiting costs nothing; ``bench/idle_coordinator.py``).
Otherwise (CI logs, pipes) it prints one plain line when a trial starts, one when it ends, and a
"still running" line every :data:`STILL_RUNNING_EVERY_S` seconds while trials run. The objectives are
named once, in the header; each trial's line gives their values with units, in that order. A line wider
than the console is broken between words, continued indented, with no trailing blanks.

The ETA is the mean time per trial so far times the trials left, but never past what the run's wall-time
budget leaves (the coordinator starts no trial that would end past it: :mod:`tuner.study.budgets`).
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tuner.spec.metrics import objective_units
from tuner.storage.records import TrialRecord

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

STILL_RUNNING_EVERY_S = 30.0
LIVE_REFRESH_HZ = 1  # the clocks show whole seconds


def format_duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``-`` when unknown."""
    if seconds is None or seconds < 0:
        return "-"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def eta_seconds(
    done_this_run: int, elapsed_s: float, remaining: int | None, wall_left_s: float | None = None
) -> float | None:
    """Remaining trials times the mean time per trial so far, at most ``wall_left_s`` (what the wall-time
    budget leaves now); None when unknown."""
    if remaining is None or done_this_run <= 0:
        return wall_left_s
    eta = elapsed_s / done_this_run * max(remaining, 0)
    return eta if wall_left_s is None else min(eta, max(wall_left_s, 0.0))


def fitted(text: str, width: int, indent: str = "    ") -> list[str]:
    """``text`` broken between words into lines of at most ``width`` (a word wider stands alone), continued
    with ``indent``; no line ends in blanks."""
    return textwrap.wrap(
        text, max(width, 20), subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    ) or [""]


class ProgressDisplay:
    """A coordinator listener that shows progress on ``console`` (stderr by default)."""

    def __init__(self, console: Console | None = None, live: bool | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.live_enabled = self.console.is_terminal if live is None else live
        self._live: Live | None = None
        self._start_done = 0
        self._rows: list[tuple[str, ...]] = []
        self._status: dict[str, Any] = {}
        self._running: dict[int, tuple[str, str, float, float]] = {}  # number -> role, slot, started, timeout
        self._clock_start = time.monotonic()
        self._last_plain = time.monotonic()
        self._wall_left_s: float | None = None  # what the wall-time budget left at the start
        self._units: dict[str, str] = {}  # objective -> unit, in the objectives' order

    def on_start(
        self,
        study_name: str,
        done: int,
        total: int | None,
        wall_left_s: float | None = None,
        objectives: Sequence[str] = (),
    ) -> None:
        self._start_done = done
        self._clock_start = time.monotonic()
        self._wall_left_s = wall_left_s
        self._units = objective_units(list(objectives), [])
        self._status = {"study": study_name, "done": done, "total": total, "front": 0, "elapsed": 0.0}
        if self.live_enabled:
            self._live = Live(
                console=self.console, refresh_per_second=LIVE_REFRESH_HZ, transient=False, get_renderable=self._render
            )
            self._live.start()
        else:
            counted = (
                f"{done}/{total} trials measured"
                if total is not None
                else f"{done} trials measured so far (no trial budget)"
            )
            budget = "" if wall_left_s is None else f", {format_duration(wall_left_s)} of wall time for trials"
            self._plain(f"study {study_name}: {counted}{budget}")
            if self._units:
                self._plain("objectives: " + ", ".join(_labelled(name, unit) for name, unit in self._units.items()))

    def _plain(self, text: str) -> None:
        """One plain line, broken to the console's width (:func:`fitted`)."""
        for line in fitted(text, self.console.width):
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def on_trial_start(self, number: int, role: str, slot: str, timeout_s: float) -> None:
        self._running[number] = (role, slot, time.monotonic(), timeout_s)
        if self._live is None:
            self._last_plain = time.monotonic()
            self._plain(f"trial {number} {role} started on {slot} (timeout {format_duration(timeout_s)})")

    def on_tick(self, elapsed_s: float) -> None:
        if self._live is not None or not self._running:
            return
        now = time.monotonic()
        if now - self._last_plain >= STILL_RUNNING_EVERY_S:
            self._last_plain = now
            self._plain(f"still running: {self._running_text(now)} | elapsed {format_duration(elapsed_s)}")

    def on_trial_dropped(self, number: int, reason: str) -> None:
        self._running.pop(number, None)
        self._plain(f"trial {number}: taken over by another worker, its late result dropped: {reason}")

    def _running_text(self, now: float) -> str:
        return ", ".join(
            f"trial {n} {role} on {slot} {format_duration(now - started)}/{format_duration(timeout)}"
            for n, (role, slot, started, timeout) in sorted(self._running.items())
        )

    def on_trial(self, trial: FrozenTrial, done: int, total: int | None, front_size: int, elapsed_s: float) -> None:
        self._running.pop(trial.number, None)
        record = TrialRecord.from_trial(trial)
        outcome = record.outcome
        note = ""
        if record.duplicate_of is not None:
            note = f"copy of #{record.duplicate_of}"
        elif record.reason and outcome != "OK":
            note = str(record.reason)[:60]
        elif outcome == "OK" and record.noisy:
            note = f"noisy: latency cv {record.latency_cv or 0:.2f}"
        elif outcome == "OK" and record.cut_short:
            note = f"cut short: {record.cut_short}"
        units = list(self._units.values())
        values = (
            ", ".join(_valued(v, units[i] if i < len(units) else "") for i, v in enumerate(trial.values))
            if trial.values and not record.placeholder
            else ""
        )
        role = record.role
        self._rows = (self._rows + [(str(trial.number), role, outcome, values, note)])[-8:]
        remaining = None if total is None else total - done
        wall_left = None if self._wall_left_s is None else self._wall_left_s - elapsed_s
        eta = eta_seconds(done - self._start_done, elapsed_s, remaining, wall_left)
        self._status.update(
            done=done, total=total, front=front_size, elapsed=elapsed_s, eta=eta, last=f"#{trial.number} {outcome}"
        )
        if self._live is None:
            self._last_plain = time.monotonic()
            self._plain(
                f"[{_count(done, total)}] trial {trial.number} {role} {outcome}"
                f"{' ' + values if values else ''}{' (' + note + ')' if note else ''} | front {front_size} | "
                f"elapsed {format_duration(elapsed_s)}{'' if total is None else ' | ETA ' + format_duration(eta)}"
            )

    def on_finish(self, trials: list[FrozenTrial], front: list[FrozenTrial]) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    def _render(self) -> Table:
        s = self._status
        total = s.get("total")
        now = time.monotonic()
        title = (
            f"{s.get('study')}  {'' if total is None else 'trial '}{_count(s.get('done', 0), total)}  "
            f"front {s.get('front')}  last {s.get('last', '-')}  "
            f"elapsed {format_duration(now - self._clock_start)}"
            f"{'' if total is None else '  ETA ' + format_duration(s.get('eta'))}"
        )
        caption = f"running: {self._running_text(now)}" if self._running else None
        table = Table(title=title, title_justify="left", caption=caption, caption_justify="left", expand=False)
        for column in ("trial", "role", "outcome", ", ".join(self._units) or "objectives", "note"):
            table.add_column(column)
        for row in self._rows:
            table.add_row(*row)
        return table


def _labelled(name: str, unit: str) -> str:
    """``latency_p50_s [s]``; a unitless name alone."""
    return name if unit in ("", "1") else f"{name} [{unit}]"


def _valued(value: float, unit: str) -> str:
    """``1.769 s``; a unitless value alone (4 significant digits)."""
    return f"{value:.4g}" if unit in ("", "1") else f"{value:.4g} {unit}"


def _count(done: int, total: int | None) -> str:
    """``3/8`` towards a trial budget; ``9 measured`` for a study without one (a wall time only)."""
    return f"{done}/{total}" if total is not None else f"{done} measured"
