"""A session shown as plain lines on two text streams (``tuner.run_study(verbose=True)``).

Notices go, unstyled, to ``out`` (the report) or ``err`` (diagnostics, as their kind says:
:data:`tuner.session.events.DIAGNOSTICS`); each trial started or recorded is one line on ``err``;
the front is :func:`tuner.session.front_lines.front_lines` at the terminal's width (``COLUMNS``)
on ``out``. The CLI's rich
rendering of the same events is :mod:`tuner.cli.session`.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from tuner.session.events import FrontSummary, Notice
from tuner.session.front_lines import front_lines

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from tuner.study.listeners import Listener


class TextSession:
    """A :class:`~tuner.session.events.SessionListener` writing plain lines (default: stdout, stderr)."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def trial_listeners(self) -> list[Listener]:
        return [TrialLines(self.err)]

    def on_notice(self, notice: Notice) -> None:
        print(notice.text, file=self.err if notice.diagnostic else self.out, flush=True)

    def on_front(self, summary: FrontSummary) -> None:
        """The front as :func:`~tuner.session.front_lines.front_lines` at the terminal's width
        (``COLUMNS`` when set; 100 when unknown)."""
        width = shutil.get_terminal_size((100, 24)).columns
        for line in front_lines(summary, width):
            print(line, file=self.out)
        self.out.flush()


class TrialLines:
    """A coordinator :class:`~tuner.study.listeners.Listener`: one plain line per trial started and recorded."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def on_start(
        self,
        study_name: str,
        done: int,
        total: int | None,
        wall_left_s: float | None = None,
        objectives: Sequence[str] = (),
    ) -> None:
        print(
            f"study {study_name}: {done}{'' if total is None else f'/{total}'} trials measured",
            file=self.stream,
            flush=True,
        )

    def on_trial_start(self, number: int, role: str, slot: str, timeout_s: float) -> None:
        print(f"trial {number} {role} started on {slot}", file=self.stream, flush=True)

    def on_trial(self, trial: FrozenTrial, done: int, total: int | None, front_size: int, elapsed_s: float) -> None:
        from tuner.storage.records import TrialRecord

        record = TrialRecord.from_trial(trial)
        print(
            f"[{done}{'' if total is None else f'/{total}'}] trial {record.number} {record.role} {record.outcome}"
            f" | front {front_size} | elapsed {elapsed_s:.0f} s",
            file=self.stream,
            flush=True,
        )

    def on_tick(self, elapsed_s: float) -> None:
        return None

    def on_trial_dropped(self, number: int, reason: str) -> None:
        print(
            f"trial {number}: taken over by another worker, its late result dropped: {reason}",
            file=self.stream,
            flush=True,
        )

    def on_finish(self, trials: list[FrozenTrial], front: list[FrozenTrial]) -> None:
        return None
