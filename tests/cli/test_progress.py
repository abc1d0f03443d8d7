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


def test_running_trials_are_shown_and_the_clock_moves(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Between trials the display is not frozen: started lines, still-running lines, a live caption."""
    import tuner.cli.progress as progress

    buffer = io.StringIO()
    display = ProgressDisplay(Console(file=buffer, width=200), live=False)
    display.on_start("demo", 0, 10)
    display.on_trial_start(0, "reference", "cpu0", 360.0)
    monkeypatch.setattr(progress, "STILL_RUNNING_EVERY_S", 0.0)
    display.on_tick(12.0)
    lines = buffer.getvalue().splitlines()
    assert any("trial 0 reference started on cpu0 (timeout 6m00s)" in line for line in lines)
    assert any(line.startswith("still running: trial 0 reference on cpu0") and "elapsed 12s" in line for line in lines)
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(display._render())
    assert "running: trial 0 reference on cpu0" in rendered.getvalue()
    study = optuna.create_study()
    trial = study.ask()
    trial.set_user_attr("outcome", "OK")
    display.on_trial(study.tell(trial, 1.0), 1, 10, 1, 13.0)
    after = io.StringIO()
    Console(file=after, width=200).print(display._render())
    assert "running:" not in after.getvalue(), "a finished trial leaves the running list"


def _told(values: list[float], role: str = "search", reason: str | None = None) -> optuna.trial.FrozenTrial:
    study = optuna.create_study(directions=["minimize", "minimize"])
    trial = study.ask()
    trial.set_user_attr("outcome", "OK")
    trial.set_user_attr("role", role)
    if reason:
        trial.set_user_attr("reason", reason)
    return study.tell(trial, values)


def test_the_header_names_the_objectives_and_each_line_gives_their_units() -> None:
    buffer = io.StringIO()
    display = ProgressDisplay(Console(file=buffer, width=80), live=False)
    display.on_start("demo", 0, 16, None, ["latency_p50_s", "stlpips_alex"])
    display.on_trial(_told([1.769, 0.1062], "baseline"), 2, 16, 2, 95.0)
    lines = buffer.getvalue().splitlines()
    assert "objectives: latency_p50_s [s], stlpips_alex" in lines, lines
    assert any(line.startswith("[2/16] trial 0 baseline OK 1.769 s, 0.1062 |") for line in lines), lines


def test_the_eta_respects_the_wall_time_budget() -> None:
    """16 trials, the reference alone took 83 s: the trial count says 20 min, the 270 s budget leaves 187 s."""
    buffer = io.StringIO()
    display = ProgressDisplay(Console(file=buffer, width=80), live=False)
    display.on_start("demo", 0, 16, 270.0, ["latency_p50_s", "stlpips_alex"])
    display.on_trial(_told([10.26, 0.0], "reference"), 1, 16, 1, 83.0)
    text = buffer.getvalue()
    assert "ETA 3m07s" in text and "20m" not in text, text
    assert "4m30s of wall time for trials" in text, text


def test_plain_lines_fit_80_columns_without_trailing_spaces() -> None:
    buffer = io.StringIO()
    display = ProgressDisplay(Console(file=buffer, width=80), live=False)
    display.on_start("avatar_demo-cpu-20261206-010418", 0, 16, 270.0, ["latency_p50_s", "stlpips_alex"])
    display.on_trial_start(12, "search", "cpu:0", 248.0)
    display.on_trial(_told([1.5, 0.1], "search"), 9, 16, 4, 123.0)
    long_reason = "the worker exited with status 1: " + "x" * 30 + " a long explanation of what went wrong " * 3
    study = optuna.create_study(directions=["minimize", "minimize"])
    trial = study.ask()
    trial.set_user_attr("outcome", "CRASH")
    trial.set_user_attr("reason", long_reason)
    display.on_trial(study.tell(trial, state=optuna.trial.TrialState.FAIL), 10, 16, 4, 150.0)
    lines = buffer.getvalue().splitlines()
    assert lines and all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert all(line == line.rstrip() for line in lines), [line for line in lines if line != line.rstrip()]
    assert any("[10/16] trial 0 search CRASH" in line for line in lines), lines
