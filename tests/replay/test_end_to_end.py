"""Replays through the real coordinator, and the benchmark's entry point, on a tiny SYNTHETIC table."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import optuna
import pytest
from replay_fixtures import write_tiny_table

from tuner.pareto import front_trials
from tuner.replay.methods import Method, Target, replay_once
from tuner.replay.table import exhaustive_front, load_hardware_types, load_table
from tuner.spec.candidate import canonical_key

ROOT = Path(__file__).resolve().parents[2]


def test_the_sweep_replayed_through_the_coordinator_finds_the_exhaustive_front(tmp_path: Path) -> None:
    table = load_table(load_hardware_types(write_tiny_table(tmp_path / "table"))["tiny:cpu1t"])
    replay = replay_once(
        Target.of(table),
        Method("sweep", "sweep", deterministic=True, whole_space=True),
        seed=0,
        budget=5,
        workdir=tmp_path / "run",
    )
    study = optuna.load_study(study_name="sweep-seed0", storage=f"sqlite:///{tmp_path / 'run' / 'sweep-seed0.db'}")
    trials = study.get_trials()
    found = {canonical_key(t.params) for t in front_trials(trials, ["minimize", "minimize"])}
    assert found == set(exhaustive_front(table))
    assert replay.fractions[-1] == pytest.approx(1.0)
    # every setting once; the two rule-refused ones are free, the rest ran (the recorded CRASH included)
    assert len(trials) == 16 and replay.runs == 14 == len(replay.fractions)
    outcomes = sorted(t.user_attrs["outcome"] for t in trials)
    assert outcomes.count("INVALID") == 2 and outcomes.count("CRASH") == 1


def test_a_study_budget_counts_measured_trials_only(tmp_path: Path) -> None:
    table = load_table(load_hardware_types(write_tiny_table(tmp_path / "table"))["tiny:cpu1t"])
    replay = replay_once(Target.of(table), Method("random", "random"), seed=3, budget=6, workdir=tmp_path / "run")
    assert len(replay.fractions) == 6 == replay.runs
    assert replay.fractions == sorted(replay.fractions)  # a hypervolume never shrinks


def _bench():
    spec = importlib.util.spec_from_file_location("search_efficiency", ROOT / "bench" / "search_efficiency.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bench_quick_entry_point_ends_with_the_default_against_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tiny_table(tmp_path / "tables")
    code = _bench().main(
        [
            "--quick",
            "--table-dir",
            str(tmp_path / "tables"),
            "--tables",
            "tiny:cpu1t",
            "--results-dir",
            str(tmp_path / "results"),
            "--methods",
            "sweep,random,tpe,default",
            "--seeds",
            "2",
            "--budget",
            "12",
        ]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert re.fullmatch(
        r"tiny:cpu1t: default (reaches 95 % of the front's hypervolume in \d+ trials \(median\) = "
        r"\d+\.\d\d x the sweep's \d+|does not reach 95 % .*)",
        lines[-1],
    ), lines[-1]
    assert any(line.startswith("default ") for line in lines[:-1])  # the table row
    assert any("same sampler and options as tpe" in line for line in lines)
    assert (tmp_path / "results" / "search_efficiency_tiny_cpu1t.png").stat().st_size > 0
    assert (tmp_path / "results" / "search_efficiency_tiny_cpu1t.json").exists()


def test_the_bench_parses_variants_into_sampler_options() -> None:
    method = _bench().parse_variant("tpe:n_startup_trials=10,multivariate=false")
    assert (method.name, method.sampler, dict(method.options)) == (
        "tpe:n_startup_trials=10,multivariate=false",
        "tpe",
        {"n_startup_trials": 10, "multivariate": False},
    )
