"""What a session says reaches the terminal as before: notices rendered by the CLI (rich) or as plain lines."""

from __future__ import annotations

import io

from rich.console import Console

from tuner.cli.session import ConsoleSession, markup
from tuner.session.events import DIAGNOSTICS, WARNINGS, Notice
from tuner.session.text import TextSession


def consoles() -> tuple[Console, Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Console(file=out, width=80), Console(file=err, width=80), out, err


def test_an_emphasised_span_is_styled_and_the_rest_escaped() -> None:
    stopped = Notice.emphasised("study_stopped", "", "study stopped:", " the reference failed [oom] (OOM)")
    assert stopped.text == "study stopped: the reference failed [oom] (OOM)"
    assert markup(stopped) == "[bold red]study stopped:[/] the reference failed \\[oom] (OOM)"
    summary = Notice.emphasised("summary", "study ", "study", ": 3 measured")
    assert markup(summary) == "study [bold]study[/]: 3 measured", "the span, not the first equal word"
    assert markup(Notice("nothing_exported", "nothing exported: no trial")) == "[yellow]nothing exported: no trial[/]"


def test_diagnostics_go_to_stderr_and_the_report_to_stdout() -> None:
    out_console, err_console, out, err = consoles()
    session = ConsoleSession(out_console, err_console)
    session.on_notice(Notice("interrupted", "interrupted: continue with 'tuner resume s'"))
    session.on_notice(Notice("storage", "storage: sqlite:///x.db — inspect with 'tuner status s'"))
    assert "interrupted" in err.getvalue() and "interrupted" not in out.getvalue()
    assert "storage: sqlite:///x.db" in out.getvalue() and not err.getvalue().count("storage:")


def test_a_long_notice_is_broken_at_the_width_without_trailing_blanks() -> None:
    """Issue 41: a long ``warning:`` line was printed whole past the edge while others wrapped with blanks
    mid-line; every notice is now broken between words at the console's width, continued indented."""
    out_console, err_console, out, _ = consoles()
    warning = (
        "warning: the baseline (trial 1) is noisy: latency CV 0.23 > 0.1, so its median latency 1.522 s is "
        "uncertain by about ±12%; re-measure it (tuner check) on a quiet machine before relying on it"
    )
    session = ConsoleSession(out_console, err_console)
    session.on_notice(Notice("export_warning", warning))
    session.on_notice(Notice("export_warning", "warning: " + "x" * 150))
    lines = out.getvalue().splitlines()
    width = out_console.width
    assert all(len(line) <= width and line == line.rstrip() for line in lines), lines
    assert len(lines) > 3 and lines[1].startswith("  ") and lines[0].startswith("warning: the baseline")
    assert " ".join(" ".join(lines).split()).startswith(warning), "every word kept, in order"
    assert "".join(line.strip() for line in lines).endswith("x" * 150), "a word wider than the line is folded"


def test_plain_text_follows_the_same_streams() -> None:
    out, err = io.StringIO(), io.StringIO()
    session = TextSession(out, err)
    session.on_notice(Notice("mlflow_failure", "MLflow: logging failed"))
    session.on_notice(Notice("exported", "best on latency: trial 2 -> exported to best.yaml"))
    assert err.getvalue() == "MLflow: logging failed\n"
    assert out.getvalue() == "best on latency: trial 2 -> exported to best.yaml\n"


def test_every_warning_and_diagnostic_is_a_kind() -> None:
    from typing import get_args

    from tuner.session.events import NoticeKind

    kinds = set(get_args(NoticeKind))
    assert kinds >= WARNINGS and kinds >= DIAGNOSTICS
