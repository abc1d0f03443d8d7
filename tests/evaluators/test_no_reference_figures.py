"""No-reference figures beside the reference-based ones (issue 39, item 3): every trial of a study that compares
videos with a reference also reports the temporal figures of its own output, and they are still reported where
a shape has no reference (its reference could not run)."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.evaluators.base import EvalContext
from tuner.evaluators.registry import evaluate_quality
from tuner.spec.metrics import COMPANION_METRICS, NO_REFERENCE_METRICS, trial_quality_metrics
from tuner.workloads.base import WorkloadOutput

pytest.importorskip("cv2")


def moving_video(frames: int = 6, size: int = 24) -> WorkloadOutput:
    """A small SIMULATED video: a bright square moving 2 px per frame over a gradient."""
    video = np.tile(np.linspace(0, 120, size, dtype=np.uint8)[None, None, :, None], (frames, size, 1, 3))
    for t in range(frames):
        video[t, 8:14, 2 + 2 * t : 8 + 2 * t] = 250
    return WorkloadOutput(video=video)


def test_a_trial_comparing_videos_also_computes_its_own_temporal_figures() -> None:
    asked = trial_quality_metrics({"psnr_db", "latency_p50_s"}, {"num_frames"})
    assert asked == sorted({"psnr_db", *COMPANION_METRICS})
    with_clips = trial_quality_metrics({"stlpips_alex"}, {"infer_frames"})
    assert "seam_score" in with_clips
    assert trial_quality_metrics({"text_f1"}, set()) == ["text_f1"]  # no video compared: nothing added
    assert trial_quality_metrics({"psnr_db"}, set(), installed=lambda name: False) == ["psnr_db"]
    assert set(COMPANION_METRICS) <= NO_REFERENCE_METRICS and "flicker_ratio" not in NO_REFERENCE_METRICS


def test_without_a_reference_the_own_figures_stand_alone_and_the_comparisons_say_why() -> None:
    why = "the reference at num_frames=9 could not run: OOM"
    names = ["psnr_db", "flicker_mae", "flicker_score", "flicker_ratio", "warping_error"]
    metrics = {m.name: m for m in evaluate_quality(names, moving_video(), None, EvalContext(reference_missing=why))}
    assert metrics["psnr_db"].value is None and metrics["psnr_db"].reason == why
    assert metrics["flicker_ratio"].value is None and metrics["flicker_ratio"].reason == why
    assert metrics["flicker_mae"].available and metrics["flicker_mae"].value > 0
    assert 0 < metrics["flicker_score"].value < 1
    assert metrics["warping_error"].available
    with_reference = {m.name: m for m in evaluate_quality(names, moving_video(), moving_video(), EvalContext())}
    assert with_reference["flicker_mae"].value == metrics["flicker_mae"].value  # the output's own: no reference
    assert with_reference["flicker_ratio"].value == pytest.approx(1.0)
