"""``provenance.cost`` in an export: what finding the setting cost, on a stored GPU study (issue 26).

A study is stored in memory with the attributes a run writes: two measured settings on a two-GPU
slot, one that ran out of memory, a copy and a predicted OOM that ran nothing. The export's block
must sum them as :func:`tuner.storage.cost.study_cost` does, in GPU-hours, name the chosen trial's own
device-seconds and the budget, and round-trip through the ``tuner.config/v1`` schema; a file exported
before the block existed must still load (``tuner check`` reads old files).
"""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from tuner.ship.config_schema import ConfigError, validate_config
from tuner.ship.export import build_config, choose

NAMES = ["latency_p50_s", "psnr_db"]
HOUR = 3600.0


def _cost(device_s: float, devices: int = 2) -> dict[str, Any]:
    """A stored ``cost`` attribute: ``device_s`` split over the phases as a worker would report them."""
    phases = {"startup": 0.4, "warmup": 0.1, "measured": 0.4, "evaluation": 0.05, "finish": 0.05, "unattributed": 0.0}
    return {
        "device_s": device_s,
        "wall_s": device_s / devices,
        "devices": devices,
        "phases_device_s": {k: v * device_s for k, v in phases.items()},
    }


def _metrics(latency: float, psnr: float) -> dict[str, Any]:
    return {
        "latency_p50_s": {"value": latency, "unit": "s", "direction": "minimize"},
        "psnr_db": {"value": psnr, "unit": "dB", "direction": "maximize"},
    }


def _add(
    study: optuna.Study,
    outcome: str,
    values: tuple[float, float],
    role: str = "search",
    cost: dict[str, Any] | None = None,
    **attrs: Any,
) -> None:
    trial = study.ask()
    trial.set_constraint("outcome", 0.0 if outcome == "OK" else 1.0)
    for key, value in {
        "role": role,
        "outcome": outcome,
        "metrics": _metrics(*values),
        "slot": "gpu:0,1",
        "measured": cost is not None,
        **({"cost": cost} if cost else {}),
        **attrs,
    }.items():
        trial.set_user_attr(key, value)
    study.tell(trial, list(values))


@pytest.fixture
def gpu_study() -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.set_user_attr("objectives", NAMES)
    study.set_user_attr("device", "cuda")
    study.set_user_attr("budget_device_hours", 2.0)
    _add(study, "OK", (2.0, 30.0), role="baseline", cost=_cost(720.0))  # trial 0: 0.2 GPU-h
    _add(study, "OK", (1.0, 29.0), cost=_cost(360.0))  # trial 1: 0.1 GPU-h, the fastest
    _add(study, "OOM", (1e9, 0.0), cost=_cost(180.0), placeholder_values=True)  # trial 2: wasted
    _add(study, "OK", (1.0, 29.0), duplicate_of=1)  # trial 3: a copy of 1
    _add(study, "SKIPPED_PREDICTED_OOM", (1e9, 0.0), placeholder_values=True)  # trial 4: never ran
    return study


def test_the_export_says_what_finding_the_setting_cost_in_gpu_hours(gpu_study: optuna.Study) -> None:
    choice = choose(gpu_study, objective="latency_p50_s")
    assert choice.record.number == 1
    document = build_config(gpu_study, choice.record, "sqlite:///x.db", choice.policy)
    cost = document["provenance"]["cost"]
    assert cost["unit"] == "GPU-h" and cost["device"] == "cuda" and cost["budget_device_hours"] == 2.0
    assert cost["used_device_h"] == pytest.approx((720 + 360) / HOUR, abs=1e-6)
    assert cost["wasted_device_h"] == pytest.approx(180 / HOUR, abs=1e-6)
    assert cost["recorded_device_h"] == pytest.approx(cost["used_device_h"] + cost["wasted_device_h"], abs=2e-6)
    assert cost["recorded_device_s"] == 1260.0 and cost["runs"] == 3
    # a copy avoided its original's cost (360), a predicted OOM the median OOM run's (180)
    assert cost["avoided_device_h"] == pytest.approx((360 + 180) / HOUR, abs=1e-6)
    assert cost["used_trials"] == {"OK": 2} and cost["wasted_trials"] == {"OOM": 1}
    assert cost["avoided_trials"] == {"copy": 1, "predicted OOM": 1}
    assert "median OOM run" in cost["avoided_estimate"] and cost["runs_without_cost"] == 0
    assert cost["trial_device_s"] == 360.0, "the chosen trial's own run, on its two GPUs"
    assert validate_config(document).to_document() == document


def test_an_export_from_before_the_cost_block_still_loads(gpu_study: optuna.Study) -> None:
    document = build_config(gpu_study, choose(gpu_study).record, "sqlite:///x.db")
    del document["provenance"]["cost"]
    loaded = validate_config(document, "old.yaml")
    assert loaded.provenance.cost is None and loaded.to_document()["provenance"]["cost"] is None


def test_a_malformed_cost_block_is_refused_naming_the_key(gpu_study: optuna.Study) -> None:
    document = build_config(gpu_study, choose(gpu_study).record, "sqlite:///x.db")
    document["provenance"]["cost"]["used_device_h"] = "a lot"
    with pytest.raises(ConfigError, match=r"provenance\.cost\.used_device_h"):
        validate_config(document, "bad.yaml")
    document["provenance"]["cost"] = {
        **build_config(gpu_study, choose(gpu_study).record, "sqlite:///x.db")["provenance"]["cost"],
        "extra": 1,
    }
    with pytest.raises(ConfigError, match=r"provenance\.cost\.extra"):
        validate_config(document, "bad.yaml")
