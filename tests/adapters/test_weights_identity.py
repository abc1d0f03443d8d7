"""Which weights a trial ran is recorded from the model itself, and random weights are said where it matters."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.cli.show_command import render_trial
from tuner.results import Outcome
from tuner.runner.base import TrialRequest
from tuner.runner.worker import execute
from tuner.ship.export_warnings import random_weights_warnings
from tuner.spec.adapters import PythonSpec
from tuner.workloads.base import WorkloadOutput


class RandomWeightsModel:
    """A python-adapter model that says it runs seeded random weights of a named preset (test double)."""

    def __init__(self, preset: str = "tiny", seed: int = 0) -> None:
        self.preset, self.seed = preset, seed

    def load(self, static_params: Mapping[str, Any]) -> None:
        pass

    def run(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> WorkloadOutput:
        return WorkloadOutput(text=["answer"])

    def weights_identity(self, inputs: Mapping[str, Any]) -> str:
        return f"random:{self.preset}:{self.seed}"


class _Document(dict):  # type: ignore[type-arg]
    """A show document whose fields not set here are absent (None)."""

    def __missing__(self, key: str) -> None:
        return None


def make_model(**kwargs: Any) -> RandomWeightsModel:
    return RandomWeightsModel(**kwargs)


def test_the_worker_records_the_models_weights_identity(tmp_path: Path) -> None:
    block = PythonSpec(factory=f"{__name__}:make_model", kwargs={"preset": "tiny", "seed": 7})
    request = TrialRequest(
        study_name="weights",
        trial_number=0,
        workload_class="tuner.adapters.python:PythonAdapterWorkload",
        settings={},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=60,
        workdir=str(tmp_path / "t0"),
        workload_options={"adapter": "python", **block.model_dump(mode="json")},
    )
    result = execute(request)
    assert result.outcome is Outcome.OK, result.reason
    assert result.info["runtime"]["weights_identity"] == "random:tiny:7"


def test_random_weights_are_named_in_the_export_warnings_and_in_show() -> None:
    assert random_weights_warnings({"runtime": {"weights_identity": "path:/weights/Wan2.1"}}) == []
    assert random_weights_warnings({"runtime": {}}) == []
    [warning] = random_weights_warnings({"runtime": {"weights_identity": "random:wan2.1-t2v-1.3b:0"}})
    assert "random:wan2.1-t2v-1.3b:0" in warning and "untrained network" in warning
    document = _Document(
        {
            "number": 3,
            "study": "s",
            "role": "search",
            "outcome": "OK",
            "state": "COMPLETE",
            "on_front": False,
            "reason": None,
            "weights_identity": "random:tiny:0",
            "params": {},
            "derived": {},
            "objectives": {},
            "constraints": {},
            "metrics": {},
            "samples": {},
            "invocation": None,
            "executed": None,
            "files": {"trial_dir": "/x", "result": None, "log": None},
            "log_tail": {"source": "storage", "lines": []},
            "duplicate_of": None,
            "warm_start_from": None,
            "predicted_peak_gb": None,
            "prediction_witness": None,
            "fingerprint_note": None,
            "noisy": False,
            "latency_cv": None,
        }
    )
    lines = render_trial(document)
    assert any(line.startswith("weights: random:tiny:0 (random: quality metrics are agreement") for line in lines)
