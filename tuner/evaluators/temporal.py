"""Temporal quality of one video: flicker, flow-warping error and clip-seam score.

These metrics judge a video on its own (no pixel alignment with the reference);
the ``*_ratio`` metrics then divide the candidate's value by the same statistic
of the reference video, so that 1 means "as temporally stable as the reference".
Each video is measured at its own size and frame count, on the first request
of a batch. Frames are uint8 RGB arrays of shape (T, H, W, 3).

Formulas (``I_t`` is frame t, values 0..255; ``|.|`` absolute value):

* **Jump** of a frame pair: ``J_t = mean_{pixels, channels} |I_{t+1} - I_t|`` (8-bit levels).
* **Flicker** (VBench "temporal flickering"): ``flicker_mae = mean_t J_t`` over the T-1
  consecutive pairs; ``flicker_score = (255 - flicker_mae) / 255`` (1 = no change at all);
  ``flicker_ratio = flicker_mae(candidate) / flicker_mae(reference)``.
* **Warping error**: see :func:`warping_error` (Farneback flow, forward-backward mask,
  mean *squared* error on [0, 1] intensities).
* **Seam score**: the video is generated in clips of ``F = infer_frames`` frames, clip k
  covering frames ``[k F, (k + 1) F)``. Boundary pairs are ``(k F - 1, k F)``;
  ``seam_score = mean(J at boundary pairs) / median(J at pairs inside clips)``.
  The median keeps one unusual inside pair from moving the baseline. About 1 means
  the seams are as smooth as ordinary motion; larger means visible jumps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import cv2
import numpy as np

from tuner.evaluators.base import EvalContext
from tuner.evaluators.video import first_request
from tuner.results import Direction, Metric

TEMPORAL_METRICS: dict[str, tuple[str, Direction]] = {
    "flicker_mae": ("levels", "minimize"),
    "flicker_score": ("1", "maximize"),
    "flicker_ratio": ("1", "minimize"),
    "warping_error": ("1", "minimize"),
    "warping_error_ratio": ("1", "minimize"),
    "seam_score": ("1", "minimize"),
    "seam_score_ratio": ("1", "minimize"),
}
"""Metric name -> (unit, better direction). ``levels``: 8-bit code values (0..255)."""

NO_VIDEO = "the workload produced no video"
NO_REFERENCE_VIDEO = "the reference output has no video"

MIN_FLOW_SIDE_PX = 16
"""Shorter frame side below which Farneback flow is unreliable: warping error unavailable.

Frames are *not* upscaled before the flow: measured on a smooth random texture moved
2 px per frame, bilinear 2x / 3x upscaling made Farneback (these parameters) estimate
-1.9 / -1.1 px instead of -2, while native 24 px frames gave -2.00 (8 px frames: -0.99).
"""

FARNEBACK_PYR_SCALE = 0.5
FARNEBACK_LEVELS = 3
FARNEBACK_WINSIZE = 15
FARNEBACK_ITERATIONS = 3
FARNEBACK_POLY_N = 5
FARNEBACK_POLY_SIGMA = 1.2
"""OpenCV's documented example parameters for ``cv2.calcOpticalFlowFarneback`` (flags 0)."""

CONSISTENCY_RELATIVE = 0.01
CONSISTENCY_ABSOLUTE_PX2 = 0.5
"""Forward-backward check: ``|fw + bw_w|^2 < 0.01 (|fw|^2 + |bw_w|^2) + 0.5`` (px^2)."""


def _check_frames(frames: np.ndarray, minimum: int = 2) -> None:
    """Raise ValueError unless ``frames`` is uint8 (T, H, W, 3) with at least ``minimum`` frames."""
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"expected frames of shape (T, H, W, 3), got {frames.shape}")
    if frames.dtype != np.uint8:
        raise ValueError(f"expected uint8 frames, got {frames.dtype}")
    if len(frames) < minimum:
        raise ValueError(f"needs at least {minimum} frames, the video has {len(frames)}")


