"""The registry's static metric table agrees with what each evaluator family really returns."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.evaluators.base import EvalContext
from tuner.evaluators.registry import FAMILIES, QUALITY_METRICS, evaluate_quality, known_metric, warm_ups
from tuner.workloads.base import WorkloadOutput


def _talking_output(frames: int = 40) -> WorkloadOutput:
    rng = np.random.default_rng(0)
    video = rng.integers(0, 255, size=(1, frames, 48, 48, 3), dtype=np.uint8)
    audio = rng.normal(0, 0.1, size=frames * 16000 // 12).astype(np.float32)
    return WorkloadOutput(video=video, audio=audio, audio_rate=16000, text=["the cat sat"], items=1)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_family_returns_exactly_its_declared_metrics(family) -> None:
    output = _talking_output()
    context = EvalContext(
        inputs={"fps": 12, "mouth_box": [0.3, 0.5, 0.7, 0.8]},
        settings={"infer_frames": 10},
        reference_settings={"infer_frames": 10},
    )
    produced = family.load()(output, output, context)
    names = {m.name for m in produced}
    assert set(family.metrics) <= names, set(family.metrics) - names
    for metric in produced:
        if metric.name in family.metrics:
            unit, direction = family.metrics[metric.name]
            assert (metric.unit, metric.direction) == (unit, direction), metric
            assert metric.available or metric.reason, f"{metric.name} unavailable without a reason"


def test_without_reference_reference_metrics_are_unavailable_with_reason() -> None:
    metrics = {
        m.name: m
        for m in evaluate_quality(
            ["psnr_db", "lipsync_margin"],
            _talking_output(),
            None,
            EvalContext(inputs={"fps": 12, "mouth_box": [0.3, 0.5, 0.7, 0.8]}),
        )
    }
    assert metrics["psnr_db"].reason == "no reference output in this study"
    assert "lipsync_margin" in metrics  # needs no reference
    assert metrics["eval_lipsync_s"].value is not None and "eval_video_s" not in metrics


def test_evaluator_time_is_reported_per_family() -> None:
    output = _talking_output()
    metrics = {m.name: m for m in evaluate_quality(["psnr_db", "ssim"], output, output, EvalContext())}
    assert metrics["psnr_db"].value == 100.0 and metrics["ssim"].value == pytest.approx(1.0)
    assert metrics["eval_video_s"].unit == "s" and metrics["eval_video_s"].value >= 0


def test_names_and_warm_ups() -> None:
    assert known_metric("stlpips_alex") and known_metric("count_frames") and not known_metric("psnr")
    assert len(QUALITY_METRICS) == sum(len(f.metrics) for f in FAMILIES), "a metric name is in two families"
    assert warm_ups(["stlpips_alex", "latency_p50_s"]) == ["tuner.evaluators.perceptual:warm_up"]
    assert warm_ups(["psnr_db"]) == ["tuner.evaluators.video:warm_up"]  # scikit-image: imported once per fork server
