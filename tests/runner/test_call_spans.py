"""Where a measured call's time goes (issue 40, item 1): the workload's spans -- prepare, the model's work,
postprocess -- as medians over the timed repeats, and what the call spent outside them; through real workers
on the built-in avatar and the tiny Wan pipeline (diffusers, CPU), and the span clock itself."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tuner.evaluators.runtime.spans import CallSpans, span_metrics
from tuner.results import Metric, Outcome
from tuner.runner.base import Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner


def run_trial(
    tmp_path: Path,
    workload: str,
    settings: dict[str, Any],
    inputs: dict[str, Any],
    options: dict[str, Any] | None = None,
) -> Any:
    runner = SubprocessRunner()
    try:
        return runner.run(
            TrialRequest(
                study_name="spans",
                trial_number=0,
                workload_class=workload,
                settings=settings,
                inputs=inputs,
                seed=0,
                device="cpu",
                workload_options=options or {},
                measurement={"warmup": 1, "min_repeats": 3, "max_repeats": 3, "bare_twin": 3},
                timeout_s=300.0,
                workdir=str(tmp_path / "trial"),
            ),
            Slot(0, None, 1),
        )
    finally:
        runner.close()


def check_split(result: Any) -> None:
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    metrics = result.metrics
    p50 = metrics["latency_p50_s"].value
    parts = [metrics[name].value for name in ("prepare_s", "model_s", "postprocess_s")]
    assert all(part is not None and part >= 0 for part in parts)
    assert metrics["model_s"].value > metrics["postprocess_s"].value, "the model's work dominates the call"
    assert sum(parts) <= p50 * 1.02, "the spans lie inside the timed call"
    assert metrics["outside_spans_s"].value == pytest.approx(p50 - sum(parts), abs=1e-9)
    assert metrics["bare_p50_s"].available, "the twin stands beside the split"


def test_the_avatar_splits_its_call(tmp_path: Path) -> None:
    check_split(
        run_trial(
            tmp_path,
            "tuner.workloads.avatar_dit:AvatarDiTWorkload",
            {"infer_frames": 6, "sample_steps": 2, "resolution": 32},
            {"audio_seconds": 1.0, "fps": 12, "output_size": 32},
        )
    )


@pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers is not installed")
def test_the_wan_pipeline_splits_its_call(tmp_path: Path) -> None:
    check_split(
        run_trial(
            tmp_path,
            "tuner.adapters.python:PythonAdapterWorkload",
            {
                "num_frames": 5,
                "height": 32,
                "width": 32,
                "num_inference_steps": 2,
                "guidance_scale": 5.0,
                "precision": "fp32",
            },
            {"prompt": "A cat walks on the grass."},
            {
                "adapter": "python",
                "factory": "tuner.adapters.factories.diffusers_video:make_video_pipeline",
                "kwargs": {"weights": "random", "architecture": "tiny", "device": "cpu", "seed": 0},
            },
        )
    )


def test_a_workload_without_spans_reports_none(tmp_path: Path) -> None:
    result = run_trial(tmp_path, "tuner.workloads.fake:FakeWorkload", {"sleep_s": 0.002}, {})
    assert result.outcome is Outcome.OK
    assert not {"model_s", "postprocess_s", "outside_spans_s"} & set(result.metrics)


def test_the_span_clock_and_its_medians() -> None:
    ticks = iter([0.0, 1.0, 4.0, 4.5, 10.0, 10.5, 13.5, 14.5])
    clock = CallSpans(clock=lambda: next(ticks))
    calls = []
    for _ in range(2):
        clock.begin()
        clock.mark("prepare")
        clock.mark("model")
        clock.mark("postprocess")
        calls.append(clock.seconds())
    assert calls == [
        {"prepare": 1.0, "model": 3.0, "postprocess": 0.5},
        {"prepare": 0.5, "model": 3.0, "postprocess": 1.0},
    ]
    metrics = {
        m.name: m.value
        for m in span_metrics(
            calls + [{"model": 9.0, "warmup_only": 1.0}], Metric("latency_p50_s", 5.0, "s", "minimize")
        )
    }
    assert metrics["model_s"] == 3.0 and metrics["prepare_s"] == 0.5
    assert metrics["span_warmup_only_s"] == 0.0, "an unknown span keeps its own name"
    assert metrics["outside_spans_s"] == pytest.approx(5.0 - (3.0 + 0.5 + 0.5 + 0.0))
    assert span_metrics([{}, {}], None) == []


def test_compile_asks_for_its_warmup_and_refuses_cuda_graphs_with_offload() -> None:
    pytest.importorskip("diffusers")
    from tuner.adapters.factories.diffusers_video import DiffusersVideoModel
    from tuner.workloads.base import InvalidSetting

    model = DiffusersVideoModel(weights="random", architecture="tiny", device="cuda")  # refused before any build
    with pytest.raises(InvalidSetting, match="CUDA graphs"):
        model.load({"compile": "reduce-overhead", "offload": "model"})
    model._compile = "reduce-overhead"
    shape = {"num_frames": 5, "height": 32, "width": 32, "guidance_scale": 5.0}
    assert model.warmup_calls(shape) == 3, "compile, record, first replay"
    model._compiled_shapes.add((5, 32, 32, 1, True, None))
    assert model.warmup_calls(shape) == 0, "a shape already run compiled needs none"
    assert model.warmup_calls({**shape, "guidance_scale": 1.0}) == 3, "CFG off halves the batch: a new graph"
    model._compile = "default"
    assert model.warmup_calls({**shape, "num_frames": 9}) == 1
    model._compile = "none"
    assert model.warmup_calls({**shape, "num_frames": 9}) == 1, "eager: a shape new to the load warms up once"
    assert model.warmup_calls(shape) == 0, "eager: a shape already run needs none"


def test_the_worker_runs_the_warmup_a_workload_asks_for(tmp_path: Path) -> None:
    result = run_trial(tmp_path, "tuner.workloads.fake:SimulatedCompilingWorkload", {"needs": 4}, {})
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail[-1500:])
    assert result.info["warmup"] == 4, "max(measurement.warmup 1, the workload's 4)"
    assert result.info["repeats"] == 3 and result.metrics["count_calls"].value == 4 + 3, "then the timed repeats"
