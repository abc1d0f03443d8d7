"""How a session looks on the terminal: its notices and front rendered with rich, the live display.

The session itself (:mod:`tuner.session`) says everything through a listener and never
prints; :class:`ConsoleSession` is that listener for the CLI: notices on ``out`` (the
report) or ``err`` (diagnostics), warnings in yellow, the front as
:func:`~tuner.session.front_lines.front_lines` at ``out``'s width (the chosen trial bold), and a
:class:`~tuner.cli.progress.ProgressDisplay` per run. :func:`run_in_terminal` runs a
session so (``tuner run`` / ``resume``; ``tuner worker`` through :mod:`tuner.fleet.worker`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from tuner.session.events import FrontSummary, Notice, NoticeKind
from tuner.session.finish import MLFLOW_CLOSE_TIMEOUT_S  # noqa: F401 - tests and tools read it here
from tuner.session.front_lines import front_lines, marks_chosen
from tuner.session.run import RunOptions, run_session
from tuner.session.wiring import mlflow_reachable  # noqa: F401 - ``tuner sync-mlflow`` probes with it
from tuner.study.listeners import Summary
from tuner.study.studies import OpenStudy

if TYPE_CHECKING:
    from tuner.study.listeners import Listener

SOFT_WRAPPED: frozenset[NoticeKind] = frozenset({
    "warm_start", "study_stopped", "interrupted", "export_warning", "dashboard_stale", "worker_started",
    "mlflow_missing"})
"""Kinds printed as one logical line, never wrapped at the console's width (long paths, reasons, URLs)."""

UNHIGHLIGHTED: frozenset[NoticeKind] = frozenset({
    "study_stopped", "interrupted", "worker_started", "worker_moves_on", "mlflow_missing"})
"""Kinds printed without rich's automatic highlighting (numbers, paths)."""

EMPHASIS_STYLE: dict[NoticeKind, str] = {"study_stopped": "bold red"}
"""How a notice's emphasised span looks (default: bold)."""


def markup(notice: Notice) -> str:
    """``notice`` as rich markup: its text escaped, the emphasised span styled, a warning in yellow."""
    text = notice.text
    if notice.emphasis is None:
        body = escape(text)
    else:
        start, end = notice.emphasis
        style = EMPHASIS_STYLE.get(notice.kind, "bold")
        body = f"{escape(text[:start])}[{style}]{escape(text[start:end])}[/]{escape(text[end:])}"
    return f"[yellow]{body}[/]" if notice.warning else body


class ConsoleSession:
    """The CLI's :class:`~tuner.session.events.SessionListener`: see the module docstring."""

    def __init__(self, out: Console, err: Console) -> None:
        self.out = out
        self.err = err

    def trial_listeners(self) -> list["Listener"]:
        from tuner.cli.progress import ProgressDisplay

        return [ProgressDisplay(self.err)]

    def on_notice(self, notice: Notice) -> None:
        console = self.err if notice.diagnostic else self.out
        options: dict[str, Any] = {}
        if notice.kind in SOFT_WRAPPED:
            options["soft_wrap"] = True
        if notice.kind in UNHIGHLIGHTED:
            options["highlight"] = False
        console.print(markup(notice), **options)

    def on_front(self, summary: FrontSummary) -> None:
        """The front as :func:`~tuner.session.front_lines.front_lines` at ``out``'s width, printed
        as is (no markup, highlighting or rich wrapping), the chosen trial's row and line bold."""
        for line in front_lines(summary, self.out.width):
            self.out.print(Text(line, style="bold" if marks_chosen(line) else ""), highlight=False, soft_wrap=True)


def run_in_terminal(opened: OpenStudy, options: RunOptions, out: Console, err: Console) -> Summary:
    """:func:`tuner.session.run_session` shown on ``out`` / ``err``; its summary (``StudyError`` passes)."""
    return run_session(opened, options, ConsoleSession(out, err))
