"""PSNR / SSIM against the reference: theory, identity, alignment, small frames, mouth box."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.evaluators.base import EvalContext
from tuner.evaluators.video import (
    PSNR_CAP_DB,
    aligned_pair,
    mouth_box_pixels,
    psnr_db,
    psnr_metric,
    ssim,
    ssim_window,
    video_fidelity_metrics,
)
from tuner.results import Metric
from tuner.workloads.base import WorkloadOutput

MOUTH_BOX = [0.25, 0.5, 0.75, 0.875]  # x0, y0, x1, y1 as fractions


def grey_video(frames: int = 3, size: int = 256, value: int = 128) -> np.ndarray:
    return np.full((frames, size, size, 3), value, dtype=np.uint8)


def with_noise(video: np.ndarray, sigma: float, seed: int = 0) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0.0, sigma, video.shape)
    return np.clip(np.rint(video + noise), 0, 255).astype(np.uint8)


def metrics_by_name(metrics: list[Metric]) -> dict[str, Metric]:
    return {metric.name: metric for metric in metrics}


def test_psnr_of_gaussian_noise_matches_theory() -> None:
    reference = grey_video()
    candidate = with_noise(reference, sigma=5.0)
    assert psnr_db(candidate, reference) == pytest.approx(20 * math.log10(255 / 5.0), abs=0.2)


def test_identical_frames_give_capped_psnr_and_unit_ssim() -> None:
    video = with_noise(grey_video(frames=2, size=64), sigma=30.0)
    assert psnr_db(video, video) == PSNR_CAP_DB
    assert ssim(video, video) == pytest.approx(1.0, abs=1e-12)


def test_one_perfect_frame_is_capped_not_infinite() -> None:
    reference = grey_video(frames=2, size=64)
    candidate = reference.copy()
    candidate[1] = with_noise(reference[1:2], sigma=5.0)[0]
    value = psnr_db(candidate, reference)
    assert math.isfinite(value) and value == pytest.approx((PSNR_CAP_DB + 34.15) / 2, abs=0.5)


def test_alignment_first_request_and_reference_size() -> None:
    reference = with_noise(grey_video(frames=3, size=32), sigma=20.0)
    candidate = np.stack([reference.repeat(2, axis=1).repeat(2, axis=2)] * 2)  # (2, 3, 64, 64, 3)
    cand, ref = aligned_pair(candidate, reference)
    assert cand.shape == ref.shape == (3, 32, 32, 3)
    assert psnr_db(candidate, reference) > 25.0


def test_another_frame_count_is_never_truncated() -> None:
    """A 4-frame video is another video than the 3-frame reference (issue 39): unavailable, with the reason."""
    reference = with_noise(grey_video(frames=3, size=32), sigma=20.0)
    longer = np.concatenate([reference, reference[:1]], axis=0)  # the reference's 3 frames, then one more
    with pytest.raises(ValueError, match="4 frames and its reference 3"):
        aligned_pair(longer, reference)
    metrics = metrics_by_name(
        video_fidelity_metrics(
            WorkloadOutput(video=longer), WorkloadOutput(video=reference), EvalContext(resize_to_reference=True)
        )
    )
    assert metrics["psnr_db"].value is None and "never truncated" in (metrics["psnr_db"].reason or "")
    assert "reference_shape.per" in (metrics["ssim"].reason or "")


def test_another_size_is_resized_only_when_the_spec_says_it_is_the_same_scene() -> None:
    reference = with_noise(grey_video(frames=3, size=32), sigma=20.0)
    larger = WorkloadOutput(video=reference.repeat(2, axis=1).repeat(2, axis=2))
    undeclared = metrics_by_name(video_fidelity_metrics(larger, WorkloadOutput(video=reference), EvalContext()))
    assert undeclared["psnr_db"].value is None
    assert "64x64 px and its reference's 32x32" in (undeclared["psnr_db"].reason or "")
    declared = metrics_by_name(
        video_fidelity_metrics(larger, WorkloadOutput(video=reference), EvalContext(resize_to_reference=True))
    )
    assert declared["psnr_db"].value is not None and declared["psnr_db"].value > 25.0


def test_ssim_window_fits_small_frames() -> None:
    assert ssim_window(64, 64) == 7
    assert ssim_window(6, 40) == 5
    assert ssim_window(3, 3) == 3
    with pytest.raises(ValueError, match="too small"):
        ssim_window(2, 50)
    tiny = with_noise(grey_video(frames=2, size=5), sigma=20.0)
    assert ssim(tiny, tiny) == pytest.approx(1.0)


def test_tiny_frames_make_ssim_unavailable_with_reason() -> None:
    tiny = WorkloadOutput(video=with_noise(grey_video(frames=1, size=2), sigma=20.0))
    metrics = metrics_by_name(video_fidelity_metrics(tiny, tiny, EvalContext()))
    assert metrics["psnr_db"].value == PSNR_CAP_DB
    assert not metrics["ssim"].available and "too small" in (metrics["ssim"].reason or "")


def test_metric_names_units_directions() -> None:
    reference = grey_video(frames=2, size=64)
    output = WorkloadOutput(video=with_noise(reference, sigma=5.0))
    context = EvalContext(inputs={"mouth_box": MOUTH_BOX})
    metrics = video_fidelity_metrics(output, WorkloadOutput(video=reference), context)
    assert [(m.name, m.unit, m.direction) for m in metrics] == [
        ("psnr_db", "dB", "maximize"),
        ("ssim", "1", "maximize"),
        ("psnr_mouth_db", "dB", "maximize"),
        ("ssim_mouth", "1", "maximize"),
    ]
    assert all(m.available for m in metrics)


def test_mouth_box_pixels_cover_the_declared_fractions() -> None:
    assert mouth_box_pixels(MOUTH_BOX, 64, 64) == (32, 56, 16, 48)
    assert mouth_box_pixels([0.1, 0.1, 0.2, 0.2], 15, 15) == (1, 3, 1, 3)
    for bad in ([0.5, 0.5, 0.4, 0.9], [0.0, 0.0, 1.5, 1.0], [0.1, 0.2, 0.3]):
        with pytest.raises(ValueError, match="mouth_box"):
            mouth_box_pixels(bad, 64, 64)


def test_mouth_metrics_see_only_the_declared_box() -> None:
    reference = with_noise(grey_video(frames=2, size=64), sigma=20.0, seed=1)
    row0, row1, col0, col1 = mouth_box_pixels(MOUTH_BOX, 64, 64)
    outside = with_noise(reference, sigma=10.0, seed=2)
    outside[:, row0:row1, col0:col1] = reference[:, row0:row1, col0:col1]
    inside = reference.copy()
    inside[:, row0:row1, col0:col1] = with_noise(reference, sigma=10.0, seed=2)[:, row0:row1, col0:col1]

    assert psnr_db(outside, reference, mouth_box=MOUTH_BOX) == PSNR_CAP_DB
    assert ssim(outside, reference, mouth_box=MOUTH_BOX) == pytest.approx(1.0)
    assert psnr_db(outside, reference) < 40.0
    assert psnr_db(inside, reference, mouth_box=MOUTH_BOX) == pytest.approx(28.1, abs=0.5)
    assert psnr_db(inside, reference) > psnr_db(inside, reference, mouth_box=MOUTH_BOX) + 3.0
    assert ssim(inside, reference, mouth_box=MOUTH_BOX) < ssim(inside, reference)

    context = EvalContext(inputs={"mouth_box": MOUTH_BOX})
    metrics = metrics_by_name(
        video_fidelity_metrics(WorkloadOutput(video=inside), WorkloadOutput(video=reference), context)
    )
    assert metrics["psnr_mouth_db"].value == psnr_db(inside, reference, mouth_box=MOUTH_BOX)
    assert metrics["ssim_mouth"].value == ssim(inside, reference, mouth_box=MOUTH_BOX)


@pytest.mark.parametrize(
    ("inputs", "reason"),
    [
        ({}, "no mouth_box in inputs"),
        ({"mouth_box": [0.6, 0.5, 0.4, 0.9]}, "x0 < x1"),
        ({"mouth_box": "0.2 0.2 0.8 0.8"}, "must be a list"),
    ],
)
def test_mouth_metrics_unavailable_without_a_valid_box(inputs: dict, reason: str) -> None:
    video = WorkloadOutput(video=grey_video(frames=1, size=32))
    metrics = metrics_by_name(video_fidelity_metrics(video, video, EvalContext(inputs=inputs)))
    assert metrics["psnr_db"].available and metrics["ssim"].available
    for name in ("psnr_mouth_db", "ssim_mouth"):
        assert metrics[name].value is None and reason in (metrics[name].reason or "")


def test_missing_or_non_uint8_video_is_unavailable() -> None:
    video = WorkloadOutput(video=grey_video(frames=1, size=16))
    none = WorkloadOutput(video=None)
    floats = WorkloadOutput(video=grey_video(frames=1, size=16).astype(np.float32))
    for output, reference, reason in [
        (none, video, "produced no video"),
        (video, none, "reference output has no video"),
        (floats, video, "expected uint8"),
    ]:
        metrics = video_fidelity_metrics(output, reference, EvalContext())
        assert len(metrics) == 4
        assert all(m.value is None and reason in (m.reason or "") for m in metrics)
    assert psnr_metric(None, video.video).reason == "the workload produced no video"
    assert psnr_metric(video.video, video.video).value == PSNR_CAP_DB
