"""The MLflow views of what a study cost, from stored records only (issue 26).

The study run's ``cost_*_device_h`` metrics, its ``tuner.cost`` tag and description, the trials
table's ``device_s`` column and each trial run's ``device_s`` metric, on a GPU study with a budget.
The same views on a real study, live and rebuilt, are checked in ``tests/cli/test_cost_views.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from tuner.storage.records import TrialRecord
from tuner.tracking.run_info import StudyRunInfo
from tuner.tracking.views import build_front_views, child_payload, ranks_of

INFO = StudyRunInfo(
    "g1",
    "fake_demo @ NVIDIA H200",
    {"tuner.device": "cuda"},
    {},
    ("latency_p50_s", "psnr_db"),
    ("minimize", "maximize"),
    {"parameters": {"steps": {}}},
    device="cuda",
    budget_device_hours=2.0,
)
HOUR = 3600.0


def _cost(device_s: float) -> dict[str, Any]:
    return {
        "device_s": device_s,
        "wall_s": device_s / 2,
        "devices": 2,
        "phases_device_s": {
            "startup": device_s / 2,
            "warmup": 0.0,
            "measured": device_s / 2,
            "evaluation": 0.0,
            "finish": 0.0,
            "unattributed": 0.0,
        },
    }


OK = TrialRecord(
    number=0,
    state="COMPLETE",
    role="search",
    outcome="OK",
    reason=None,
    params={"steps": 4},
    derived={},
    values=(1.5, 30.0),
    constraints={"outcome": 0.0},
    metrics={"latency_p50_s": {"value": 1.5, "unit": "s"}, "psnr_db": {"value": 30.0, "unit": "dB"}},
    placeholder=False,
    duplicate_of=None,
    slot="gpu:0,1",
    wall_time_s=360.0,
    eval_time_s=1.0,
    datetime_start="2026-03-01T10:00:00",
    datetime_complete="2026-03-01T10:06:00",
    measured=True,
    cost=_cost(720.0),
)
FASTER = replace(
    OK,
    number=1,
    values=(1.0, 29.0),
    cost=_cost(540.0),
    metrics={"latency_p50_s": {"value": 1.0, "unit": "s"}, "psnr_db": {"value": 29.0, "unit": "dB"}},
)
TIMEOUT = replace(
    OK,
    number=2,
    outcome="TIMEOUT",
    state="FAIL",
    values=(1e9, 0.0),
    placeholder=True,
    constraints={"outcome": 1.0},
    cost=_cost(1800.0),
)
COPY = replace(FASTER, number=3, duplicate_of=1, measured=False, cost=None, slot=None)
RECORDS = [OK, FASTER, TIMEOUT, COPY]


def test_the_study_run_carries_used_wasted_avoided_in_gpu_hours() -> None:
    views = build_front_views(RECORDS, INFO, "7")
    metrics = views.metrics
    assert metrics["cost_used_device_h"] == pytest.approx((720 + 540) / HOUR)
    assert metrics["cost_wasted_device_h"] == pytest.approx(1800 / HOUR)
    assert metrics["cost_recorded_device_h"] == pytest.approx(sum(r.device_s or 0.0 for r in RECORDS) / HOUR)
    assert metrics["cost_avoided_device_h"] == pytest.approx(540 / HOUR), "the copy avoided its original's run"
    assert metrics["cost_wasted_runs"] == 1.0
    line = views.tags["tuner.cost"]
    assert line.startswith(
        "GPU-h: used 0.35 (2 runs OK), wasted 0.5 (1 TIMEOUT), avoided ~0.15 (1 copy); "
        "budget 2 GPU-h; 3060 device-s recorded by 3 runs (used + wasted)"
    ), line
    description = views.tags["mlflow.note.content"]
    assert line in description and "avoided is an estimate: a copy: its original's recorded cost" in description


def test_the_trials_table_and_the_trial_runs_carry_each_runs_device_seconds() -> None:
    views = build_front_views(RECORDS, INFO, "7")
    table = json.loads(views.artifacts["trials.json"])
    column = table["columns"].index("device_s")
    assert {row[0]: row[column] for row in table["data"]} == {0: 720.0, 1: 540.0, 2: 1800.0, 3: None}
    header = views.artifacts["trials.csv"].decode().splitlines()[0]
    assert header == "trial,run,outcome,on front,Pareto rank,latency p50 [s],PSNR [dB],device_s,steps"
    front = json.loads(views.artifacts["front.json"])
    assert "device_s" in front["columns"]
    assert "| device-s |" in views.tags["mlflow.note.content"] and "| 540 |" in views.tags["mlflow.note.content"]
    ranks = ranks_of(RECORDS, INFO.directions)
    assert child_payload(TIMEOUT, INFO, "parent", ranks).metrics["device_s"] == 1800.0, "wasted runs too"
    assert "device_s" not in child_payload(COPY, INFO, "parent", ranks).metrics, "a copy ran nothing"


def test_a_study_from_before_cost_accounting_shows_zero_and_no_budget() -> None:
    old = [replace(r, cost=None) for r in RECORDS]
    info = replace(INFO, device=None, budget_device_hours=None)  # the unit then comes from the tuner.device tag
    views = build_front_views(old, info)
    assert views.metrics["cost_recorded_device_h"] == 0.0
    assert views.tags["tuner.cost"].startswith("GPU-h: used 0 (0 runs OK), wasted 0, avoided ~0")
    assert "budget" not in views.tags["tuner.cost"]
    assert "run(s) without a recorded cost" in views.tags["mlflow.note.content"], "the measured runs lack one"
