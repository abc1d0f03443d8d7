"""Selection policies and profiles over stored trial records (pure functions, hand-checked cases)."""

from __future__ import annotations

from typing import Any

import pytest

from tuner.front.choice import PolicyError, parse_policy, select, select_profile
from tuner.storage.records import TrialRecord


def record(number: int, latency: float, quality: float, vram: float | None = None, role: str = "search") -> TrialRecord:
    metrics: dict[str, Any] = {
        "latency_p50_s": {"value": latency, "unit": "s", "direction": "minimize"},
        "psnr_db": {"value": quality, "unit": "dB", "direction": "maximize"},
        "peak_vram_gb": {
            "value": vram,
            "unit": "GB",
            "direction": "minimize",
            **({} if vram is not None else {"reason": "no GPU"}),
        },
    }
    return TrialRecord(
        number=number,
        state="COMPLETE",
        role=role,
        outcome="OK",
        reason=None,
        params={"n": number},
        derived={},
        values=(latency, quality),
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


DIRECTIONS = ["minimize", "maximize"]
# front: 0 (fast, poor), 1 (knee), 2 (slow, best); 3 is dominated by 1
TRIALS = [
    record(0, 1.0, 20.0, 10.0),
    record(1, 2.0, 38.0, 30.0),
    record(2, 6.0, 40.0, 50.0),
    record(3, 3.0, 30.0, 20.0),
]


def test_optimize_subject_to_conditions() -> None:
    assert select(parse_policy("minimize latency_p50_s"), TRIALS, DIRECTIONS).number == 0
    assert select(parse_policy("minimize latency_p50_s subject to psnr_db >= 35"), TRIALS, DIRECTIONS).number == 1
    chosen = select(
        parse_policy("Maximize psnr_db subject to peak_vram_gb <= 40 and latency_p50_s < 5"), TRIALS, DIRECTIONS
    )
    assert chosen.number == 1
    off_front = select(parse_policy("minimize peak_vram_gb subject to psnr_db > 25"), TRIALS, DIRECTIONS)
    assert off_front.number == 3, "a policy may pick a trial off the objective front"


def test_knee_and_lexicographic() -> None:
    assert select(parse_policy("knee"), TRIALS, DIRECTIONS).number == 1
    assert select(parse_policy("lexicographic psnr_db, latency_p50_s"), TRIALS, DIRECTIONS).number == 2
    tied = [*TRIALS, record(4, 0.5, 40.0)]
    assert select(parse_policy("lexicographic max psnr_db, min latency_p50_s"), tied, DIRECTIONS).number == 4


def test_profiles_from_the_front() -> None:
    names = ["latency_p50_s", "psnr_db"]
    picks = {p: select_profile(p, TRIALS, names, DIRECTIONS)[1].number for p in ("fast", "balanced", "quality")}
    assert picks == {"fast": 0, "balanced": 1, "quality": 2}


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "empty"),
        ("fastest", "not understood"),
        ("minimize latency_p50_s subject to psnr_db ~ 3", "condition"),
        ("lexicographic", "at least one"),
        ("lexicographic up psnr_db", "not 'METRIC'"),
    ],
)
def test_policy_syntax_errors_name_the_problem(text: str, problem: str) -> None:
    with pytest.raises(PolicyError, match=problem):
        parse_policy(text)


def test_unsatisfiable_and_unknown_metrics() -> None:
    with pytest.raises(PolicyError, match="none of the 4 feasible trials satisfies psnr_db >= 99"):
        select(parse_policy("minimize latency_p50_s subject to psnr_db >= 99"), TRIALS, DIRECTIONS)
    with pytest.raises(PolicyError, match="no trial recorded the metric 'ssim'"):
        select(parse_policy("lexicographic ssim"), TRIALS, DIRECTIONS)
    no_vram = [record(0, 1.0, 20.0)]
    with pytest.raises(PolicyError, match="none of the 1 feasible"):
        select(parse_policy("minimize latency_p50_s subject to peak_vram_gb <= 40"), no_vram, DIRECTIONS)
