"""Temporal metrics on synthetic videos with known motion, jitter and clip seams."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import pytest

from tuner.evaluators.base import EvalContext
from tuner.evaluators.temporal import (
    TEMPORAL_METRICS,
    flicker_metrics,
    flicker_score,
    frame_jumps,
    mean_abs_frame_diff,
    seam_metrics,
    seam_score,
    temporal_metrics,
    warping_error,
    warping_metrics,
)
from tuner.results import Metric

SIZE = 96


@dataclass
class FakeOutput:
    """Stands in for WorkloadOutput: only ``.video`` is read."""

    video: np.ndarray | None


def smooth_texture(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Seeded smooth random RGB texture, float64 values in [60, 195] (no clipping under ±50)."""
    noise = np.random.default_rng(seed).random((height, width)).astype(np.float32)
    smooth = cv2.GaussianBlur(noise, (0, 0), 3.0).astype(np.float64)
    smooth = (smooth - smooth.min()) / (smooth.max() - smooth.min())
    rgb = np.stack([smooth, np.roll(smooth, 7, axis=0), np.roll(smooth, 13, axis=1)], axis=-1)
    return 60.0 + 135.0 * rgb


def moving_video(
    frames: int = 10, shift_px: int = 2, jitter: float = 0.0, clip_length: int | None = None, seam_jump_px: int = 0
) -> np.ndarray:
    """A SIZE x SIZE window sliding ``shift_px`` per frame over a larger texture.

    Frame t gets ``+jitter`` when t is even and ``-jitter`` when odd. With ``clip_length``
    the window also jumps ``seam_jump_px`` extra at each clip start (a spliced seam).
    """
    texture = smooth_texture(SIZE, SIZE + frames * (shift_px + seam_jump_px) + 8)
    video, offset = [], 0
    for t in range(frames):
        if clip_length and t > 0 and t % clip_length == 0:
            offset += seam_jump_px
        x0 = offset + shift_px * t
        video.append(texture[:, x0 : x0 + SIZE] + (jitter if t % 2 == 0 else -jitter))
    return np.clip(np.round(np.stack(video)), 0, 255).astype(np.uint8)


def jittered_grey(frames: int, amplitude: int, side_px: int = 16) -> np.ndarray:
    """Static mid-grey (128) frames with alternating +amplitude / -amplitude brightness."""
    levels = [128 + (amplitude if t % 2 == 0 else -amplitude) for t in range(frames)]
    return np.stack([np.full((side_px, side_px, 3), level, dtype=np.uint8) for level in levels])


def by_name(metrics: list[Metric]) -> dict[str, Metric]:
    return {metric.name: metric for metric in metrics}


def context(infer_frames: Any = 12, reference_infer_frames: Any = 12) -> EvalContext:
    settings = {} if infer_frames is None else {"infer_frames": infer_frames}
    reference = None if reference_infer_frames is None else {"infer_frames": reference_infer_frames}
    return EvalContext(settings=settings, reference_settings=reference)


# ------------------------------------------------------------------ flicker


@pytest.mark.parametrize("amplitude", [1, 5, 20])
def test_flicker_of_alternating_brightness_is_exact(amplitude: int) -> None:
    video = jittered_grey(8, amplitude)
    assert np.all(frame_jumps(video) == 2 * amplitude)
    assert mean_abs_frame_diff(video) == 2 * amplitude
    assert flicker_score(video) == (255 - 2 * amplitude) / 255


def test_static_video_has_perfect_flicker_score() -> None:
    assert flicker_score(jittered_grey(5, 0)) == 1.0


def test_flicker_needs_two_uint8_rgb_frames() -> None:
    with pytest.raises(ValueError, match="at least 2 frames"):
        mean_abs_frame_diff(jittered_grey(1, 3))
    with pytest.raises(ValueError, match="uint8"):
        mean_abs_frame_diff(jittered_grey(4, 3).astype(np.float32))


# ------------------------------------------------------------------ warping error


def test_warping_error_of_pure_translation_is_near_zero() -> None:
    # Bilinear resampling of the smooth texture leaves ~3e-5; 1e-4 is (2.55 levels)^2 on [0, 1].
    assert warping_error(moving_video(shift_px=2)) < 1e-4


def test_warping_error_rises_with_brightness_jitter() -> None:
    still = warping_error(moving_video(shift_px=2))
    small = warping_error(moving_video(shift_px=2, jitter=5))
    large = warping_error(moving_video(shift_px=2, jitter=15))
    assert still < small < large
    # A jitter of ±a makes every warped pixel off by 2a levels: error ~ (2a / 255)^2.
    assert large == pytest.approx((30 / 255) ** 2, rel=0.1)


def test_warping_error_refuses_frames_too_small_for_flow() -> None:
    with pytest.raises(ValueError, match="optical flow is unreliable"):
        warping_error(jittered_grey(4, 2, side_px=8))


# ------------------------------------------------------------------ seam score


def test_seam_score_is_about_one_for_uniform_motion() -> None:
    assert seam_score(moving_video(frames=48, shift_px=1), 12) == pytest.approx(1.0, abs=0.05)


def test_seam_score_rises_for_spliced_clips() -> None:
    smooth = seam_score(moving_video(frames=48, shift_px=1), 12)
    spliced = seam_score(moving_video(frames=48, shift_px=1, clip_length=12, seam_jump_px=6), 12)
    assert spliced > 3 * smooth


def test_seam_score_uses_only_the_declared_boundaries() -> None:
    # Jumps every 12 frames judged with 8-frame clips: the boundaries at 8, 16, 32, 40
    # are ordinary, only 24 is also a seam -> far below the 12-frame reading.
    spliced = moving_video(frames=48, shift_px=1, clip_length=12, seam_jump_px=6)
    assert seam_score(spliced, 8) < seam_score(spliced, 12)


