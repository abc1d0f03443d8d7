"""How a session looks on the terminal: its notices and front rendered with rich, the live display.

The session itself (:mod:`tuner.session`) says everything through a listener and never
prints; :class:`ConsoleSession` is that listener for the CLI: notices on ``out`` (the
report) or ``err`` (diagnostics), warnings in yellow, the front as
:func:`~tuner.session.front_lines.front_lines` at ``out``'s width (the chosen trial bold), and a
:class:`~tuner.cli.progress.ProgressDisplay` per run. :func:`run_in_terminal` runs a
session so (``tuner run`` / ``resume``; ``tuner worker`` through :mod:`tuner.fleet.worker`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

CONTINUATION = "  "
"""Where a notice broken at the console's width continues."""

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

    def trial_listeners(self) -> list[Listener]:
        from tuner.cli.progress import ProgressDisplay

        return [ProgressDisplay(self.err)]

    def on_notice(self, notice: Notice) -> None:
        """``notice`` broken between words at its console's width (a word wider, a long path, is folded),
        continued indented, no line ending in blanks: the same in a terminal and a pipe."""
        console = self.err if notice.diagnostic else self.out
        for line in fitted_text(Text.from_markup(markup(notice)), console):
            console.print(line, soft_wrap=True)

    def on_front(self, summary: FrontSummary) -> None:
        """The front as :func:`~tuner.session.front_lines.front_lines` at ``out``'s width, printed
        as is (no markup, highlighting or rich wrapping), the chosen trial's row and line bold."""
        for line in front_lines(summary, self.out.width):
            self.out.print(Text(line, style="bold" if marks_chosen(line) else ""), highlight=False, soft_wrap=True)


def fitted_text(text: Text, console: Console) -> list[Text]:
    """``text`` as lines of at most ``console.width`` characters, broken between words (a wider word folded),
    lines after the first indented by :data:`CONTINUATION`, trailing blanks removed."""
    width = max(console.width, 20)
    first = text.wrap(console, width, overflow="fold")[0] if text.plain else Text("")
    lines = [first]
    cut = len(first.plain)
    cut += len(text.plain[cut:]) - len(text.plain[cut:].lstrip(" "))
    if cut < len(text.plain):
        lines += [
            Text(CONTINUATION) + part for part in text[cut:].wrap(console, width - len(CONTINUATION), overflow="fold")
        ]
    for line in lines:
        line.rstrip()
    return lines


def run_in_terminal(opened: OpenStudy, options: RunOptions, out: Console, err: Console) -> Summary:
    """:func:`tuner.session.run_session` shown on ``out`` / ``err``; its summary (``StudyError`` passes)."""
    return run_session(opened, options, ConsoleSession(out, err))
