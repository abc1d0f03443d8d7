"""The progress display: durations, ETA, and the plain line printed off a terminal."""

from __future__ import annotations

import io

import optuna
from rich.console import Console

from tuner.cli.progress import ProgressDisplay, eta_seconds, format_duration


def test_format_duration() -> None:
    assert format_duration(None) == "-"
    assert format_duration(12.4) == "12s"
    assert format_duration(185) == "3m05s"
    assert format_duration(3720) == "1h02m"


def test_eta_is_mean_time_per_trial_times_remaining() -> None:
    assert eta_seconds(4, 20.0, 6) == 30.0
    assert eta_seconds(0, 5.0, 6) is None
    assert eta_seconds(3, 5.0, None) is None


def test_plain_lines_show_count_outcome_front_and_eta() -> None:
    buffer = io.StringIO()
    display = ProgressDisplay(Console(file=buffer, width=200), live=False)
    study = optuna.create_study(directions=["minimize", "maximize"])
    trial = study.ask()
    trial.set_user_attr("outcome", "OK")
    trial.set_user_attr("role", "baseline")
    frozen = study.tell(trial, [0.25, 31.5])
    display.on_start("demo", 0, 10)
    display.on_trial(frozen, 1, 10, 1, 5.0)
    text = buffer.getvalue()
    assert "[1/10] trial 0 baseline OK 0.25, 31.5 | front 1 | elapsed 5s | ETA 45s" in text
