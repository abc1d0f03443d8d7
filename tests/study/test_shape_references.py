"""A reference per output shape in the loop (issue 39): trials parked for their shape's reference, which is
queued once, measured, and compared with (real SQLite storage, the SIMULATED fake workload, InlineRunner).

The fake workload's video has ``frames`` frames; the spec says ``reference_shape: {per: [frames]}``, so a
4-frame trial is compared with the reference setting at 4 frames, never with the first 4 frames of the
8-frame reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.runner.base import Slot
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.study.coordinator import Coordinator
from tuner.study.studies import create_study
from tuner.testing.inline_runner import InlineRunner

SPEC = """
name: shapes
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 20}
parameters:
  frames: {type: categorical, choices: [4, 8]}
  noise: {type: categorical, choices: [0, 10, 20]}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {frames: 8, noise: 0}
reference_shape: {per: [frames]}
measurement: {warmup: 0, min_repeats: 1, max_repeats: 1}
budget: {trials: 20}
sampler: {name: grid, skip_dominated: null}   # every setting measured
"""


def run(tmp_path: Path, text: str, slots: int) -> Any:
    spec = parse_spec(text)
    opened = create_study(
        spec, text, f"sqlite:///{tmp_path / 'studies.db'}", "s", "grid", None, {"spec_name": spec.name}
    )
    plan = plan_constraints(spec, {"gpu_memory_gb": None, "host_memory_gb": 24.0})
    Coordinator(
        study=opened.study,
        spec=spec,
        runner=InlineRunner(),
        slots=[Slot(i, None, 1) for i in range(slots)],
        home=tmp_path,
        device="cpu",
        plan=plan,
        budget_trials=20,
        wall_time_s=None,
    ).run()
    return opened.study


def psnr(trial: Any) -> Any:
    return trial.user_attrs["metrics"]["psnr_db"]


@pytest.mark.parametrize("slots", [1, 2])
def test_each_trial_is_compared_with_the_reference_at_its_own_shape(tmp_path: Path, slots: int) -> None:
    study = run(tmp_path, SPEC, slots)
    measured = [t for t in study.trials if t.user_attrs.get("measured") and t.user_attrs.get("outcome") == "OK"]
    ran = [t for t in measured if t.user_attrs.get("duplicate_of") is None]
    assert {(t.params["frames"], t.params["noise"]) for t in measured} == {(f, n) for f in (4, 8) for n in (0, 10, 20)}
    four = [t for t in ran if t.params == {"frames": 4, "noise": 0}]
    assert len(four) == 1, "the reference at 4 frames ran once"
    for trial in ran:
        compared = trial.user_attrs["compared_with"]
        assert compared["shape"] == {"frames": trial.params["frames"]}
        by = study.trials[compared["trial"]]
        assert by.params == {"frames": trial.params["frames"], "noise": 0}, (trial.number, compared)
        assert psnr(trial)["value"] == (
            pytest.approx(100.0) if trial.params["noise"] == 0 else pytest.approx(psnr(trial)["value"])
        )
    noisy_four = next(t for t in ran if t.params == {"frames": 4, "noise": 10})
    assert psnr(noisy_four)["value"] < 40, "compared with the clean 4-frame video, not itself"
    roles = sorted(t.user_attrs["role"] for t in ran)
    assert roles.count("reference") == 1
    copies = [t for t in study.trials if t.user_attrs.get("duplicate_of") is not None]
    assert copies, "the grid proposes the queued shape reference's setting again: a copy"
    for copy in copies:
        original = study.trials[copy.user_attrs["duplicate_of"]]
        assert copy.user_attrs["compared_with"] == original.user_attrs["compared_with"], "a copy says what it copied"
    not_interrupted = [t for t in study.trials if t.user_attrs.get("outcome") == "INTERRUPTED"]
    assert not_interrupted == [], "nothing parked was left behind"


def test_a_shape_whose_reference_cannot_run_has_no_quality_and_says_why(tmp_path: Path) -> None:
    text = SPEC.replace(
        "sampler: {name: grid, skip_dominated: null}   # every setting measured",
        "sampler: {name: grid, skip_dominated: null}   # every setting measured\nrules:\n"
        '  - {expr: "not (frames == 4 and noise == 0)", message: "no clean 4-frame video"}',
    )
    study = run(tmp_path, text, 1)
    four = [
        t
        for t in study.trials
        if t.user_attrs.get("measured") and t.params.get("frames") == 4 and t.user_attrs.get("outcome") == "OK"
    ]
    assert four, [(t.number, t.params, t.user_attrs.get("outcome")) for t in study.trials]
    for trial in four:
        metric = psnr(trial)
        assert metric["value"] is None
        assert "no reference at frames=4" in metric["reason"] and "no clean 4-frame video" in metric["reason"]
        assert trial.user_attrs["compared_with"] == {"trial": None, "shape": {"frames": 4}}
