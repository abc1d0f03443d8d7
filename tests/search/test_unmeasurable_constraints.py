"""A constraint that cannot be evaluated makes the trial infeasible (issue 24, item 4).

A constraint metric that is missing, unavailable, NaN or infinite, or a bound that evaluates to
NaN, is told to the sampler as a fixed violation with a reason naming the metric and its value;
the front, the export and the views all leave such a trial out, through one feasibility test.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.pareto import constraints_hold, front_trials, is_measured_feasible
from tuner.results import Metric, Outcome, TrialResult
from tuner.runner.base import Slot, TrialRequest
from tuner.search.objectives import (
    UNAVAILABLE_CONSTRAINT_VIOLATION,
    ActiveConstraint,
    ConstraintPlan,
    judge,
    plan_constraints,
)
from tuner.ship.export import ExportError, choose, choose_trial
from tuner.spec.loading import parse_spec
from tuner.storage.records import TrialRecord, record_feasible
from tuner.study.coordinator import Coordinator
from tuner.study.studies import create_study
from tuner.testing.inline_runner import InlineRunner
from tuner.tracking.dashboard import view_trial
from tuner.tracking.views import ranks_of

SPEC_TEXT = (Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text()
SPEC = parse_spec(SPEC_TEXT)
GPU_HOST = {"gpu_memory_gb": 10.0}  # peak_vram_gb <= 8.5 is active
VRAM_KEY = "peak_vram_gb<=8.5"
NVML_WHY = "NVML could not see the process"


def result(vram: Metric | None, psnr: float = 30.0) -> TrialResult:
    metrics = {
        "latency_p50_s": Metric("latency_p50_s", 0.1, "s", "minimize"),
        "psnr_db": Metric("psnr_db", psnr, "dB", "maximize"),
    }
    if vram is not None:
        metrics["peak_vram_gb"] = vram
    return TrialResult(Outcome.OK, metrics)


def vram(value: float | None, reason: str | None = None) -> Metric:
    return Metric("peak_vram_gb", value, "GB", "minimize", reason)


# --- judge: what the sampler is told --------------------------------------------------------------------


def test_violation_is_positive_and_graded_like_the_outcome_wall() -> None:
    assert UNAVAILABLE_CONSTRAINT_VIOLATION == 1.0


@pytest.mark.parametrize(
    ("metric", "shown"),
    [
        (vram(math.nan, NVML_WHY), f"constraint peak_vram_gb unavailable (nan): {NVML_WHY}"),
        (vram(math.inf, NVML_WHY), f"constraint peak_vram_gb unavailable (inf): {NVML_WHY}"),
        (vram(-math.inf), "constraint peak_vram_gb unavailable (-inf)"),
        (vram(math.nan), "constraint peak_vram_gb unavailable (nan)"),
        (vram(None, "no GPU"), "constraint peak_vram_gb unavailable (no value): no GPU"),
        (None, "constraint peak_vram_gb unavailable (not reported)"),
    ],
)
def test_an_unmeasurable_constraint_metric_is_a_violation_with_a_reason(metric: Metric | None, shown: str) -> None:
    plan = plan_constraints(SPEC, GPU_HOST)
    verdict = judge(SPEC, plan, result(metric), [])
    assert verdict.values == [0.1, 30.0], "the objectives are real measurements"
    assert verdict.constraints[VRAM_KEY] == UNAVAILABLE_CONSTRAINT_VIOLATION
    assert verdict.constraints["psnr_db>=15"] == 0.0 and verdict.constraints["outcome"] == 0.0
    assert not verdict.feasible and not verdict.placeholder
    assert verdict.reason == shown
    assert verdict.unavailable_constraints == {VRAM_KEY: shown}


def test_a_measured_constraint_is_graded_as_before() -> None:
    plan = plan_constraints(SPEC, GPU_HOST)
    inside = judge(SPEC, plan, result(vram(4.0)), [])
    assert inside.feasible and inside.reason is None and inside.unavailable_constraints == {}
    past = judge(SPEC, plan, result(vram(17.0)), [])
    assert past.constraints[VRAM_KEY] == pytest.approx(1.0) and not past.feasible and past.reason is None


def test_every_unmeasurable_constraint_is_named() -> None:
    plan = plan_constraints(SPEC, GPU_HOST)
    verdict = judge(SPEC, plan, result(vram(math.nan, NVML_WHY), psnr=math.nan), [])
    # psnr_db is an objective too: an unavailable objective fails the trial before any constraint is read
    assert verdict.values is None and verdict.reason is not None and "psnr_db" in verdict.reason
    two = parse_spec(
        SPEC_TEXT.replace(
            "  - {metric: psnr_db, min: 15}", "  - {metric: psnr_db, min: 15}\n  - {metric: ssim, min: 0.5}"
        )
    )
    verdict = judge(two, plan_constraints(two, GPU_HOST), result(vram(math.nan, NVML_WHY)), [])
    assert verdict.reason == (
        f"constraint peak_vram_gb unavailable (nan): {NVML_WHY}; constraint ssim unavailable (not reported)"
    )
    assert set(verdict.unavailable_constraints) == {VRAM_KEY, "ssim>=0.5"}
    assert verdict.constraints["ssim>=0.5"] == UNAVAILABLE_CONSTRAINT_VIOLATION


def test_a_count_constraint_that_comes_back_nan_is_a_violation() -> None:
    spec = parse_spec(
        SPEC_TEXT.replace("  - {metric: psnr_db, min: 15}", "  - {metric: lipsync_abs_lag_frames, max: 2}")
    )
    plan = plan_constraints(spec, {})
    frames = Metric("lipsync_abs_lag_frames", math.nan, "frames", "minimize", "fewer than 31 frames")
    verdict = judge(spec, plan, replace(result(None), metrics={**result(None).metrics, frames.name: frames}), [])
    assert verdict.constraints["lipsync_abs_lag_frames<=2"] == UNAVAILABLE_CONSTRAINT_VIOLATION
    assert verdict.reason == "constraint lipsync_abs_lag_frames unavailable (nan): fewer than 31 frames"
    held = replace(result(None), metrics={**result(None).metrics, frames.name: replace(frames, value=1.0)})
    assert judge(spec, plan, held, []).feasible


def test_a_bound_that_evaluates_to_nan_makes_every_trial_infeasible() -> None:
    plan = plan_constraints(SPEC, {"gpu_memory_gb": math.nan})
    [memory] = [c for c in plan.active if c.metric == "peak_vram_gb"]
    verdict = judge(SPEC, plan, result(vram(1.0)), [])
    assert verdict.constraints[memory.key] == UNAVAILABLE_CONSTRAINT_VIOLATION and not verdict.feasible
    assert verdict.reason is not None and verdict.reason.startswith("constraint peak_vram_gb unavailable")
    assert "nan" in verdict.reason and "bound" in verdict.reason


def test_a_violation_that_is_not_finite_is_unavailable() -> None:
    """A bound that came out infinite (specs refuse one; an expression may still yield it) cannot grade a miss."""
    wall = ActiveConstraint("peak_vram_gb<=-inf", "peak_vram_gb", -math.inf, None)
    assert math.isnan(wall.violation(1.0)), "not hidden as 0"
    verdict = judge(SPEC, ConstraintPlan((wall,)), result(vram(1.0)), [])
    assert not verdict.feasible
    assert verdict.reason == "constraint peak_vram_gb unavailable (1): its violation against peak_vram_gb<=-inf is nan"
    assert all(math.isfinite(v) and v >= 0 for v in verdict.constraints.values()), "Optuna refuses NaN"
    open_ended = ActiveConstraint("peak_vram_gb<=inf", "peak_vram_gb", math.inf, None)
    assert open_ended.violation(1.0) == 0.0 and open_ended.unevaluable(vram(1.0)) is None


# --- one feasibility test for stored trials ------------------------------------------------------------


def test_constraints_hold_is_the_one_test() -> None:
    assert constraints_hold({"outcome": 0.0, "a": -0.5})
    assert not constraints_hold({"outcome": 0.0, "a": 0.1})
    assert not constraints_hold({"a": math.nan}) and not constraints_hold({"a": -math.inf})
    assert not constraints_hold({"outcome": 0.0}, {"peak_vram_gb<=8.5": "not reported"})
    assert constraints_hold({"outcome": 0.0}, {})


def _stored(entries: list[tuple[list[float], dict[str, float], dict[str, object]]]) -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.set_user_attr("objectives", ["latency_p50_s", "psnr_db"])
    for values, constraints, attrs in entries:
        trial = study.ask()
        for key, value in constraints.items():
            trial.set_constraint(key, value)
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        study.tell(trial, values)
    return study


def test_a_trial_recorded_before_the_fix_is_left_out_too() -> None:
    """Older studies told an unmeasurable constraint as 0 and kept ``unavailable_constraints``:
    its attribute alone keeps such a trial off the front and out of the export."""
    study = _stored(
        [
            ([1.0, 10.0], {"outcome": 0.0, VRAM_KEY: 0.0}, {}),
            ([0.1, 30.0], {"outcome": 0.0, VRAM_KEY: 0.0}, {"unavailable_constraints": {VRAM_KEY: "not reported"}}),
            ([0.2, 5.0], {"outcome": 0.0, VRAM_KEY: -math.inf}, {}),
        ]
    )
    trials = study.get_trials()
    assert [t.number for t in front_trials(trials, ["minimize", "maximize"])] == [0]
    assert [is_measured_feasible(t) for t in trials] == [True, False, False]
    assert [record_feasible(TrialRecord.from_trial(t)) for t in trials] == [True, False, False]
    assert choose_trial(study).number == 0 and choose_trial(study, "psnr_db").number == 0
    with pytest.raises(ExportError, match="not a feasible measured trial"):
        choose(study, trial_number=1)
    assert choose(study, trial_number=0).record.number == 0


# --- a real study: the unmeasured trial would dominate, yet it is neither on the front nor shipped ------


class NvmlRunner(InlineRunner):
    """Reports ``peak_vram_gb`` as NVML would: 1 GB, but NaN (with why) for the fastest setting."""

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        measured = super().run(request, slot)
        blind = request.settings.get("sleep_s") == 0.001
        metric = vram(math.nan, NVML_WHY) if blind else vram(1.0)
        return replace(measured, metrics={**measured.metrics, "peak_vram_gb": metric})


def test_an_unmeasured_trial_that_would_dominate_is_not_on_the_front_nor_exported(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    opened = create_study(SPEC, SPEC_TEXT, url, "s", "tpe", None, {"spec_name": SPEC.name})
    fastest = {"sleep_s": 0.001, "noise": 0, "batch_size": 1}  # the reference's quality, 20x faster
    opened.study.enqueue_trial(fastest)
    opened.study.enqueue_trial(fastest)  # a copy of it
    plan = plan_constraints(SPEC, GPU_HOST)
    Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=NvmlRunner(),
        slots=[Slot(0, None, 1)],
        home=tmp_path,
        device="cpu",
        plan=plan,
        budget_trials=4,
        wall_time_s=None,
    ).run()
    trials = opened.study.get_trials()
    blind = next(t for t in trials if t.params == fastest and t.user_attrs.get("duplicate_of") is None)
    copy = next(t for t in trials if t.params == fastest and t.user_attrs.get("duplicate_of") is not None)
    reference = trials[0]
    assert blind.state == TrialState.COMPLETE and blind.user_attrs["outcome"] == "OK"
    assert blind.values[0] < reference.values[0] and blind.values[1] >= reference.values[1], "it would dominate"
    assert blind.constraints[VRAM_KEY] == UNAVAILABLE_CONSTRAINT_VIOLATION, "the sampler sees a violation"
    shown = f"constraint peak_vram_gb unavailable (nan): {NVML_WHY}"
    assert blind.user_attrs["reason"] == shown
    assert blind.user_attrs["unavailable_constraints"] == {VRAM_KEY: shown}
    assert copy.constraints[VRAM_KEY] == UNAVAILABLE_CONSTRAINT_VIOLATION and copy.user_attrs["reason"] == shown

    directions = ["minimize", "maximize"]
    front = {t.number for t in front_trials(trials, directions)}
    assert blind.number not in front and front, "the front holds measured settings only"
    assert choose_trial(opened.study).number != blind.number
    assert choose_trial(opened.study, "psnr_db").number != blind.number
    records = [TrialRecord.from_trial(t) for t in trials]
    assert blind.number not in ranks_of(records, directions), "MLflow: infeasible, unranked"
    assert view_trial(blind, ["latency_p50_s", "psnr_db"]).state == TrialState.PRUNED, "dashboard: infeasible"
    assert TrialRecord.from_trial(blind).reason == shown
    with pytest.raises(ExportError, match=r"not a feasible measured trial \(outcome OK: constraint peak_vram_gb"):
        choose(opened.study, trial_number=blind.number)
