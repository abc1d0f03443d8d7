"""Noisy trials on stored / synthetic records: the one definition, stable preference, warnings in the export.

A noisy trial (latency CV above ``NOISY_CV``) is never shipped over a stable trial within its
spread, and an export that still ships one, or compares with a noisy baseline, says so.
"""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from tuner.front.choice import parse_policy, prefer_stable, select, within_spread
from tuner.front.report import front_table
from tuner.ship.config_schema import validate_config
from tuner.ship.export import build_config, choose
from tuner.ship.export_warnings import noise_warnings
from tuner.storage.records import NOISY_CV, TrialRecord

DIRECTIONS = ["minimize", "maximize"]
NAMES = ["latency_p50_s", "psnr_db"]


def metrics(
    latency: float, psnr: float, cv: float | None, repeats: int = 10, flagged: bool | None = None
) -> dict[str, Any]:
    noisy_flag = flagged if flagged is not None else (cv is not None and cv > 0.1)
    return {
        "latency_p50_s": {"value": latency, "unit": "s", "direction": "minimize"},
        "psnr_db": {"value": psnr, "unit": "dB", "direction": "maximize"},
        "latency_cv": (
            {"value": cv, "unit": "1", "direction": "minimize"}
            if cv is not None
            else {"value": None, "unit": "1", "direction": "minimize", "reason": "needs at least two repeats"}
        ),
        "latency_noisy": {
            "value": (1.0 if noisy_flag else 0.0) if cv is not None else None,
            "unit": "1",
            "direction": "minimize",
        },
        "repeats": {"value": float(repeats), "unit": "count", "direction": "maximize"},
    }


def record(
    number: int, latency: float, psnr: float, cv: float | None, role: str = "search", flagged: bool | None = None
) -> TrialRecord:
    return TrialRecord(
        number=number,
        state="COMPLETE",
        role=role,
        outcome="OK",
        reason=None,
        params={"n": number},
        derived={},
        values=(latency, psnr),
        constraints={},
        metrics=metrics(latency, psnr, cv, flagged=flagged),
        placeholder=False,
        duplicate_of=None,
        slot="cpu:0",
        wall_time_s=1.0,
        eval_time_s=0.1,
        datetime_start=None,
        datetime_complete=None,
    )


def test_one_definition_of_noisy() -> None:
    assert NOISY_CV == 0.10
    assert record(0, 1.0, 30.0, 0.21).noisy and not record(1, 1.0, 30.0, 0.02).noisy
    assert not record(2, 1.0, 30.0, NOISY_CV).noisy, "the threshold itself is still stable"
    assert record(3, 1.0, 30.0, 0.07, flagged=True).noisy, "a stricter measurement.noisy_cv counts"
    assert not record(4, 1.0, 30.0, None).noisy, "no CV: nothing says it is noisy"
    assert record(0, 1.0, 30.0, 0.21).latency_cv == 0.21


def test_noisy_pick_is_replaced_by_a_stable_trial_within_its_spread() -> None:
    noisy, stable = record(0, 1.00, 30.0, 0.21), record(1, 1.00, 30.0, 0.02)
    policy = parse_policy("minimize latency_p50_s")
    assert select(policy, [noisy, stable], DIRECTIONS).number == 0, "the policy alone ties and takes the lower number"
    keys = [("latency_p50_s", "minimize")]
    shipped, replaced = prefer_stable(noisy, [noisy, stable], keys)
    assert (shipped.number, replaced) == (1, noisy)
    slightly_slower = record(2, 1.15, 30.0, 0.03)
    assert within_spread(slightly_slower, noisy, keys), "15 % slower is inside a 21 % spread"
    assert prefer_stable(noisy, [noisy, slightly_slower], keys)[0].number == 2
    far = record(3, 1.30, 30.0, 0.03)
    assert prefer_stable(noisy, [noisy, far], keys) == (noisy, None), "beyond the spread: the noisy pick stays"
    other_noisy = record(4, 1.0, 30.0, 0.5)
    assert prefer_stable(noisy, [noisy, other_noisy], keys) == (noisy, None), "only a stable trial replaces"
    assert prefer_stable(stable, [noisy, stable], keys) == (stable, None)


def test_quality_is_not_traded_for_stability() -> None:
    noisy, worse_quality = record(0, 1.0, 30.0, 0.3), record(1, 1.0, 29.0, 0.02)
    keys = [("latency_p50_s", "minimize"), ("psnr_db", "maximize")]
    assert not within_spread(worse_quality, noisy, keys), "quality numbers are deterministic: no spread on them"
    assert within_spread(record(2, 1.1, 30.0, 0.02), noisy, keys)


