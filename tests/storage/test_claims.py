"""Claims the docs make that had no test: the exhausted stops, --wall-time, placeholders never logged."""

from __future__ import annotations

from pathlib import Path

from tuner.runner.base import Slot
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.storage.records import TrialRecord
from tuner.study.budgets import EXHAUSTED_AFTER
from tuner.study.coordinator import Coordinator
from tuner.study.studies import create_study
from tuner.testing.inline_runner import InlineRunner
from tuner.tracking.run_info import study_run_info
from tuner.tracking.views import child_payload

SPEC_TEXT = (Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text()


def open_new(tmp_path: Path, text: str, sampler: str = "tpe"):
    spec = parse_spec(text)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    return create_study(spec, text, url, "s", sampler, None, {"spec_name": spec.name})  # type: ignore[arg-type]


def coordinator(opened, tmp_path: Path, wall_time_s: float | None = None) -> Coordinator:
    plan = plan_constraints(opened.spec, {"gpu_memory_gb": None, "host_memory_gb": 24.0})
    return Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=InlineRunner(),
        slots=[Slot(0, None, 1)],
        home=tmp_path,
        device="cpu",
        plan=plan,
        budget_trials=opened.study.user_attrs["budget_trials"],
        wall_time_s=wall_time_s,
    )


TINY = (
    SPEC_TEXT.replace(
        "sleep_s: {type: float, low: 0.001, high: 0.02, step: 0.001}",
        "sleep_s: {type: categorical, choices: [0.001, 0.02]}",
    )
    .replace("noise: {type: int, low: 0, high: 40, step: 5}", "noise: {type: categorical, choices: [0, 5]}")
    .replace("trials: 8", "trials: 50")
)


def test_a_space_with_nothing_new_to_run_ends_as_exhausted(tmp_path: Path) -> None:
    """8 settings and a budget of 50: once every proposal is a copy, 100 in a row end the study."""
    summary = coordinator(open_new(tmp_path, TINY), tmp_path).run()
    assert summary.stopped_because.startswith(f"search space exhausted ({EXHAUSTED_AFTER} proposals")
    assert summary.measured <= 8 and summary.failure is None


def test_a_grid_ends_when_every_setting_was_proposed(tmp_path: Path) -> None:
    summary = coordinator(open_new(tmp_path, TINY, sampler="grid"), tmp_path).run()
    assert summary.stopped_because == "grid exhausted: every setting was proposed"
    assert summary.measured <= 8


def test_wall_time_ends_the_invocation_before_the_budget(tmp_path: Path) -> None:
    slow = (
        SPEC_TEXT.replace(
            "sleep_s: {type: float, low: 0.001, high: 0.02, step: 0.001}",
            "sleep_s: {type: float, low: 0.3, high: 0.4, step: 0.05}",
        )
        .replace("sleep_s: 0.02", "sleep_s: 0.3")
        .replace("trials: 8", "trials: 40")
    )
    summary = coordinator(open_new(tmp_path, slow), tmp_path, wall_time_s=2.0).run()
    assert summary.stopped_because.startswith("wall time") and 1 <= summary.measured < 40, summary.stopped_because


def test_placeholder_values_never_become_mlflow_metrics(tmp_path: Path) -> None:
    """OOM walls and rule-breaking proposals carry placeholder values: no MLflow metric shows them."""
    text = SPEC_TEXT.replace(
        "  batch_size: {type: categorical, choices: [1, 2]}\n",
        "  batch_size: {type: categorical, choices: [1, 2]}\n"
        "  behaviour: {type: categorical, choices: [ok, device_oom]}\n",
    ).replace("batch_size: 1}", "batch_size: 1, behaviour: ok}")
    opened = open_new(tmp_path, text)
    opened.study.enqueue_trial({"sleep_s": 0.001, "noise": 5, "batch_size": 1, "behaviour": "device_oom"})
    opened.study.enqueue_trial({"sleep_s": 0.001, "noise": 40, "batch_size": 2, "behaviour": "ok"})  # a rule says no
    coordinator(opened, tmp_path).run()
    records = [TrialRecord.from_trial(t) for t in opened.study.get_trials()]
    walls = [r for r in records if r.placeholder]
    assert {r.outcome for r in walls} >= {"OOM", "INVALID"}
    info = study_run_info(opened.study, opened.spec, opened.storage_url)
    for record in walls:
        assert record.values is not None
        logged = child_payload(record, info, "parent").metrics
        timings = {"worker_wall_time_s", "eval_time_s", "device_s"}  # what the run really took, not its values
        predicted = {k for k in logged if k.startswith("predicted.")}  # what was predicted before (a skip has one)
        assert not {k for k in logged if not k.startswith("constraint.") and k not in timings | predicted}, logged
        assert not set(record.values) & set(logged.values()), "a placeholder value was logged"
