"""The closing Pareto-front summary fits an 80-column terminal and loses nothing (tuner.session.front_lines)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from tuner.cli.session import ConsoleSession
from tuner.session.events import FrontSummary
from tuner.session.front_lines import front_lines, marks_chosen
from tuner.session.text import TextSession
from tuner.storage.records import TrialRecord

SHARED = {"batch_size": 1, "precision": "bf16_autocast_with_tf32_matmul"}
"""Parameters every front trial has alike."""

VARYING = {  # trial number -> parameters that differ across the front
    12: {"infer_frames": 33, "sample_steps": 8, "resolution": "480x832", "online_decode": True},
    7: {"infer_frames": 49, "sample_steps": 12, "resolution": "720x1280", "online_decode": False},
    21: {"infer_frames": 81, "sample_steps": 16, "resolution": "720x1280", "online_decode": True},
    3: {
        "infer_frames": 121,
        "sample_steps": 24,
        "resolution": "1080x1920_upscaled_from_720x1280",
        "online_decode": False,
    },
    30: {"infer_frames": 161, "sample_steps": 40, "resolution": "1080x1920", "online_decode": True},
}
LATENCY = {12: 0.412, 7: 0.6031, 21: 0.9512, 3: 1.4444, 30: 2.0}
LPIPS = {12: 0.0213, 7: 0.0151, 21: 0.0102, 3: 0.00521, 30: 0.0011}


def record(
    number: int, latency: float, lpips: float, params: dict[str, Any], role: str = "search", cv: float | None = 0.02
) -> TrialRecord:
    metrics: dict[str, dict[str, Any]] = {
        "latency_p50_s": {"value": latency, "unit": "s", "direction": "minimize"},
        "stlpips_alex": {"value": lpips, "unit": "1", "direction": "minimize"},
        "latency_cv": {"value": cv, "unit": "1", "direction": "minimize"},
    }
    return TrialRecord(
        number=number,
        state="COMPLETE",
        role=role,
        outcome="OK",
        reason=None,
        params=params,
        derived={},
        values=(latency, lpips),
        constraints={},
        metrics=metrics,
        placeholder=False,
        duplicate_of=None,
        slot="cpu:0",
        wall_time_s=1.0,
        eval_time_s=0.1,
        datetime_start=None,
        datetime_complete=None,
    )


def summary(chosen: int | None = 12, **changes: Any) -> FrontSummary:
    front = tuple(
        record(n, LATENCY[n], LPIPS[n], {**VARYING[n], **SHARED}, cv=0.25 if n == 21 else 0.02) for n in VARYING
    )
    fields: dict[str, Any] = dict(
        objective_names=("latency_p50_s", "stlpips_alex"),
        directions=("minimize", "minimize"),
        units={"latency_p50_s": "s", "stlpips_alex": ""},
        front=front,
        chosen=chosen,
        rule="knee (default: no policy in the spec)",
        baseline=record(1, 0.9517, 0.034, {**VARYING[21], **SHARED}, role="baseline"),
        reference=record(0, 9.5, 0.0, {**VARYING[30], **SHARED, "sample_steps": 50}, role="reference"),
        speed_metric="latency_p50_s",
    )
    fields.update(changes)
    return FrontSummary(**fields)


def blocks(lines: list[str]) -> dict[int, str]:
    """Trial number -> its block (its row and the lines under it up to the next row or the shared line)."""
    rows = {n: next(i for i, line in enumerate(lines) if line[1:].split()[:1] == [str(n)]) for n in VARYING}
    ends = sorted(rows.values()) + [next(i for i, line in enumerate(lines) if line.startswith("same on every"))]
    return {n: "\n".join(lines[start : ends[ends.index(start) + 1]]) for n, start in rows.items()}


def items_in(block: str) -> set[str]:
    """The ``name=value`` items of a block, whole (as separated by ", " and line breaks)."""
    return {item.strip().rstrip(",") for line in block.splitlines()[1:] for item in line.split(", ") if item.strip()}


def joined(lines: list[str]) -> str:
    return " ".join(line.strip() for line in lines)


@pytest.mark.parametrize("width", [80, 120])
def test_front_fits_and_shows_every_param_in_full(width: int) -> None:
    lines = front_lines(summary(), width)
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    assert lines[0].startswith("Pareto front (5 trials): latency_p50_s (min, s)") and "stlpips_alex (min)" in lines[0]
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["trial"])
    assert "speed-up vs the baseline (trial 1)" in joined(lines[:head]), "the title says what speed-ups are against"
    assert lines[head].split() == ["trial", "role", "latency_p50_s", "stlpips_alex", "speed-up"]
    found = blocks(lines)
    for number, params in VARYING.items():
        expected = {f"{name}={value}" for name, value in params.items()}
        assert expected <= items_in(found[number]), (number, found[number])
        for other, block in found.items():  # ... and only in its own block
            if other != number:
                assert not (expected - {f"{k}={v}" for k, v in VARYING[other].items()}) & items_in(block)
        assert not any(name in found[number] for name in SHARED), "shared parameters are not repeated"
    same = joined(
        [line for line in lines if line.startswith("same on every")]
        + lines[lines.index(next(line for line in lines if line.startswith("same on every"))) + 1 :]
    )
    assert "batch_size=1" in same and "precision=bf16_autocast_with_tf32_matmul" in same
    header = lines[head]
    row = found[12].splitlines()[0]
    assert marks_chosen(row) and row.startswith("*") and "0.412 s" in row and "0.0213" in row and "2.31x" in row
    assert all(not block.startswith("*") for n, block in found.items() if n != 12)
    assert "NOISY" in found[21].splitlines()[0] and "NOISY" not in found[7]
    assert row.index("2.31x") + len("2.31x") == header.index("speed-up") + len("speed-up"), "columns aligned"
    chosen = joined(lines[next(i for i, line in enumerate(lines) if line.startswith("* chosen:")) :])
    assert chosen == (
        "* chosen: trial 12 by knee (default: no policy in the spec) — 2.31x faster than the"
        " baseline (trial 1); stlpips_alex 0.0213 vs the reference's 0 (baseline 0.034)"
    )


def test_unknown_speedup_and_no_chosen() -> None:
    lines = front_lines(summary(chosen=None, baseline=None, reference=None), 80)
    assert all(len(line) <= 80 for line in lines)
    assert not any(line.startswith("*") for line in lines)
    rows = [line for line in lines[2:] if line.split()[:1] in [[str(n)] for n in VARYING]]
    assert len(rows) == 5 and all(line.split()[-1] in {"-", "NOISY"} for line in rows)


def test_chosen_off_the_front_is_still_said() -> None:
    text = joined(front_lines(summary(chosen=1), 80))
    assert "* chosen: trial 1 (not on the front) by knee" in text
    assert "the baseline itself: the rule found nothing faster that meets it" in text
    assert "latency_p50_s 0.9517 s" in text and "stlpips_alex 0.034 vs the reference's 0" in text
    unknown = joined(front_lines(summary(chosen=99, rule=None), 80))
    assert "* chosen: trial 99 (not on the front) — its measurements are not in this summary" in unknown


def test_a_param_wider_than_the_line_stands_alone_unbroken() -> None:
    long = "x" * 100
    front = summary().front
    front = (record(12, 0.412, 0.02, {**VARYING[12], "prompt": long}), *front[1:])
    lines = front_lines(summary(front=front), 80)
    assert f"{' ' * 6}prompt={long}" in lines
    assert all(len(line) <= 80 for line in lines if long not in line)


def test_a_table_too_wide_is_stacked() -> None:
    names = tuple(f"objective_with_a_long_name_{i}" for i in range(3))
    lines = front_lines(summary(objective_names=names, directions=("minimize",) * 3, units={}), 60)
    assert all(len(line) <= 60 for line in lines), "\n".join(lines)
    assert any(line.startswith("* trial 12 search:") for line in lines)


def test_text_session_honours_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    TextSession(out=out, err=io.StringIO()).on_front(summary())
    lines = out.getvalue().splitlines()
    assert lines == front_lines(summary(), 80)
    assert "infer_frames=121" in out.getvalue() and max(len(line) for line in lines) <= 80


def test_console_session_prints_the_same_lines() -> None:
    file = io.StringIO()
    ConsoleSession(Console(file=file, width=80), Console(file=io.StringIO())).on_front(summary())
    lines = [line.rstrip() for line in file.getvalue().splitlines()]
    assert lines == front_lines(summary(), 80)
    assert "infer_fram…" not in file.getvalue()


def test_every_width_from_60_fits_and_keeps_every_item() -> None:
    for width in range(60, 141):
        lines = front_lines(summary(), width)
        assert all(len(line) <= width for line in lines), (width, "\n".join(lines))
        text = "\n".join(lines)
        for params in VARYING.values():
            for name, value in params.items():
                assert f"{name}={value}" in text, (width, name)  # whole, on one line
        assert "* chosen: trial 12" in text