@pytest.mark.parametrize(
    ("frames", "clip_length", "reason"),
    [
        (12, 12, "no clip boundary"),
        (6, 1, "no frame pair inside a clip"),
        (12, 0, "must be >= 1"),
    ],
)
def test_seam_score_not_computable(frames: int, clip_length: int, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        seam_score(moving_video(frames=frames, shift_px=1), clip_length)


def test_seam_score_of_static_clips_is_not_computable() -> None:
    with pytest.raises(ValueError, match="median inside jump is 0"):
        seam_score(jittered_grey(24, 0), 12)


# ------------------------------------------------------------------ adapter


def test_adapter_reports_every_metric_with_unit_and_direction() -> None:
    video = moving_video(frames=24, shift_px=1)
    metrics = temporal_metrics(FakeOutput(video), FakeOutput(video), context())
    assert [m.name for m in metrics] == list(TEMPORAL_METRICS)
    for metric in metrics:
        assert metric.available, metric
        assert (metric.unit, metric.direction) == TEMPORAL_METRICS[metric.name]
    values = {m.name: float(m.value or 0.0) for m in metrics}
    assert values["flicker_ratio"] == values["warping_error_ratio"] == values["seam_score_ratio"] == 1.0
    assert values["flicker_score"] == pytest.approx((255 - values["flicker_mae"]) / 255)


def test_adapter_ratios_against_the_reference() -> None:
    reference = np.stack([jittered_grey(24, 5)] * 2)  # a batch of two requests
    metrics = by_name(temporal_metrics(FakeOutput(jittered_grey(24, 10)), FakeOutput(reference), context()))
    assert metrics["flicker_mae"].value == 20
    assert metrics["flicker_ratio"].value == 2.0

    spliced = moving_video(frames=48, shift_px=1, clip_length=12, seam_jump_px=6)
    smooth = moving_video(frames=48, shift_px=1, jitter=2)
    metrics = by_name(temporal_metrics(FakeOutput(spliced), FakeOutput(smooth), context()))
    assert metrics["seam_score_ratio"].value is not None and metrics["seam_score_ratio"].value > 3
    assert metrics["warping_error_ratio"].value is not None and metrics["warping_error_ratio"].value < 1


def test_adapter_without_candidate_video() -> None:
    metrics = temporal_metrics(FakeOutput(None), FakeOutput(moving_video()), context())
    assert len(metrics) == len(TEMPORAL_METRICS)
    assert all(not m.available and m.reason == "the workload produced no video" for m in metrics)


def test_adapter_without_reference_video_keeps_absolute_metrics() -> None:
    metrics = by_name(temporal_metrics(FakeOutput(moving_video(frames=24, shift_px=1)), FakeOutput(None), context()))
    for name in ("flicker_mae", "flicker_score", "warping_error", "seam_score"):
        assert metrics[name].available
    for name in ("flicker_ratio", "warping_error_ratio", "seam_score_ratio"):
        assert not metrics[name].available
        assert metrics[name].reason == "the reference output has no video"


def test_adapter_unavailable_reasons() -> None:
    static = jittered_grey(24, 0)
    moving = moving_video(frames=24, shift_px=1)
    no_clip_length = EvalContext(settings={"sample_steps": 4}, reference_settings={"sample_steps": 4})
    metrics = by_name(temporal_metrics(FakeOutput(moving), FakeOutput(static), no_clip_length))
    assert "the reference's mean absolute frame difference is 0" in str(metrics["flicker_ratio"].reason)
    assert "the reference's warping error is 0" in str(metrics["warping_error_ratio"].reason)
    assert "no 'infer_frames'" in str(metrics["seam_score"].reason)
    assert "no 'infer_frames'" in str(metrics["seam_score_ratio"].reason)

    metrics = by_name(
        temporal_metrics(FakeOutput(moving), FakeOutput(moving), context(infer_frames=48, reference_infer_frames=None))
    )
    assert "no clip boundary" in str(metrics["seam_score"].reason)
    assert "no clip boundary" in str(metrics["seam_score_ratio"].reason)

    metrics = by_name(
        temporal_metrics(FakeOutput(moving), FakeOutput(moving), context(infer_frames=12, reference_infer_frames=None))
    )
    assert metrics["seam_score"].available
    assert metrics["seam_score_ratio"].reason == "the reference settings are not known"

    metrics = by_name(temporal_metrics(FakeOutput(moving), FakeOutput(moving), context(infer_frames="many")))
    assert "not a positive integer" in str(metrics["seam_score"].reason)


def test_adapter_single_frame_video() -> None:
    metrics = by_name(temporal_metrics(FakeOutput(moving_video(frames=1)), None, context()))
    assert all(not m.available for m in metrics.values())
    assert "at least 2 frames" in str(metrics["flicker_score"].reason)


def test_group_adapters_split_the_full_list() -> None:
    video = FakeOutput(moving_video(frames=24, shift_px=1, jitter=3))
    reference = FakeOutput(moving_video(frames=24, shift_px=1))
    groups = [function(video, reference, context()) for function in (flicker_metrics, warping_metrics, seam_metrics)]
    assert [[m.name for m in group] for group in groups] == [
        ["flicker_mae", "flicker_score", "flicker_ratio"],
        ["warping_error", "warping_error_ratio"],
        ["seam_score", "seam_score_ratio"],
    ]
    assert sum(groups, []) == temporal_metrics(video, reference, context())
