"""Trial run names, times, the trials table and the comparison view, from stored records only."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

from tuner.storage.records import TrialRecord
from tuner.tracking.comparison import (
    child_run_name,
    comparison_view,
    study_description,
    study_span_ms,
    trial_times_ms,
    trials_table,
)
from tuner.tracking.run_info import StudyRunInfo
from tuner.tracking.ui import StudyLocation, compare_url
from tuner.tracking.views import build_front_views, child_payload, rank_update, ranks_of

INFO = StudyRunInfo(
    "s1",
    "fake_demo @ cpu",
    {"tuner.device": "cpu"},
    {},
    ("latency_p50_s", "stlpips_alex"),
    ("minimize", "minimize"),
    {"parameters": {"steps": {}, "size": {}}},
)
BASE = TrialRecord(
    number=12,
    state="COMPLETE",
    role="search",
    outcome="OK",
    reason=None,
    params={"steps": 4, "size": "704*384", "other": 1},
    derived={},
    values=(1.3249, 0.01304),
    constraints={"outcome": 0.0},
    metrics={"latency_p50_s": {"value": 1.3249, "unit": "s"}, "stlpips_alex": {"value": 0.01304, "unit": "1"}},
    placeholder=False,
    duplicate_of=None,
    slot="cpu0",
    wall_time_s=95.0,
    eval_time_s=1.0,
    datetime_start="2026-03-01T10:00:00.250000",
    datetime_complete="2026-03-01T10:01:40.750000",
)


def test_names_carry_objectives_with_units_and_the_front() -> None:
    assert child_run_name(BASE, INFO, {12: 0}) == "t12 · 1.32 s · ST-LPIPS 0.013 · front"
    assert child_run_name(BASE, INFO, {12: 2}) == "t12 · 1.32 s · ST-LPIPS 0.013"
    oom = replace(BASE, number=7, outcome="OOM", values=(9e9, 9e9), placeholder=True, constraints={"outcome": 1.0})
    assert child_run_name(oom, INFO, {}) == "t7 · OOM", "placeholder values are never shown"
    timeout = replace(oom, outcome="TIMEOUT")
    assert child_run_name(timeout, INFO, {}) == "t7 · TIMEOUT"
    skipped = replace(oom, outcome="SKIPPED_PREDICTED_OOM")
    assert child_run_name(skipped, INFO, {}) == "t7 · skipped: predicted OOM"
    assert child_run_name(replace(BASE, number=9, duplicate_of=4), INFO, {}) == "t9 · copy of t4"
    unmeasured = replace(BASE, number=6, state="FAIL", values=None, metrics={})
    assert child_run_name(unmeasured, INFO, {}) == "t6 · objective unavailable", "ran OK, no objective value"
    infeasible = replace(BASE, number=3, role="baseline", constraints={"stlpips_alex": 0.2})
    assert child_run_name(infeasible, INFO, {}) == "t3 · baseline · 1.32 s · ST-LPIPS 0.013 · infeasible"
    two_seconds = replace(INFO, objective_names=("latency_p50_s", "latency_p95_s"))
    named = replace(BASE, values=(1.0, 2.0), metrics={})
    assert child_run_name(named, two_seconds, {}) == "t12 · latency p50 1 s · latency p95 2 s", "same unit: named"


def test_a_run_lasts_as_long_as_its_trial() -> None:
    start, end = trial_times_ms(BASE)
    assert start == int(datetime(2026, 3, 1, 10, 0, 0, 250000).timestamp() * 1000)
    assert end is not None and start is not None and end - start == 100_500
    payload = child_payload(BASE, INFO, "parent", {12: 0})
    assert (payload.start_time_ms, payload.end_time_ms) == (start, end)
    assert payload.run_name.endswith("· front")
    assert trial_times_ms(replace(BASE, datetime_start=None, datetime_complete=None)) == (None, None)
    later = replace(BASE, number=13, datetime_start="2026-03-01T10:05:00", datetime_complete="2026-03-01T10:06:00")
    assert study_span_ms([later, BASE]) == (start, trial_times_ms(later)[1])


def test_a_rank_update_renames_the_run() -> None:
    tags, metrics = rank_update(BASE, INFO, {12: 0})
    assert tags["mlflow.runName"] == "t12 · 1.32 s · ST-LPIPS 0.013 · front" and tags["tuner.on_front"] == "true"
    tags, metrics = rank_update(BASE, INFO, {12: 1})
    assert tags["mlflow.runName"] == "t12 · 1.32 s · ST-LPIPS 0.013" and metrics["on_front"] == 0.0


def test_trials_table_lists_every_trial_front_first_with_labelled_objectives() -> None:
    better = replace(BASE, number=5, values=(0.9, 0.02))
    oom = replace(BASE, number=7, outcome="OOM", values=(9e9, 9e9), placeholder=True, constraints={"outcome": 1.0})
    dominated = replace(BASE, number=8, values=(2.0, 0.05))
    records = [oom, dominated, BASE, better]
    ranks = ranks_of(records, INFO.directions)
    table = trials_table(records, INFO, ranks)
    assert list(table)[:7] == ["trial", "run", "outcome", "on front", "Pareto rank", "latency p50 [s]", "ST-LPIPS"]
    assert list(table)[7:] == ["device_s", "steps", "size"], "device-seconds, the search space's parameters only"
    assert table["trial"] == [5, 12, 8, 7] and table["on front"] == [True, True, False, False]
    assert table["latency p50 [s]"][3] is None, "an OOM's placeholders are not values"
    assert table["run"][3] == "t7 · OOM"


def test_the_comparison_view_selects_objectives_and_key_params_first() -> None:
    view = comparison_view(INFO, {"latency_p50_s": "latency_p50_s", "stlpips_alex": "stlpips_alex"})
    state = json.loads(view.tag_value)
    assert view.tag == "mlflow.sharedViewState.tuner-s1"
    assert state["selectedColumns"][:2] == ["metrics.`latency_p50_s`", "metrics.`stlpips_alex`"]
    assert state["selectedColumns"][-2:] == ["params.`steps`", "params.`size`"]
    assert state["orderByKey"] == "metrics.`latency_p50_s`" and state["orderByAsc"] is True
    assert "tags.`tuner.study` = 's1'" in state["searchFilter"]
    assert view.route("3") == "/experiments/3/runs?viewStateShareKey=tuner-s1"
    assert (
        compare_url("http://u:pw@h:5000/", StudyLocation("3", "e", "r"), "s1")
        == "http://u:***@h:5000/#/experiments/3/runs?viewStateShareKey=tuner-s1"
    )
    text = study_description([BASE], INFO, {12: 0}, view.route("3"))
    assert "(#/experiments/3/runs?viewStateShareKey=tuner-s1)" in text
    assert "| t12 · 1.32 s · ST-LPIPS 0.013 · front | 1.32 | 0.013 | - | 4 | 704*384 |" in text, "no cost: '-'"


def test_front_views_carry_the_trials_table_and_the_description() -> None:
    records = [BASE, replace(BASE, number=5, values=(0.9, 0.02))]
    views = build_front_views(records, INFO, "3")
    table = json.loads(views.artifacts["trials.json"])
    assert table["columns"][:3] == ["trial", "run", "outcome"] and len(table["data"]) == 2
    assert views.artifacts["trials.csv"].decode().startswith("trial,run,outcome,on front,Pareto rank,latency p50 [s]")
    assert "viewStateShareKey=tuner-s1" in views.tags["mlflow.note.content"]
