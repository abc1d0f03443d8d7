"""Skip what the front surely beats (issue 38, item 3a): a proposal whose predicted best case -- latency at the low
end of its interval, quality no better than the reference's own -- is dominated by the current front is recorded
SKIPPED_PREDICTED_DOMINATED and not run; a seeded share runs anyway as an audit, and an audited trial that joins
the front counts as a wrong skip."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.cli.main import main
from tuner.replay.methods import Method, Target, replay_once
from tuner.replay.table import load_hardware_types, load_table
from tuner.results import Outcome
from tuner.search.dominance import audit_counts, best_case, judge_proposal, skip_summary
from tuner.search.prediction import Prediction
from tuner.spec.loading import parse_spec
from tuner.spec.space import distributions
from tuner.storage.attributes import PREDICTION, SKIP_AUDIT

SPEC = """
name: dominated
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 60}
parameters:
  steps: {type: int, low: 2, high: 16}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {steps: 16}
budget: {trials: 10}
sampler: {name: tpe, skip_dominated: {audit_share: 0.0}}
seed: 3
"""


def frozen(number: int, latency: float, psnr: float, **attrs: Any) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        params={"steps": 16},
        distributions=distributions(parse_spec(SPEC)),
        values=[latency, psnr],
        user_attrs={"measured": True, "outcome": "OK", **attrs},
    )
    trial.number = number
    return trial


def latency(low: float) -> dict[str, Prediction]:
    return {"latency_p50_s": Prediction(low * 1.2, low, low * 1.5, 5, False)}


def test_the_best_case_is_the_low_latency_and_the_references_own_quality() -> None:
    spec = parse_spec(SPEC)
    assert best_case(spec, latency(2.0), [1.0, 100.0]) == (2.0, 100.0)
    assert best_case(spec, {}, [1.0, 100.0]) is None, "no prediction yet: nothing to judge"
    gt = parse_spec(SPEC.replace("psnr_db", "text_gt_exact_match"))
    assert best_case(gt, latency(2.0), [1.0, 0.5]) == (2.0, 1.0), "ground truth: its ideal, not the reference's"
    throughput = parse_spec(SPEC.replace("psnr_db", "throughput_items_per_s"))
    assert best_case(throughput, latency(2.0), [1.0, 3.0]) == (2.0, math.inf), "unbounded"


def test_a_proposal_slower_than_the_reference_at_best_is_skipped_with_the_trial_that_beats_it() -> None:
    spec = parse_spec(SPEC)
    reference = frozen(0, 1.0, 100.0)
    front = [reference, frozen(4, 0.3, 31.0)]
    verdict = judge_proposal(spec, latency(2.0), reference, front, 9, 0.0)
    assert verdict.skip and not verdict.audit and verdict.dominated_by == 0
    assert "trial 0" in verdict.reason and "latency_p50_s 2" in verdict.reason, verdict.reason
    assert not judge_proposal(spec, latency(0.9), reference, front, 9, 0.0).skip, "could be faster: runs"
    assert not judge_proposal(spec, {}, reference, front, 9, 0.0).skip, "no prediction: runs"
    assert not judge_proposal(spec, latency(2.0), None, front, 9, 0.0).skip, "no reference yet: runs"
    throughput = parse_spec(SPEC.replace("psnr_db", "throughput_items_per_s"))
    assert not judge_proposal(throughput, latency(2.0), reference, front, 9, 0.0).skip, "unbounded: never skipped"


def test_the_audit_draw_is_seeded_by_study_and_trial_and_near_its_share() -> None:
    spec = parse_spec(SPEC)
    reference = frozen(0, 1.0, 100.0)
    draws = [judge_proposal(spec, latency(2.0), reference, [reference], n, 0.1) for n in range(400)]
    again = [judge_proposal(spec, latency(2.0), reference, [reference], n, 0.1) for n in range(400)]
    assert [d.audit for d in draws] == [d.audit for d in again], "a replay repeats it"
    assert all(d.audit != d.skip for d in draws), "each dominated proposal is either skipped or audited"
    assert 20 <= sum(d.audit for d in draws) <= 60, "about 10 % of 400"
    assert draws[next(i for i, d in enumerate(draws) if d.audit)].audit_record() == {
        "front": [[1.0, 100.0]],
        "dominated_by": 0,
    }


def test_an_audited_trial_that_joins_the_front_is_a_wrong_skip() -> None:
    audit = {"front": [[1.0, 100.0], [0.3, 31.0]], "dominated_by": 0}
    joined = frozen(5, 0.5, 40.0, **{SKIP_AUDIT: audit})  # faster than the reference, better than trial 4
    beaten = frozen(6, 1.5, 40.0, **{SKIP_AUDIT: audit})
    plain = frozen(7, 0.1, 50.0)  # not an audit: not counted
    counts = audit_counts([joined, beaten, plain], ["minimize", "maximize"])
    assert (counts.audited, counts.wrong, counts.wrong_rate) == (2, 1, 0.5)
    line = skip_summary([joined, beaten, plain], ["minimize", "maximize"])
    assert line is not None and "2 audited" in line and "1 of them joined the front (wrong-skip rate 50%)" in line
    assert skip_summary([plain], ["minimize", "maximize"]) is None


@pytest.fixture(scope="module")
def avqa() -> Target:
    return Target.of(load_table(load_hardware_types()["avqa:cpu1t"]))


def test_a_replayed_study_skips_without_running_and_status_says_how_often_an_audit_was_wrong(
    avqa: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    method = Method(
        "skips",
        "tpe",
        options={"multivariate": True, "n_startup_trials": 5},
        skip_dominated={"audit_share": 0.1},
    )
    # a seed whose study skips some and audits some: 0 until the recorded predictions' residual process had fixed
    # scales (2026-12-07), 1 since (seed 0 then audits 3 and skips none)
    replay = replay_once(avqa, method, 1, 100, tmp_path)
    study = optuna.load_study(study_name="skips-seed1", storage=f"sqlite:///{tmp_path / 'skips-seed1.db'}")
    trials = study.get_trials(deepcopy=False)
    skipped = [t for t in trials if t.user_attrs.get("outcome") == Outcome.SKIPPED_PREDICTED_DOMINATED.value]
    assert skipped, "the avqa table has settings slower than its reference's perfect score: some get skipped"
    assert replay.skipped_dominated == len(skipped)
    measured = [t for t in trials if t.user_attrs.get("measured")]
    assert replay.runs == len(measured) == 100, "a skip is never run and not counted against the budget"
    for trial in skipped:
        assert not trial.user_attrs["measured"] and trial.user_attrs.get(PREDICTION), "recorded with its prediction"
        assert trial.user_attrs["reason"].startswith("predicted dominated: at best latency_p50_s")
    audited = [t for t in trials if SKIP_AUDIT in t.user_attrs]
    assert replay.audited == len(audited) and all(t.user_attrs["measured"] for t in audited), "audits ran"
    with pytest.raises(SystemExit):
        main(
            ["status", "skips-seed1", "--home", str(tmp_path), "--storage", f"sqlite:///{tmp_path / 'skips-seed1.db'}"]
        )
    out = " ".join(capsys.readouterr().out.split())
    assert f"{len(skipped)} skipped as predicted dominated (never run); {len(audited)} audited" in out, out
