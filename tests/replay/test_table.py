"""Measured tables: cells parsed to the spec's types, lookup by setting, the declared cap, the replay spec."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_fixtures import CAP_GB, write_tiny_table

from tuner.replay.table import (
    TableError,
    exhaustive_front,
    feasible_values,
    load_hardware_types,
    load_table,
    over_cap_fraction,
    replay_spec,
)
from tuner.results import Outcome
from tuner.spec.candidate import canonical_key


def tiny(tmp_path: Path, **options):
    return load_table(load_hardware_types(write_tiny_table(tmp_path, **options))["tiny:cpu1t"])


def test_cells_are_parsed_to_the_spec_parameter_types(tmp_path: Path) -> None:
    table = tiny(tmp_path)
    row = table.lookup({"steps": 2, "res": 64, "fast": True, "mode": "a", "num_clip": 3})  # derived keys ignored
    assert row is not None and row.outcome is Outcome.OK
    assert [type(row.params[n]) for n in ("steps", "res", "fast", "mode")] == [int, int, bool, str]
    assert row.values["latency_p50_s"] == pytest.approx(0.2)  # 0.05 x 2 steps x 4 (64 px) x 0.5 (fast)
    assert table.space_size == 16 and table.complete and len(table.rows) == 16
    assert table.memory_cap_gb == CAP_GB
    assert canonical_key(row.params) in table.rows


def test_a_partial_table_knows_it_is_partial(tmp_path: Path) -> None:
    table = tiny(tmp_path, missing=({"steps": 2, "res": 32, "fast": True},))
    assert not table.complete and len(table.rows) == 15
    assert table.lookup({"steps": 2, "res": 32, "fast": True, "mode": "a"}) is None


def test_a_row_still_being_written_is_left_out(tmp_path: Path) -> None:
    types = write_tiny_table(tmp_path, missing=({"steps": 4, "res": 64, "fast": True},))
    with (tmp_path / "tiny.cpu1t.csv").open("a") as handle:
        handle.write("4,64,True")  # the measuring process has not finished this line
    table = load_table(load_hardware_types(types)["tiny:cpu1t"])
    assert len(table.rows) == 15 and not table.complete


def test_a_peak_over_the_declared_cap_is_an_oom(tmp_path: Path) -> None:
    table = tiny(tmp_path)
    over = table.result({"steps": 4, "res": 64, "fast": False, "mode": "a"})  # 1.3 GB measured
    under = table.result({"steps": 4, "res": 32, "fast": False, "mode": "a"})  # 1.2 GB
    assert over.outcome is Outcome.OOM
    assert over.reason == f"replayed: measured peak 1.3 GB > declared cap {CAP_GB:g} GB"
    assert under.outcome is Outcome.OK and under.metric_value("peak_rss_gb") == pytest.approx(1.2)
    assert under.metrics["latency_p50_s"].unit == "s" and under.metrics["psnr_db"].direction == "maximize"
    assert over_cap_fraction(table) == pytest.approx(2 / 13)  # 2 of the 13 OK rows


def test_recorded_failures_replay_as_recorded(tmp_path: Path) -> None:
    table = tiny(tmp_path)
    crash = table.result({"steps": 3, "res": 32, "fast": True, "mode": "a"})
    refused = table.result({"steps": 1, "res": 64, "fast": True, "mode": "a"})
    assert (crash.outcome, crash.reason) == (Outcome.CRASH, "Segmentation fault")
    assert (refused.outcome, refused.reason) == (Outcome.INVALID, "one step at 64 px is refused")


def test_a_sidecar_that_disagrees_with_the_declaration_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TableError, match="the sidecar fixes"):
        tiny(tmp_path, sidecar_fixed={"mode": "b"})


def test_overridden_inputs_reach_the_replay_spec_and_must_match_the_sidecar(tmp_path: Path) -> None:
    spec, _ = replay_spec(tiny(tmp_path / "a", inputs={"seconds": 1.0}), budget_trials=5)
    assert spec.inputs == {"seconds": 1.0}
    with pytest.raises(TableError, match="the sidecar overrides inputs"):
        tiny(tmp_path / "b", inputs={"seconds": 1.0}, sidecar_inputs={})


def test_a_cell_outside_the_parameter_is_refused(tmp_path: Path) -> None:
    types = write_tiny_table(tmp_path)
    csv_path = tmp_path / "tiny.cpu1t.csv"
    csv_path.write_text(csv_path.read_text().replace("\n1,32,False", "\n1,33,False", 1))
    with pytest.raises(TableError, match=r"tiny.cpu1t.csv:2: res='33'"):
        load_table(load_hardware_types(types)["tiny:cpu1t"])


def test_the_replay_spec_narrows_fixed_parameters_and_swaps_memory_constraints(tmp_path: Path) -> None:
    table = tiny(tmp_path)
    spec, text = replay_spec(table, budget_trials=7, sampler="nsga2", options={"population_size": 4}, seed=3)
    assert spec.parameters["mode"].choices == ["a"]  # type: ignore[union-attr]
    constraints = [(c.metric, c.min, c.max) for c in spec.constraints]
    assert constraints == [("psnr_db", 18, None), ("peak_rss_gb", None, CAP_GB)]
    assert (spec.budget.trials, spec.budget.wall_time_s, spec.seed) == (7, None, 3)
    assert (spec.sampler.name, spec.sampler.options) == ("nsga2", {"population_size": 4})
    assert "peak_vram_gb" not in text


def test_the_exhaustive_front_holds_only_feasible_non_dominated_settings(tmp_path: Path) -> None:
    table = tiny(tmp_path)
    feasible = feasible_values(table)
    front = exhaustive_front(table)
    # 16 settings: 2 INVALID, 1 CRASH, 2 over the cap, 2 (steps=1, 32 px) under psnr 18 -> 9 feasible
    assert len(feasible) == 9
    assert set(front) <= set(feasible) and front
    for key, values in feasible.items():
        dominated = any(o[0] <= values[0] and o[1] <= values[1] and o != values for o in feasible.values())
        assert (key in front) == (not dominated)
