"""The memory model in the real Coordinator: a predicted OOM is recorded, never launched, and free.

A scripted runner stands in for a GPU: a setting needs ``frames x pixels / 2**16`` GB
(half with ``offload``), runs out of memory past 48 GB, and reports its peak; the
spec's limit is ``0.85 x 48 = 40.8 GB``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from tuner.results import Metric, Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.search.feasibility import Observation
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.study.coordinator import Coordinator
from tuner.study.studies import OpenStudy, create_study

SPEC = """\
name: memory_demo
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 20}
parameters:
  frames: {type: int, low: 8, high: 64, step: 8}
  size: {type: categorical, choices: ["256*256", "512*512"]}
  offload: {type: bool}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: peak_vram_gb, direction: minimize}
constraints:
  - {metric: peak_vram_gb, max: "0.85 * gpu_memory_gb"}
baseline: {frames: 8, size: "256*256", offload: false}
budget: {trials: 20}
sampler: {name: random}
"""
GPU_GB = 48.0


def setting(frames: int, size: str = "256*256", offload: bool = False) -> dict[str, Any]:
    return {"frames": frames, "size": size, "offload": offload}


class ScriptedGpuRunner(Runner):
    """Runs nothing: answers from the memory a setting needs; ``transient`` settings OOM on their first run."""

    def __init__(self, transient: list[dict[str, Any]] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.transient = list(transient or [])

    def run(self, request: TrialRequest, slot: Slot) -> TrialResult:
        params = {k: request.settings[k] for k in ("frames", "size", "offload")}
        self.calls.append(params)
        width, height = (int(v) for v in str(params["size"]).split("*"))
        needed = params["frames"] * width * height / 2**16 / (2 if params["offload"] else 1)
        if params in self.transient:
            self.transient.remove(params)
            return TrialResult(Outcome.OOM, reason="CUDA out of memory (another process held the GPU)")
        if needed > GPU_GB:
            return TrialResult(Outcome.OOM, reason=f"CUDA out of memory: needs {needed:.0f} GB")
        metrics = {
            "latency_p50_s": Metric("latency_p50_s", 1.0 / params["frames"], "s", "minimize"),
            "peak_vram_gb": Metric("peak_vram_gb", needed, "GB", "minimize"),
        }
        return TrialResult(Outcome.OK, metrics=metrics)


def open_new(tmp_path: Path) -> OpenStudy:
    spec = parse_spec(SPEC)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    return create_study(spec, SPEC, url, "m", "random", None, {"spec_name": spec.name})


def run(
    opened: OpenStudy,
    tmp_path: Path,
    runner: Runner,
    budget: int,
    memory_model: bool = True,
    prior: Sequence[Observation] = (),
) -> Any:
    plan = plan_constraints(opened.spec, {"gpu_memory_gb": GPU_GB, "host_memory_gb": 64.0})
    return Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=runner,
        slots=[Slot(0, None, 1)],
        home=tmp_path,
        device="cpu",
        plan=plan,
        budget_trials=budget,
        wall_time_s=None,
        memory_model=memory_model,
        memory_prior=prior,
    ).run()


def by_params(opened: OpenStudy, params: dict[str, Any]) -> list[Any]:
    return [t for t in opened.study.get_trials() if t.params == params]


def test_a_predicted_oom_is_recorded_never_launched_and_free(tmp_path: Path) -> None:
    opened = open_new(tmp_path)
    for frames, size in ((16, "256*256"), (56, "256*256"), (64, "512*512"), (24, "256*256")):
        opened.study.enqueue_trial(setting(frames, size))  # 16 GB, OOM (56 GB), costlier than it, 24 GB
    runner = ScriptedGpuRunner()
    summary = run(opened, tmp_path, runner, budget=6)
    oom = by_params(opened, setting(56))[0]
    assert oom.user_attrs["outcome"] == "OOM" and oom.user_attrs["measured"]
    skipped = by_params(opened, setting(64, "512*512"))[0]
    assert setting(64, "512*512") not in runner.calls, "never launched"
    assert skipped.user_attrs["outcome"] == Outcome.SKIPPED_PREDICTED_OOM.value
    assert skipped.user_attrs["reason"].startswith(f"OOM at trial {oom.number} (frames=56 size=256*256")
    assert skipped.user_attrs["predicted_peak_gb"] is None
    assert skipped.user_attrs["prediction_witness"] == f"trial {oom.number}"
    assert not skipped.user_attrs["measured"] and skipped.user_attrs["placeholder_values"]
    assert skipped.state == TrialState.COMPLETE and skipped.constraints["outcome"] == 1.0, "a wall for the sampler"
    assert summary.measured == 6 and len(runner.calls) == 6, "the skipped trial cost no budget"
    assert summary.outcomes[Outcome.SKIPPED_PREDICTED_OOM.value] >= 1
    assert not (tmp_path / "m" / f"trial_{skipped.number:05d}").exists()


def test_a_measured_peak_over_the_limit_predicts_costlier_settings(tmp_path: Path) -> None:
    opened = open_new(tmp_path)
    opened.study.enqueue_trial(setting(48))  # 48 GB: ran, over the 40.8 GB limit
    opened.study.enqueue_trial(setting(56))  # 56 GB: would OOM
    runner = ScriptedGpuRunner()
    run(opened, tmp_path, runner, budget=3)
    witness = by_params(opened, setting(48))[0]
    skipped = by_params(opened, setting(56))[0]
    assert setting(56) not in runner.calls
    assert skipped.user_attrs["predicted_peak_gb"] == 48.0
    assert skipped.user_attrs["reason"].startswith(
        f"predicted peak 48.0 GB > limit 40.8 GB (x1.05 margin) on peak_vram_gb, from trial {witness.number}"
    )


def test_a_wrong_prediction_is_corrected_by_the_next_measurement(tmp_path: Path) -> None:
    opened = open_new(tmp_path)
    runner = ScriptedGpuRunner(transient=[setting(16)])  # needs 16 GB, but the GPU was busy: an OOM once
    opened.study.enqueue_trial(setting(16))
    opened.study.enqueue_trial(setting(24))
    run(opened, tmp_path, runner, budget=3)
    transient = by_params(opened, setting(16))[0]
    assert transient.user_attrs["outcome"] == "OOM"
    assert by_params(opened, setting(24))[0].user_attrs["outcome"] == "SKIPPED_PREDICTED_OOM"
    assert setting(24) not in runner.calls
    opened.study.enqueue_trial(setting(32))  # measured elsewhere (another host, or --no-memory-model): 32 GB fits
    run(opened, tmp_path, runner, budget=4, memory_model=False)
    opened.study.enqueue_trial(setting(40))
    opened.study.enqueue_trial(setting(24))
    run(opened, tmp_path, runner, budget=5)
    assert runner.calls.count(setting(24)) == 1, "released: a costlier setting ran within the limit"
    assert any(t.user_attrs.get("outcome") == "OK" for t in by_params(opened, setting(24)))
    still = [t for t in by_params(opened, setting(40)) if t.user_attrs.get("outcome") == "SKIPPED_PREDICTED_OOM"]
    assert still and still[0].user_attrs["prediction_witness"] == f"trial {transient.number}"
    assert setting(40) not in runner.calls, "past the measurement that fits, the OOM still counts"


def test_no_memory_model_launches_a_predicted_oom(tmp_path: Path) -> None:
    opened = open_new(tmp_path)
    opened.study.enqueue_trial(setting(56))
    opened.study.enqueue_trial(setting(64))
    runner = ScriptedGpuRunner()
    summary = run(opened, tmp_path, runner, budget=3, memory_model=False)
    assert setting(64) in runner.calls
    assert by_params(opened, setting(64))[0].user_attrs["outcome"] == "OOM"
    assert Outcome.SKIPPED_PREDICTED_OOM.value not in summary.outcomes