def frame_jumps(frames: np.ndarray) -> np.ndarray:
    """Per-pair jumps ``J_t = mean |I_{t+1} - I_t|`` over pixels and channels, 8-bit levels.

    ``frames``: uint8 (T, H, W, 3), T >= 2. Returns float64 of shape (T - 1,).
    """
    _check_frames(frames)
    return np.array(
        [float(np.mean(cv2.absdiff(frames[t + 1], frames[t]))) for t in range(len(frames) - 1)], dtype=np.float64
    )


def mean_abs_frame_diff(frames: np.ndarray) -> float:
    """``flicker_mae``: the mean over consecutive pairs of :func:`frame_jumps`, 8-bit levels."""
    return float(np.mean(frame_jumps(frames)))


def flicker_score(frames: np.ndarray) -> float:
    """VBench temporal-flickering score ``(255 - mean_abs_frame_diff) / 255``, in [0, 1]."""
    return (255.0 - mean_abs_frame_diff(frames)) / 255.0


def _farneback(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Dense flow first -> second (grey uint8 (H, W)) as float32 (H, W, 2), pixels (dx, dy)."""
    flow = np.zeros((*first.shape, 2), dtype=np.float32)  # output only: flags has no initial flow
    flow = cv2.calcOpticalFlowFarneback(
        first,
        second,
        flow,
        pyr_scale=FARNEBACK_PYR_SCALE,
        levels=FARNEBACK_LEVELS,
        winsize=FARNEBACK_WINSIZE,
        iterations=FARNEBACK_ITERATIONS,
        poly_n=FARNEBACK_POLY_N,
        poly_sigma=FARNEBACK_POLY_SIGMA,
        flags=0,
    )
    return np.asarray(flow, dtype=np.float32)


def _sample(image: np.ndarray, map_x: np.ndarray, map_y: np.ndarray) -> np.ndarray:
    """Bilinear ``image(map_x, map_y)`` (``cv2.remap``; outside samples are 0, masked later)."""
    return cv2.remap(image, map_x, map_y, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def pair_warping_error(current: np.ndarray, following: np.ndarray) -> tuple[float, int]:
    """Masked warping error of one pair: (mean squared error on [0, 1], valid pixel count).

    ``following`` (frame t+1) is warped back onto ``current`` (frame t) with the forward
    flow fw = flow(t -> t+1): ``W(x) = I_{t+1}(x + fw(x))``. A pixel x is valid when
    ``x + fw(x)`` lies inside the frame and the forward-backward check passes:
    ``|fw(x) + bw(x + fw(x))|^2 < 0.01 (|fw(x)|^2 + |bw(x + fw(x))|^2) + 0.5`` (px^2), with
    bw = flow(t+1 -> t). The error is ``mean over valid pixels and RGB channels of
    (I_t / 255 - W / 255)^2``; it is NaN with count 0 when no pixel is valid.
    """
    height, width = current.shape[:2]
    grey_t = cv2.cvtColor(current, cv2.COLOR_RGB2GRAY)
    grey_next = cv2.cvtColor(following, cv2.COLOR_RGB2GRAY)
    forward = _farneback(grey_t, grey_next)
    backward = _farneback(grey_next, grey_t)
    grid_x, grid_y = np.meshgrid(np.arange(width, dtype=np.float32), np.arange(height, dtype=np.float32))
    map_x, map_y = grid_x + forward[..., 0], grid_y + forward[..., 1]
    inside = (map_x >= 0) & (map_x <= width - 1) & (map_y >= 0) & (map_y <= height - 1)
    backward_at_target = _sample(backward, map_x, map_y)
    mismatch = np.sum((forward + backward_at_target) ** 2, axis=-1)
    tolerance = (
        CONSISTENCY_RELATIVE * (np.sum(forward**2, axis=-1) + np.sum(backward_at_target**2, axis=-1))
        + CONSISTENCY_ABSOLUTE_PX2
    )
    valid = inside & (mismatch < tolerance)
    count = int(valid.sum())
    if count == 0:
        return math.nan, 0
    warped = _sample(following.astype(np.float32) / 255.0, map_x, map_y)
    squared = (current.astype(np.float32) / 255.0 - warped) ** 2
    return float(np.mean(squared[valid], dtype=np.float64)), count


def warping_error(frames: np.ndarray) -> float:
    """Mean over consecutive pairs of :func:`pair_warping_error` (unitless, [0, 1] scale).

    ``frames``: uint8 RGB (T, H, W, 3), T >= 2. Flow is OpenCV Farneback on greyscale
    (the ``FARNEBACK_*`` parameters) at the native size (no upscaling, see
    :data:`MIN_FLOW_SIDE_PX`). Pairs with no valid pixel are skipped. Raises ValueError
    when the shorter side is below :data:`MIN_FLOW_SIDE_PX` or no pair has a valid pixel.
    """
    _check_frames(frames)
    if min(frames.shape[1:3]) < MIN_FLOW_SIDE_PX:
        raise ValueError(
            f"frames of {frames.shape[2]}x{frames.shape[1]} px are below "
            f"{MIN_FLOW_SIDE_PX} px: optical flow is unreliable"
        )
    errors = [pair_warping_error(frames[t], frames[t + 1]) for t in range(len(frames) - 1)]
    usable = [error for error, count in errors if count > 0]
    if not usable:
        raise ValueError("no pixel passed the forward-backward flow consistency check")
    return float(np.mean(usable))


def seam_score(frames: np.ndarray, clip_length: int) -> float:
    """Mean jump at clip boundaries over the median jump inside clips (unitless, ~1 = seamless).

    Clip k covers frames ``[k * clip_length, (k + 1) * clip_length)``; boundary pairs are
    ``(k * clip_length - 1, k * clip_length)`` for k >= 1 within the video; every other
    consecutive pair is inside a clip. Raises ValueError (with the reason) when
    ``clip_length < 1``, when there is no boundary or no inside pair, or when the median
    inside jump is 0.
    """
    if clip_length < 1:
        raise ValueError(f"clip length must be >= 1 frame, got {clip_length}")
    _check_frames(frames)
    jumps = frame_jumps(frames)
    at_boundary = (np.arange(len(jumps)) + 1) % clip_length == 0
    if not at_boundary.any():
        raise ValueError(f"the video ({len(frames)} frames) is one clip of <= {clip_length} frames: no clip boundary")
    if at_boundary.all():
        raise ValueError(f"clips of {clip_length} frame(s) leave no frame pair inside a clip")
    inside_median = float(np.median(jumps[~at_boundary]))
    if inside_median == 0.0:
        raise ValueError("frames inside clips do not change (median inside jump is 0)")
    return float(np.mean(jumps[at_boundary])) / inside_median


# ---------------------------------------------------------------- adapter


def _metric(name: str, value: float) -> Metric:
    unit, direction = TEMPORAL_METRICS[name]
    return Metric(name, value, unit, direction)


def _missing(name: str, reason: str) -> Metric:
    unit, direction = TEMPORAL_METRICS[name]
    return Metric.unavailable(name, unit, direction, reason)


def _ratio(name: str, candidate: float | str, reference: float | str, what: str) -> Metric:
    """candidate / reference as a Metric; a str on either side is the reason it is missing."""
    if isinstance(candidate, str):
        return _missing(name, candidate)
    if isinstance(reference, str):
        prefixed = reference if reference.startswith("the reference") else f"reference: {reference}"
        return _missing(name, prefixed)
    if reference == 0.0:
        return _missing(name, f"the reference's {what} is 0 (ratio undefined)")
    return _metric(name, candidate / reference)


def _try(function: Any, *args: Any) -> float | str:
    """The function's float result, or the reason (str) it could not be computed."""
    try:
        return float(function(*args))
    except ValueError as error:
        return str(error)


def _clip_length(settings: Mapping[str, Any] | None, whose: str) -> int | str:
    """``infer_frames`` from settings as a positive int, or the reason it is missing."""
    if settings is None:
        return f"the {whose} settings are not known"
    value = settings.get("infer_frames")
    if value is None:
        return f"the {whose} settings have no 'infer_frames' (clip length)"
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not number.is_integer() or number < 1:
        return f"the {whose} 'infer_frames' is not a positive integer: {value!r}"
    return int(number)


def _value(name: str, value: float | str) -> Metric:
    """A Metric from a value, or an unavailable one when ``value`` is the reason (str)."""
    return _missing(name, value) if isinstance(value, str) else _metric(name, value)


def _videos(output: Any, reference: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
    """First-request frames of the candidate and the reference (None where no video)."""
    video = getattr(output, "video", None)
    ref_video = getattr(reference, "video", None)
    return (
        None if video is None else first_request(np.asarray(video)),
        None if ref_video is None else first_request(np.asarray(ref_video)),
    )


def flicker_metrics(output: Any, reference: Any, context: EvalContext) -> list[Metric]:
    """``flicker_mae``, ``flicker_score`` and ``flicker_ratio`` (quality-function signature)."""
    frames, ref_frames = _videos(output, reference)
    names = ("flicker_mae", "flicker_score", "flicker_ratio")
    if frames is None:
        return [_missing(name, NO_VIDEO) for name in names]
    mae = _try(mean_abs_frame_diff, frames)
    ref_mae = NO_REFERENCE_VIDEO if ref_frames is None else _try(mean_abs_frame_diff, ref_frames)
    score = mae if isinstance(mae, str) else (255.0 - mae) / 255.0
    return [
        _value("flicker_mae", mae),
        _value("flicker_score", score),
        _ratio("flicker_ratio", mae, ref_mae, "mean absolute frame difference"),
    ]


def warping_metrics(output: Any, reference: Any, context: EvalContext) -> list[Metric]:
    """``warping_error`` and ``warping_error_ratio`` (the costly part: two flows per pair)."""
    frames, ref_frames = _videos(output, reference)
    if frames is None:
        return [_missing(name, NO_VIDEO) for name in ("warping_error", "warping_error_ratio")]
    error = _try(warping_error, frames)
    ref_error = NO_REFERENCE_VIDEO if ref_frames is None else _try(warping_error, ref_frames)
    return [_value("warping_error", error), _ratio("warping_error_ratio", error, ref_error, "warping error")]


def seam_metrics(output: Any, reference: Any, context: EvalContext) -> list[Metric]:
    """``seam_score`` (clip length ``context.settings["infer_frames"]``) and ``seam_score_ratio``
    (the reference's from ``context.reference_settings["infer_frames"]``)."""
    frames, ref_frames = _videos(output, reference)
    if frames is None:
        return [_missing(name, NO_VIDEO) for name in ("seam_score", "seam_score_ratio")]
    seam = _seam(frames, context.settings, "candidate")
    ref_seam = NO_REFERENCE_VIDEO if ref_frames is None else _seam(ref_frames, context.reference_settings, "reference")
    return [_value("seam_score", seam), _ratio("seam_score_ratio", seam, ref_seam, "seam score")]


def _seam(frames: np.ndarray, settings: Mapping[str, Any] | None, whose: str) -> float | str:
    clip_length = _clip_length(settings, whose)
    if isinstance(clip_length, str):
        return clip_length
    return _try(seam_score, frames, clip_length)


def temporal_metrics(output: Any, reference: Any, context: EvalContext) -> list[Metric]:
    """All :data:`TEMPORAL_METRICS`, in that order, for the first request of ``output``.

    ``output`` / ``reference``: WorkloadOutput-like objects with ``.video`` (uint8
    (B, T, H, W, 3) or (T, H, W, 3), or None); ``reference`` may be None. Without a
    candidate video every metric is unavailable ("the workload produced no video");
    without a reference video only the ``*_ratio`` metrics are. Equivalent to
    :func:`flicker_metrics` + :func:`warping_metrics` + :func:`seam_metrics`, which a
    registry may wire separately so that a study naming only flicker skips the flow.
    """
    return (
        flicker_metrics(output, reference, context)
        + warping_metrics(output, reference, context)
        + seam_metrics(output, reference, context)
    )
