"""A replayed warm worker pays a reload only when a ``reload_on`` value changes (issue 38, item 4): the cost
model reads from the table's measured samples (run order) what a run that kept its loaded model and one that
loaded it cost, and the replay runner charges each run by what its slot had loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.replay.cost_model import ReplayCostModel, reload_split
from tuner.replay.runner import ReplayRunner
from tuner.replay.table import load_hardware_types, load_table
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.measure.phases import INFO_KEY


def sample(precision: str, startup: float, outcome: str = "OK") -> dict[str, Any]:
    return {"settings": {"precision": precision}, "phases_s": {"startup": startup}, "outcome": outcome}


def test_the_split_reads_reloads_from_consecutive_samples_and_leaves_the_first_out() -> None:
    samples = [
        sample("fp32", 9.0),
        sample("fp32", 0.01),
        sample("bf16", 0.4),
        sample("bf16", 0.02),
        sample("fp32", 0.5),
    ]
    assert reload_split(samples, ("precision",)) == pytest.approx((0.015, 0.45))
    assert reload_split(samples[:2], ("precision",)) is None, "no reload measured: not modelled"
    failed = [sample("fp32", 9.0), sample("bf16", 0.4, outcome="CRASH"), sample("bf16", 0.02)]
    assert reload_split(failed, ("precision",)) is None, "a failed run says nothing; the next kept bf16 loaded"


def test_a_replayed_run_pays_the_reload_only_when_its_precision_changes(tmp_path: Path) -> None:
    table = load_table(load_hardware_types()["wan_tiny:cpu1t"])
    model = ReplayCostModel.of(table)
    assert model.reload_on == ("precision",) and model.reload_s is not None
    assert model.reload_s > 10 * model.startup_s, "the committed samples: a reload 0.3 s, a kept model ~0.01 s"
    runner = ReplayRunner(table)
    reference = dict(table.spec.reference or {})
    startups = []
    for number, precision in enumerate(["fp32", "fp32", "bf16", "bf16", "fp32"]):
        request = TrialRequest(
            study_name="s",
            trial_number=number,
            workload_class="tuner.adapters.python:PythonAdapterWorkload",
            settings={**reference, "precision": precision},
            inputs={},
            seed=0,
            device="cpu",
            measurement={},
            timeout_s=10,
            workdir=str(tmp_path / f"t{number}"),
        )
        (tmp_path / f"t{number}").mkdir()
        startups.append(runner.run(request, Slot(0, None, 1)).info[INFO_KEY]["startup"])
    loads, kept = model.reload_s, model.startup_s
    assert startups == pytest.approx([loads, kept, loads, kept, loads]), "the first run loads; each change reloads"
