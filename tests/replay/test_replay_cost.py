"""What replayed trials cost: the cost model, device-seconds to a target, and the bench's cost lines.

All on the tiny SYNTHETIC table of :mod:`replay_fixtures` (nothing measured); its spec has the
default measurement (1 warm-up call, 3 timed repeats).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from replay_fixtures import write_tiny_table

from tuner.replay.cost_model import OVERHEAD_KEY, ReplayCostModel, overhead_note
from tuner.replay.methods import Method, Replay, Target, replay_once
from tuner.replay.report import (
    MethodResult,
    cost_comparison,
    cost_ratio,
    device_s_to_reach,
    sweep_cost_line,
    table_lines,
)
from tuner.replay.runner import ReplayRunner
from tuner.replay.table import MeasuredTable, load_hardware_types, load_table
from tuner.results import Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.measure.phases import INFO_KEY
from tuner.storage.attributes import cost_of, is_measured
from tuner.storage.cost import device_s_of, trial_cost

ROOT = Path(__file__).resolve().parents[2]
OVERHEAD = {"startup": 2.0, "evaluation": 0.5, "source": "test: SYNTHETIC"}


def tiny(tmp_path: Path, overhead: dict[str, Any] | None = OVERHEAD) -> MeasuredTable:
    """The tiny table, its sidecar given ``overhead`` as ``trial_overhead_s`` (None: no such key)."""
    types = write_tiny_table(tmp_path / "table")
    if overhead is not None:
        sidecar = types.parent / "tiny.cpu1t.json"
        sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), OVERHEAD_KEY: overhead}))
    return load_table(load_hardware_types(types)["tiny:cpu1t"])


def run(table: MeasuredTable, tmp_path: Path, **settings: Any):
    workdir = tmp_path / "trial"
    workdir.mkdir(parents=True, exist_ok=True)
    request = TrialRequest(
        study_name="s",
        trial_number=1,
        workload_class="tuner.workloads.fake:FakeWorkload",
        settings={"mode": "a", **settings},
        inputs={},
        seed=0,
        device="cpu",
        measurement={},
        timeout_s=10,
        workdir=str(workdir),
    )
    return ReplayRunner(table).run(request, Slot(0, None, 1))


# ------------------------------------------------------------------ the cost model
def test_an_ok_trial_costs_startup_calls_at_its_latency_and_evaluation(tmp_path: Path) -> None:
    table = tiny(tmp_path)
    result = run(table, tmp_path, steps=2, res=32, fast=False)  # latency 0.1 s
    assert result.outcome is Outcome.OK
    assert result.info[INFO_KEY] == pytest.approx(
        {"startup": 2.0, "warmup": 0.1, "measured": 0.3, "evaluation": 0.5, "finish": 0.0}
    )
    assert result.wall_time_s == pytest.approx(2.9)
    cost = trial_cost(result, "cpu0")  # the study's accounting applies to a replay unchanged
    assert cost["device_s"] == pytest.approx(2.9)
    assert cost["phases_device_s"]["startup"] == pytest.approx(2.0)
    assert cost["phases_device_s"]["unattributed"] == 0.0


def test_an_oom_costs_startup_and_one_call_a_crash_or_a_missing_setting_startup_only(tmp_path: Path) -> None:
    table = tiny(tmp_path)
    oom = run(table, tmp_path, steps=3, res=64, fast=False)  # peak 1.3 GB over the 1.25 GB cap; latency 0.6 s
    crash = run(table, tmp_path, steps=3, res=32, fast=True)  # recorded CRASH
    assert oom.outcome is Outcome.OOM and crash.outcome is Outcome.CRASH
    assert oom.info[INFO_KEY] == pytest.approx(
        {"startup": 2.0, "warmup": 0.6, "measured": 0.0, "evaluation": 0.0, "finish": 0.0}
    )
    assert crash.wall_time_s == pytest.approx(2.0)
    model = ReplayCostModel.of(table)
    assert model.trial_seconds(None, crash) == pytest.approx(2.0)  # not in the table: start-up only


def test_without_a_measured_overhead_startup_and_evaluation_are_zero_and_the_note_says_so(tmp_path: Path) -> None:
    table = tiny(tmp_path, overhead=None)
    model = ReplayCostModel.of(table)
    assert (model.startup_s, model.evaluation_s, model.measured_overhead) == (0.0, 0.0, False)
    assert run(table, tmp_path, steps=2, res=32, fast=False).wall_time_s == pytest.approx(0.4)  # 4 calls x 0.1 s
    assert "no measured per-trial start-up / evaluation" in overhead_note(table)
    assert OVERHEAD_KEY in overhead_note(table)


def test_the_note_names_the_measured_overhead_and_its_source(tmp_path: Path) -> None:
    note = overhead_note(tiny(tmp_path))
    assert "start-up 2 s + evaluation 0.5 s" in note and "test: SYNTHETIC" in note
    assert "(1 warm-up + 3 timed calls) x latency_p50_s" in note and "x that on their calls" not in note
    checked = overhead_note(tiny(tmp_path / "checked", {**OVERHEAD, "calls_vs_model": 2.5}))
    assert "the real trials measured there spent 2.5 x that on their calls" in checked


# ------------------------------------------------------------------ device-seconds to a target
def replay(fractions: list[float], device_s: list[float], seed: int = 0) -> Replay:
    return Replay("m", seed, fractions, len(fractions), len(fractions), "budget", 0.0, 0.0, device_s=device_s)


def test_device_seconds_to_a_target_are_those_spent_when_it_was_first_reached() -> None:
    r = replay([0.5, 0.91, 0.96, 1.0], [3.0, 5.0, 9.0, 12.0])
    assert device_s_to_reach(r, 0.90) == 5.0
    assert device_s_to_reach(r, 0.95) == 9.0
    assert device_s_to_reach(r, 0.99) == 12.0
    assert device_s_to_reach(replay([0.5, 0.6], [3.0, 6.0]), 0.95) == math.inf
    with pytest.raises(ValueError, match="2 device-seconds entries for 3 measured trials"):
        device_s_to_reach(replay([0.1, 0.2, 0.3], [1.0, 2.0]), 0.9)


def test_the_cell_gives_median_iqr_and_seeds_reached_and_a_lower_bound_past_the_budget() -> None:
    seeds = [
        replay([0.96], [100.0], 0),
        replay([0.5, 0.96], [100.0, 200.0], 1),
        replay([0.5, 0.6, 0.96], [100.0, 200.0, 300.0], 2),
        replay([0.5, 0.6], [100.0, 450.0], 3),
        replay([0.5, 0.6], [100.0, 400.0], 4),
    ]
    result = MethodResult("m", seeds, budget=3)
    assert result.device_s_to(0.95) == [100.0, 200.0, 300.0, math.inf, math.inf]
    assert result.median_device_s_to(0.95) == 300.0
    # q3 is a seed that never got there: more than q3 with such seeds at their whole study's cost (400, 450)
    assert result.device_cell(0.95) == "300 [200, >400] 3/5"
    late = MethodResult("m", [replay([0.96], [900.0], 0), replay([0.5], [100.0], 1), replay([0.5], [50.0], 2)], 1)
    assert late.device_cell(0.95) == ">100 [>75, >500] 1/3"  # bounds from 50, 100 (spent) and 900 (reached)
    assert result.device_cell(0.999) == "- 0/5"
    assert MethodResult("m", seeds[:1], budget=3).device_cell(0.95) == "100 1/1"
    assert result.median_study_device_s == 300.0


def test_the_cost_line_compares_median_device_seconds_to_95_percent() -> None:
    new = MethodResult("default", [replay([0.5, 0.96], [10.0, 20.0])], budget=2)
    old = MethodResult("default-v1", [replay([0.5, 0.6, 0.96], [10.0, 20.0, 40.0])], budget=3)
    never = MethodResult("default", [replay([0.5, 0.6], [10.0, 20.0])], budget=2)
    assert cost_ratio(new, old) == pytest.approx(0.5)
    line, ratio = cost_comparison("t:hw", new, old)
    assert line == (
        "t:hw: default reaches 95 % of the front's hypervolume in 20 device-s (median) = 0.50 x "
        "default-v1's 40 device-s"
    ) and ratio == pytest.approx(0.5)
    assert cost_comparison("t:hw", new, new)[0].endswith("= 1.00 x default's 20 device-s")
    line, ratio = cost_comparison("t:hw", never, old)
    assert line.startswith("t:hw: default does not reach 95 %") and ratio == math.inf
    assert line.endswith("(median); default-v1 needs 40")
    line, ratio = cost_comparison("t:hw", new, MethodResult("default-v1", never.replays, 2))
    assert line.endswith("; default-v1 does not within its budget (median)") and math.isnan(ratio)
    line, _ = cost_comparison("t:hw", never, never)
    assert line.endswith("(median); nor does default")
    sweep = MethodResult("sweep", [replay([0.5, 0.6, 0.7, 0.96], [10.0, 20.0, 30.0, 80.0])], budget=4)
    assert sweep_cost_line("t:hw", new, sweep).endswith("= 0.25 x the sweep's 80 device-s")
    assert any("dev-s to 95 %" in line for line in table_lines([new, old]))


# ------------------------------------------------------------------ a replay's cost is its trials' recorded cost
def test_a_replays_device_seconds_are_its_recorded_trials_cost(tmp_path: Path) -> None:
    table = tiny(tmp_path)
    result = replay_once(Target.of(table), Method("random", "random"), seed=1, budget=8, workdir=tmp_path / "run")
    study = optuna.load_study(study_name="random-seed1", storage=f"sqlite:///{tmp_path / 'run' / 'random-seed1.db'}")
    measured = [t for t in sorted(study.get_trials(), key=lambda t: t.number) if is_measured(t)]
    recorded = [device_s_of(cost_of(t)) for t in measured]
    assert len(result.device_s) == len(result.fractions) == len(measured) == 8
    assert None not in recorded
    assert result.device_s[-1] == pytest.approx(sum(recorded))  # type: ignore[arg-type]
    model = ReplayCostModel.of(table)
    modelled = [model.trial_seconds(table.lookup(t.params), table.result(t.params)) for t in measured]
    assert result.device_s == pytest.approx([sum(modelled[: i + 1]) for i in range(len(modelled))])
    assert all(cost is not None and cost >= 2.0 for cost in recorded)  # every run paid the start-up


# ------------------------------------------------------------------ the bench's last line
def test_the_quick_bench_ends_with_the_default_against_default_v1_in_device_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = tmp_path / "tables"
    write_tiny_table(tables)
    sidecar = tables / "tiny.cpu1t.json"
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), OVERHEAD_KEY: OVERHEAD}))
    spec = importlib.util.spec_from_file_location("search_efficiency", ROOT / "bench" / "search_efficiency.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert "default-v1" in bench.QUICK["methods"].split(",") and "default-v1" in bench.FULL["methods"].split(",")
    code = bench.main(
        [
            "--quick",
            "--table-dir",
            str(tables),
            "--tables",
            "tiny:cpu1t",
            "--results-dir",
            str(tmp_path / "results"),
            "--methods",
            "sweep,default,default-v1",
            "--seeds",
            "1",
            "--budget",
            "14",
        ]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    last = re.fullmatch(
        r"tiny:cpu1t: default reaches 95 % of the front's hypervolume in (\d+(?:\.\d+)?) device-s "
        r"\(median\) = (\d+\.\d\d) x default-v1's (\d+(?:\.\d+)?) device-s",
        lines[-1],
    )
    assert last is not None, lines[-1]
    raw = json.loads((tmp_path / "results" / "search_efficiency_tiny_cpu1t.json").read_text())
    # the default (skipping, ceilings, settled repeats) and default-v1 (none of them) replay the same seeds
    assert len(raw["methods"]["default"]["replays"]) == len(raw["methods"]["default-v1"]["replays"]) == 1
    assert float(last.group(2)) <= 1.0, "on this table the default's stops cost no device-seconds"
    assert any(line.startswith("cost model: tiny:cpu1t: per trial start-up 2 s") for line in lines)
    assert any("x the sweep's" in line and "device-s" in line for line in lines)
    assert raw["cost_model"]["startup_s"] == 2.0
    default = raw["methods"]["default"]
    assert [len(r["device_s"]) for r in default["replays"]] == [len(r["fractions"]) for r in default["replays"]]
    assert set(default["device_s_to"]) == {"0.9", "0.95", "0.99"}
