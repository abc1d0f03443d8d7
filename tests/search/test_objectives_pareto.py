"""Verdicts told to the sampler, and Pareto fronts over stored trials."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.pareto import Point, dominates, front_trials, pareto_ranks
from tuner.results import Metric, Outcome, TrialResult
from tuner.search.objectives import judge, placeholder_value, plan_constraints
from tuner.ship.export import ExportError, choose_trial
from tuner.spec.loading import parse_spec

SPEC = parse_spec((Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text())


def ok(latency: float, psnr: float) -> TrialResult:
    return TrialResult(
        Outcome.OK,
        {
            "latency_p50_s": Metric("latency_p50_s", latency, "s", "minimize"),
            "psnr_db": Metric("psnr_db", psnr, "dB", "maximize"),
        },
    )


def test_constraint_plan_disables_what_this_host_cannot_evaluate() -> None:
    cpu = plan_constraints(SPEC, {"gpu_memory_gb": None})
    assert [c.key for c in cpu.active] == ["psnr_db>=15"]
    assert "needs gpu_memory_gb" in cpu.disabled["peak_vram_gb"]
    gpu = plan_constraints(SPEC, {"gpu_memory_gb": 100.0})
    assert gpu.active[0].key == "peak_vram_gb<=85" and gpu.active[0].max_value == pytest.approx(85.0)


def test_graded_violation() -> None:
    plan = plan_constraints(SPEC, {"gpu_memory_gb": None})
    verdict = judge(SPEC, plan, ok(0.1, 12.0), [])
    assert verdict.constraints["psnr_db>=15"] == pytest.approx(0.2)  # 3 dB short of 15: 20 %
    assert verdict.constraints["outcome"] == 0.0 and not verdict.feasible
    assert judge(SPEC, plan, ok(0.1, 30.0), []).feasible


def test_oom_and_timeout_are_placeholder_points_worse_than_measured() -> None:
    plan = plan_constraints(SPEC, {})
    measured = [[0.1, 30.0], [0.3, 40.0]]
    verdict = judge(SPEC, plan, TrialResult(Outcome.OOM, reason="out of memory"), measured)
    assert verdict.placeholder and verdict.constraints["outcome"] == 1.0
    assert verdict.values is not None and verdict.values[0] > 0.3 and verdict.values[1] < 30.0
    assert placeholder_value("minimize", []) == 1e6 and placeholder_value("maximize", []) == -1e6


def test_crash_and_unavailable_objectives_fail() -> None:
    plan = plan_constraints(SPEC, {})
    assert judge(SPEC, plan, TrialResult(Outcome.CRASH, reason="boom"), []).values is None
    missing = TrialResult(
        Outcome.OK,
        {
            "latency_p50_s": Metric("latency_p50_s", 0.1, "s", "minimize"),
            "psnr_db": Metric.unavailable("psnr_db", "dB", "maximize", "no video"),
        },
    )
    verdict = judge(SPEC, plan, missing, [])
    assert verdict.values is None and verdict.reason == "objective psnr_db unavailable: no video"


def test_pareto_ranks() -> None:
    directions = ["minimize", "maximize"]
    points = [Point(0, (1.0, 10.0)), Point(1, (2.0, 20.0)), Point(2, (2.0, 5.0)), Point(3, (3.0, 4.0))]
    assert pareto_ranks(points, directions) == {0: 0, 1: 0, 2: 1, 3: 2}
    assert dominates((1.0, 10.0), (2.0, 5.0), directions)
    assert not dominates((1.0, 10.0), (1.0, 10.0), directions)


def _study_with(values: list[tuple[list[float], dict[str, float], dict[str, object]]]) -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.set_user_attr("objectives", ["latency_p50_s", "psnr_db"])
    for vals, constraints, attrs in values:
        trial = study.ask()
        for key, value in constraints.items():
            trial.set_constraint(key, value)
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        study.tell(trial, vals)
    return study


def test_front_excludes_infeasible_placeholders_and_copies() -> None:
    study = _study_with(
        [
            ([1.0, 10.0], {"outcome": 0.0}, {}),
            ([0.5, 5.0], {"outcome": 1.0}, {"placeholder_values": True}),
            ([2.0, 20.0], {"outcome": 0.0}, {}),
            ([0.1, 30.0], {"outcome": 0.0, "psnr": 0.5}, {}),
            ([1.0, 10.0], {"outcome": 0.0}, {"duplicate_of": 0}),
        ]
    )
    assert [t.number for t in front_trials(study.trials, ["minimize", "maximize"])] == [0, 2]
    assert choose_trial(study).number == 0
    assert choose_trial(study, "psnr_db").number == 2


def test_export_without_a_feasible_trial_is_a_clear_error() -> None:
    study = _study_with([([0.5, 5.0], {"outcome": 1.0}, {"placeholder_values": True})])
    with pytest.raises(ExportError, match="no feasible measured trial"):
        choose_trial(study)
    with pytest.raises(ExportError, match="unknown objective"):
        choose_trial(study, "ssim")
