"""The headline compares with what passes (issue 41): the chosen trial's speed-up is stated against the
baseline when the baseline meets the export rule, else against the reference, and says how the baseline
fails it. The demo's case: the baseline is faster than the shipped trial but far from the reference."""

from __future__ import annotations

from typing import Any

from tuner.front.headline import headline, rule_misses
from tuner.session.events import FrontSummary
from tuner.session.front_lines import chosen_text, front_lines
from tuner.storage.records import TrialRecord

RULE = "minimize latency_p50_s subject to stlpips_alex <= 0.015"


def record(
    number: int, latency: float, distance: float, role: str = "search", constraints: dict[str, float] | None = None
) -> TrialRecord:
    metrics: dict[str, dict[str, Any]] = {
        "latency_p50_s": {"value": latency, "unit": "s", "direction": "minimize"},
        "stlpips_alex": {"value": distance, "unit": "1", "direction": "minimize"},
    }
    return TrialRecord(
        number=number,
        state="COMPLETE",
        role=role,
        outcome="OK",
        reason=None,
        params={"q": number},
        derived={},
        values=(latency, distance),
        constraints=constraints or {},
        metrics=metrics,
        placeholder=False,
        duplicate_of=None,
        slot="cpu:0",
        wall_time_s=1.0,
        eval_time_s=0.1,
        datetime_start=None,
        datetime_complete=None,
    )


REFERENCE = record(0, 10.26, 0.0, "reference")
FAILING_BASELINE = record(1, 1.769, 0.1062, "baseline")
PASSING_BASELINE = record(1, 2.5, 0.01, "baseline")
CHOSEN = record(7, 7.07, 0.00155)


def test_a_baseline_that_fails_the_rule_gives_way_to_the_reference_and_is_said_to_fail() -> None:
    assert rule_misses(FAILING_BASELINE, RULE) == ["stlpips_alex 0.1062 > 0.015 (7.1x the bound)"]
    said = headline(CHOSEN, FAILING_BASELINE, REFERENCE, RULE, "latency_p50_s")
    assert said is not None and said.against == "reference" and said.comparator.number == 0
    assert said.speedup is not None and said.speedup > 1
    assert said.text() == (
        "1.45x faster than the reference (trial 0); the baseline (trial 1) fails the export "
        "rule: stlpips_alex 0.1062 > 0.015 (7.1x the bound)"
    )
    document = said.document()
    assert document["against"] == "reference" and document["trial"] == 0 and document["baseline_meets_rule"] is False
    assert document["baseline_misses"] == ["stlpips_alex 0.1062 > 0.015 (7.1x the bound)"]


def test_a_baseline_that_meets_the_rule_is_the_comparator() -> None:
    assert rule_misses(PASSING_BASELINE, RULE) == []
    said = headline(CHOSEN, PASSING_BASELINE, REFERENCE, RULE, "latency_p50_s")
    assert said is not None and said.against == "baseline" and said.baseline_misses == ()
    assert said.text() == "2.83x slower than the baseline (trial 1)"
    assert said.document()["baseline_meets_rule"] is True


def test_an_infeasible_baseline_fails_any_rule_even_the_knee() -> None:
    broken = record(1, 1.0, 0.001, "baseline", constraints={"psnr_db": 2.5})
    assert rule_misses(broken, "knee") == ["infeasible (psnr_db)"]
    said = headline(CHOSEN, broken, REFERENCE, "knee", "latency_p50_s")
    assert said is not None and said.against == "reference"


def test_the_closing_front_states_the_headline_and_takes_every_speed_up_against_its_comparator() -> None:
    said = headline(CHOSEN, FAILING_BASELINE, REFERENCE, RULE, "latency_p50_s")
    summary = FrontSummary(
        ("latency_p50_s", "stlpips_alex"),
        ("minimize", "minimize"),
        {"latency_p50_s": "s", "stlpips_alex": ""},
        (REFERENCE, CHOSEN, FAILING_BASELINE),
        7,
        f"{RULE} (the spec's export rule)",
        FAILING_BASELINE,
        REFERENCE,
        "latency_p50_s",
        CHOSEN,
        said,
    )
    assert summary.speedup(CHOSEN) == said.speedup and summary.speedup(REFERENCE) == 1.0
    text = chosen_text(summary)
    assert "1.45x faster than the reference (trial 0)" in text and "fails the export rule" in text, text
    lines = front_lines(summary, 80)
    assert "speed-up vs the reference (trial 0)" in " ".join(line.strip() for line in lines), lines
    assert all(len(line) <= 80 for line in lines), lines


def test_best_yaml_and_mlflow_state_the_same_headline() -> None:
    """The export's ``selection.headline`` and the MLflow ``tuner.headline`` tag, from one stored study."""
    import optuna

    from tuner.ship.export import build_config, choose
    from tuner.spec.loading import parse_spec
    from tuner.tracking.run_info import StudyRunInfo
    from tuner.tracking.views import HEADLINE_TAG, headline_view

    study = optuna.create_study(directions=["minimize", "minimize"])
    study.set_user_attr("objectives", ["latency_p50_s", "stlpips_alex"])
    for trial in (REFERENCE, FAILING_BASELINE, record(2, 0.5, 0.2), CHOSEN):
        study.add_trial(
            optuna.trial.create_trial(
                params={},
                distributions={},
                values=list(trial.values or ()),
                user_attrs={"measured": True, "outcome": "OK", "role": trial.role, "metrics": dict(trial.metrics)},
            )
        )
    demo = __import__("pathlib").Path(__file__).resolve().parents[2] / "search_spaces" / "avatar_demo.yaml"
    study.set_user_attr("spec_yaml", demo.read_text())
    chosen = choose(study)
    assert chosen.record.number == 3 and chosen.policy == RULE
    document = build_config(study, chosen.record, "sqlite:///x.db", chosen.policy, rule=chosen.rule)
    said = document["selection"]["headline"]
    assert said["against"] == "reference" and said["trial"] == 0 and said["speedup"] > 1
    assert said["baseline_meets_rule"] is False and "fails the export rule" in said["text"]
    spec = parse_spec(demo.read_text())
    info = StudyRunInfo(
        "s", "e", {}, {}, ("latency_p50_s", "stlpips_alex"), ("minimize", "minimize"), export_rule=spec.export_rule
    )
    records = [TrialRecord.from_trial(t) for t in study.trials]
    assert headline_view(records, info) == f"trial 3: {said['text']}" and HEADLINE_TAG == "tuner.headline"