def _stored(trials: list[TrialRecord]) -> optuna.Study:
    study = optuna.create_study(directions=DIRECTIONS)
    study.set_user_attr("objectives", NAMES)
    for item in trials:
        trial = study.ask()
        trial.set_constraint("outcome", 0.0)
        trial.set_user_attr("role", item.role)
        trial.set_user_attr("outcome", "OK")
        trial.set_user_attr("metrics", dict(item.metrics))
        study.tell(trial, list(item.values or ()))
    return study


@pytest.mark.parametrize(
    "how",
    [
        {},
        {"policy": "minimize latency_p50_s"},
        {"policy": "knee"},
        {"profile": "fast"},
        {"policy": "lexicographic latency_p50_s, psnr_db"},
        {"profile": "balanced"},
    ],
)
def test_export_never_ships_a_noisy_trial_over_a_stable_one_at_equal_latency(how: dict[str, str]) -> None:
    # trial 0: the baseline; trial 1: noisy (CV 0.21) and a hair faster; trial 2: stable at equal latency.
    study = _stored(
        [record(0, 2.0, 25.0, 0.02, role="baseline"), record(1, 0.99, 30.0, 0.21), record(2, 1.0, 30.0, 0.02)]
    )
    choice = choose(study, **how)
    assert choice.record.number == 2 and choice.replaced is not None and choice.replaced.number == 1, how
    document = build_config(
        study, choice.record, "sqlite:///x.db", choice.policy, choice.profile, replaced_noisy=choice.replaced.number
    )
    assert document["selection"]["replaced_noisy_trial"] == 1 and document["warnings"] == []
    assert document["spread"]["noisy"] is False and document["baseline"]["spread"]["noisy"] is False
    assert validate_config(document).to_document() == document


def test_shipping_a_noisy_trial_or_a_noisy_baseline_warns_in_the_document() -> None:
    study = _stored(
        [record(0, 2.0, 25.0, 0.3, role="baseline"), record(1, 1.0, 30.0, 0.21), record(2, 1.5, 30.0, 0.02)]
    )
    choice = choose(study, policy="minimize latency_p50_s")
    assert choice.record.number == 1 and choice.replaced is None, "the stable trial is 50 % slower: beyond the spread"
    document = build_config(study, choice.record, "sqlite:///x.db", choice.policy)
    text = " ".join(document["warnings"])
    assert len(document["warnings"]) == 2 and "shipped trial (trial 1) is noisy: latency CV 0.21 > 0.1" in text
    assert "the baseline (trial 0) is noisy: latency CV 0.3" in text and "speed-up 2x" in text
    assert document["spread"]["noisy"] is True and document["baseline"]["spread"]["noisy"] is True
    assert validate_config(document).to_document() == document
    explicit = choose(study, trial_number=1)
    assert explicit.record.number == 1 and explicit.replaced is None, "--trial is never replaced"


def test_warnings_name_the_uncertainty_and_old_documents_still_load() -> None:
    noisy, base = record(1, 1.0, 30.0, 0.21), record(0, 2.0, 25.0, 0.02, role="baseline")
    (warning,) = noise_warnings(noisy, base, 2.0)
    assert "±8%" in warning and "speed-up 2x" in warning, warning  # sqrt(pi/2) x 0.21 / sqrt(10) = 8.3 %
    assert noise_warnings(base, None, None) == []
    study = _stored([base, record(1, 1.0, 30.0, 0.02)])
    document = build_config(study, choose(study).record, "sqlite:///x.db")
    del document["warnings"], document["selection"]["replaced_noisy_trial"]
    loaded = validate_config(document)
    assert loaded.warnings == [] and loaded.selection.replaced_noisy_trial is None


def test_front_rows_carry_the_noisy_flag() -> None:
    rows = front_table([record(0, 1.0, 30.0, 0.21), record(1, 2.0, 40.0, 0.02)], {0, 1}, NAMES)
    assert [row["noisy"] for row in rows] == [True, False]


def test_a_measurement_the_time_limit_cut_short_is_warned_about() -> None:
    from dataclasses import replace

    note = "1 of 3-6 repeats and 1/1 warmup fit in 70% of the 20 s limit"
    shipped = replace(record(1, 1.0, 30.0, None), cut_short=note)
    base = record(0, 2.0, 25.0, 0.02, role="baseline")
    (warning,) = noise_warnings(shipped, base, 2.0)
    assert warning.startswith("the shipped trial (trial 1) was measured with fewer repeats than the spec asks: " + note)
    assert "workload.timeout_s" in warning
    both = noise_warnings(shipped, replace(base, cut_short=note), 2.0)
    assert len(both) == 2 and both[1].startswith("the baseline (trial 0) was measured with fewer repeats")
