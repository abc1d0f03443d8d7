"""The live display while a study runs: trial n/N, last outcome, front size, elapsed / ETA.

On a terminal it is a Rich live panel; otherwise (CI logs, pipes) one plain
line per finished trial.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


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


def eta_seconds(done_this_run: int, elapsed_s: float, remaining: int | None) -> float | None:
    """Remaining trials times the mean time per trial so far (None when unknown)."""
    if remaining is None or done_this_run <= 0:
        return None
    return elapsed_s / done_this_run * max(remaining, 0)


class ProgressDisplay:
    """A coordinator listener that shows progress on ``console`` (stderr by default)."""

    def __init__(self, console: Console | None = None, live: bool | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.live_enabled = self.console.is_terminal if live is None else live
        self._live: Live | None = None
        self._start_done = 0
        self._rows: list[tuple[str, ...]] = []
        self._status: dict[str, Any] = {}

    def on_start(self, study_name: str, done: int, total: int | None) -> None:
        self._start_done = done
        self._status = {"study": study_name, "done": done, "total": total, "front": 0, "elapsed": 0.0}
        if self.live_enabled:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.start()
        else:
            self.console.print(f"study {study_name}: {done}/{total if total is not None else '?'} trials measured")

    def on_trial(self, trial: "FrozenTrial", done: int, total: int | None, front_size: int,
                 elapsed_s: float) -> None:
        outcome = trial.user_attrs.get("outcome", trial.state.name)
        note = ""
        if trial.user_attrs.get("duplicate_of") is not None:
            note = f"copy of #{trial.user_attrs['duplicate_of']}"
        elif trial.user_attrs.get("reason") and outcome != "OK":
            note = str(trial.user_attrs["reason"])[:60]
        values = ", ".join(f"{v:.4g}" for v in trial.values) if trial.values and not \
            trial.user_attrs.get("placeholder_values") else ""
        role = trial.user_attrs.get("role", "search")
        self._rows = (self._rows + [(str(trial.number), role, outcome, values, note)])[-8:]
        remaining = None if total is None else total - done
        eta = eta_seconds(done - self._start_done, elapsed_s, remaining)
        self._status.update(done=done, total=total, front=front_size, elapsed=elapsed_s, eta=eta,
                            last=f"#{trial.number} {outcome}")
        if self._live is not None:
            self._live.update(self._render())
        else:
            self.console.print(
                f"[{done}/{total if total is not None else '?'}] trial {trial.number} {role} {outcome}"
                f"{' ' + values if values else ''}{' (' + note + ')' if note else ''} | front {front_size} | "
                f"elapsed {format_duration(elapsed_s)} | ETA {format_duration(eta)}")

    def on_finish(self, trials: list["FrozenTrial"], front: list["FrozenTrial"]) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None

    def _render(self) -> Table:
        s = self._status
        total = s.get("total")
        title = (f"{s.get('study')}  trial {s.get('done')}/{total if total is not None else '?'}  "
                 f"front {s.get('front')}  last {s.get('last', '-')}  "
                 f"elapsed {format_duration(s.get('elapsed'))}  ETA {format_duration(s.get('eta'))}")
        table = Table(title=title, title_justify="left", expand=False)
        for column in ("trial", "role", "outcome", "objectives", "note"):
            table.add_column(column)
        for row in self._rows:
            table.add_row(*row)
        return table


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()
