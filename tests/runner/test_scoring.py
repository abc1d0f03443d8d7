"""Quality scored off the device (issue 38, item 4: score trial N's quality off the device's critical path while
trial N+1 runs): :mod:`tuner.runner.scoring`.

The SIMULATED fake workload (:mod:`tuner.workloads.fake`) makes a small video whose noise follows the ``noise``
knob; its quality is scored by the real video evaluators (PSNR against the reference output, the no-reference
flicker and warping figures), in the worker or in a real scorer process.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.results import Outcome, TrialResult
from tuner.runner.base import TrialRequest
from tuner.runner.measure.trial import QUALITY_PENDING
from tuner.runner.scoring import SCORED_KEY, Scorer, pending, score_outputs, scorer_threads, scores_off_device
from tuner.runner.worker import execute
from tuner.spec.loading import parse_spec
from tuner.spec.models import SpecError
from tuner.testing.noop_spec import cases_spec

QUALITY = ["psnr_db", "flicker_mae", "warping_error"]


def request_for(tmp_path: Path, name: str, noise: int, **fields: Any) -> TrialRequest:
    """A fake-workload trial of ``noise`` in ``tmp_path/name``."""
    return TrialRequest(
        study_name="scoring",
        trial_number=noise,
        workload_class="tuner.workloads.fake:FakeWorkload",
        settings={"noise": noise, "sleep_s": 0.001, "frames": 6, "size": 24},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=120,
        workdir=str(tmp_path / name),
        quality_metrics=QUALITY,
        **fields,
    )


@pytest.fixture
def reference(tmp_path: Path) -> str:
    """The reference output (noise 0), saved the way the coordinator saves it."""
    path = tmp_path / "reference_output.npz"
    made = execute(request_for(tmp_path, "reference", 0, compare_with_self=True, save_output=str(path)))
    assert made.outcome is Outcome.OK, made.reason
    return str(path)


def measured_off_device(tmp_path: Path, reference: str, noise: int = 4) -> tuple[TrialRequest, TrialResult]:
    request = request_for(
        tmp_path, f"off_{noise}", noise, reference_output=reference, score_outputs=str(tmp_path / f"out_{noise}.npz")
    )
    return request, execute(request)


def test_the_worker_leaves_quality_to_the_scorer_and_the_scored_figures_are_the_workers(
    tmp_path: Path, reference: str
) -> None:
    inline = execute(request_for(tmp_path, "inline", 4, reference_output=reference))
    request, measured = measured_off_device(tmp_path, reference)
    assert pending(measured) and not pending(inline)
    assert not set(QUALITY) & set(measured.metrics), "the worker computed no quality"
    assert Path(measured.info[QUALITY_PENDING]).is_file()
    assert measured.metrics["latency_p50_s"].available
    scored = score_outputs(request, measured)
    for name in QUALITY:
        assert scored.metrics[name].available, scored.metrics[name].reason
        assert scored.metrics[name].value == pytest.approx(inline.metrics[name].value, rel=1e-9), name
    assert scored.metrics["psnr_db"].value < 100  # noise 4 against noise 0: not the same video
    assert not pending(scored) and SCORED_KEY in scored.info
    assert scored.eval_time_s > 0
    assert not Path(measured.info[QUALITY_PENDING]).exists(), "the outputs' file is deleted once scored"


def test_a_scorer_process_scores_and_one_that_fails_keeps_the_measurement(tmp_path: Path, reference: str) -> None:
    request, measured = measured_off_device(tmp_path, reference, noise=4)
    scored = Scorer(threads=1).score(request, measured)
    assert scored.metrics["psnr_db"].available and scored.metrics["psnr_db"].value < 100
    assert scored.info[SCORED_KEY]["where"] == "a scorer process on the CPU"

    request, measured = measured_off_device(tmp_path, reference, noise=6)
    Path(measured.info[QUALITY_PENDING]).unlink()  # the outputs are gone: the scorer cannot read them
    failed = Scorer(threads=1).score(request, measured)
    assert failed.outcome is Outcome.OK
    assert failed.metrics["latency_p50_s"].value == measured.metrics["latency_p50_s"].value
    for name in QUALITY:
        reason = failed.metrics[name].reason or ""
        assert not failed.metrics[name].available and reason.startswith("quality not scored: the scorer exited")
    assert "FileNotFoundError" in (failed.metrics["psnr_db"].reason or "")
    assert "failed" in failed.info[SCORED_KEY] and QUALITY_PENDING not in failed.info


def test_a_closed_scorer_starts_no_scorer_and_says_so(tmp_path: Path, reference: str) -> None:
    request, measured = measured_off_device(tmp_path, reference)
    scorer = Scorer(threads=1)
    scorer.close()
    result = scorer.score(request, measured)
    assert result.metrics["psnr_db"].reason == ("quality not scored: the run was stopped before its quality was scored")
    assert not Path(measured.info[QUALITY_PENDING]).exists()


def test_where_quality_is_scored_by_default() -> None:
    assert scores_off_device("auto", "cuda") and not scores_off_device("auto", "cpu")
    assert scores_off_device(True, "cpu") and not scores_off_device(False, "cuda")
    assert [scorer_threads(n) for n in (1, 2, 8, 16, 64)] == [1, 1, 2, 4, 4]


def test_a_wrong_score_off_device_names_the_key(tmp_path: Path) -> None:
    text = SPEC.replace("WORKER", "warm").replace("score_off_device: true", "score_off_device: sometimes")
    with pytest.raises(SpecError) as error:
        parse_spec(text, source="bad.yaml")
    assert "score_off_device" in str(error.value) and "bad.yaml" in str(error.value)


SPEC = cases_spec("psnr_db", worker="WORKER", measurement=", score_off_device: true")


def run_study(tmp_path: Path, name: str, off_device: bool, worker: str) -> list[optuna.trial.FrozenTrial]:
    spec = tmp_path / f"{name}.yaml"
    text = SPEC.replace("WORKER", worker)
    spec.write_text(text if off_device else text.replace("score_off_device: true", "score_off_device: false"))
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(spec), "--study-name", name, "--no-mlflow"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    storage = f"sqlite:///{tmp_path / 'studies' / 'studies.db'}"
    return optuna.load_study(study_name=name, storage=storage).trials


def measured_by_noise(trials: list[optuna.trial.FrozenTrial]) -> dict[int, optuna.trial.FrozenTrial]:
    return {
        t.params["noise"]: t for t in trials if t.user_attrs.get("measured") and not t.user_attrs.get("duplicate_of")
    }


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("worker", ["fresh", "warm"])
def test_a_study_scored_off_the_device_records_what_one_scored_in_the_worker_does(tmp_path: Path, worker: str) -> None:
    inline = measured_by_noise(run_study(tmp_path, "inline", False, worker))
    off_trials = run_study(tmp_path, "off", True, worker)
    off = measured_by_noise(off_trials)
    assert set(inline) == set(off) == {0, 2, 6, 10}
    for noise, trial in off.items():
        mine, theirs = trial.user_attrs, inline[noise].user_attrs
        for name in ("psnr_db", "psnr_db:worst", "psnr_db:p90", "flicker_mae"):
            assert mine["metrics"][name]["value"] == pytest.approx(theirs["metrics"][name]["value"], rel=1e-9)
        assert {case: f["psnr_db"]["value"] for case, f in mine["per_input"].items()} == pytest.approx(
            {case: f["psnr_db"]["value"] for case, f in theirs["per_input"].items()}
        )
        assert mine.get("cliffs") == theirs.get("cliffs")
        assert ("quality_scored" in mine) is (noise != 0), "the reference is scored in its worker"
        assert "quality_scored" not in theirs
    assert off[6].user_attrs["cliffs"], "the fragile input's cliff is flagged from the scored figures"
    search = sorted((t for t in off_trials if t.number in {t.number for t in off.values()} and t.number > 0), key=_n)
    overlapped = [
        (a.number, b.number) for a, b in zip(search, search[1:], strict=False) if b.datetime_start < a.datetime_complete
    ]
    assert overlapped, "a trial started on the slot before the one before it was told (scored beside it)"
    assert list((tmp_path / "studies" / "off" / "scoring").iterdir()) == [], "every outputs' file was scored"
    status = subprocess.run(
        [sys.executable, "-m", "tuner", "status", "off"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert "quality of 3 trial(s) scored off the device, beside the next trial: " in status.stdout, status.stdout


def _n(trial: optuna.trial.FrozenTrial) -> int:
    return trial.number


def test_scoring_waits_block_new_trials_past_one_per_slot() -> None:
    from concurrent.futures import Future

    from tuner.runner.base import Slot
    from tuner.study.coordinator_state import InFlight, LoopState

    slot = Slot(0, None, 1)
    state = LoopState(started=0.0, free_slots=[], last_reclaim=0.0)
    job = InFlight(trial=None, candidate=None, slot=slot, role="search", scoring=True)  # type: ignore[arg-type]
    state.inflight[Future()] = job
    assert not state.scores_block(1)  # one trial scored beside the slot's next
    state.inflight[Future()] = dataclasses.replace(job)
    assert state.scores_block(1)  # the next one has measured too: nothing more starts until a score comes back
    future = next(iter(state.inflight))
    assert state.finished(future) is job and state.free_slots == [], "a scored trial's slot was freed before"
