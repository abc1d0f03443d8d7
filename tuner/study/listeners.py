"""What the coordinator tells its listeners (the live display, the MLflow tracker) and returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


class Listener(Protocol):
    """Receives progress and finished trials (the live display, the tracker)."""

    def on_start(
        self,
        study_name: str,
        done: int,
        total: int | None,
        wall_left_s: float | None = None,
        objectives: Sequence[str] = (),
    ) -> None:
        """A run begins: ``done`` of ``total`` trials measured; ``wall_left_s``: seconds its wall-time budget leaves
        for trials (None: no limit); ``objectives``: their names, in the order of a trial's values."""

    def on_trial(self, trial: FrozenTrial, done: int, total: int | None, front_size: int, elapsed_s: float) -> None: ...

    def on_finish(self, trials: list[FrozenTrial], front: list[FrozenTrial]) -> None: ...

    def on_trial_start(self, number: int, role: str, slot: str, timeout_s: float) -> None:
        """A trial started on ``slot`` with a wall-clock limit of ``timeout_s`` seconds."""

    def on_tick(self, elapsed_s: float) -> None:
        """Called while trials run, when one ends and at least every
        :data:`~tuner.study.coordinator.TICK_S` (5 s) otherwise (``elapsed_s``: this invocation so far)."""

    def on_trial_dropped(self, number: int, reason: str) -> None:
        """What this coordinator still had to write for trial ``number`` was dropped: ``reason`` (one line)."""


@dataclass
class Summary:
    """What a coordinator invocation did."""

    study_name: str
    measured: int  # trials of the study measured so far (every host)
    recorded: int
    outcomes: dict[str, int]
    front: list[int]
    stopped_because: str
    failure: str | None = None  # set when the run stopped because continuing would waste the budget
    interrupted: bool = False
    ran: int = 0  # trials this invocation measured
