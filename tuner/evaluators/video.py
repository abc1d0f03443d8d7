"""Video fidelity against the reference output: PSNR and SSIM, whole frame and mouth region.

Alignment
---------
Both videos are compared frame by frame (:func:`aligned_pair`), the first request of a batch
each. A video of another frame count is another video (a diffusion model given another frame
count generates other content): it is never truncated to the shorter one, and every metric is
unavailable with the reason (:func:`comparable_reason`). Frames of another size are resized to the
reference's only when the spec says the size parameter shows the same scene
(``reference_shape.same_content``: ``EvalContext.resize_to_reference``), with one fixed resampler
(bilinear, no antialiasing, half-pixel centres, via :func:`numpy` interpolation on a separable
grid); otherwise the metrics are unavailable with the reason. A spec that varies the shape declares
``reference_shape.per`` and each trial is compared with the reference at its own shape
(:mod:`tuner.study.shapes`). Frames are uint8 RGB, values 0..255.

Metrics (all per frame with scikit-image, then the plain mean over frames)
-------------------------------------------------------------------------
``psnr_db``        ``skimage.metrics.peak_signal_noise_ratio(ref, cand, data_range=255)``, dB.
                   A frame identical to the reference has infinite PSNR; by this
                   project's convention every frame's PSNR is capped at
                   :data:`PSNR_CAP_DB` (100 dB) before the mean, so identical
                   videos score exactly 100 dB and one perfect frame cannot make
                   the mean infinite.
``ssim``           ``skimage.metrics.structural_similarity(ref, cand, channel_axis=-1,
                   data_range=255)`` with skimage's defaults otherwise (uniform
                   window, sample covariance, K1=0.01, K2=0.03); unit "1", 1 = identical.
                   The window is 7x7 (skimage's default); on frames or regions with a
                   shorter side below 7 it shrinks to the largest odd size that fits
                   (:func:`ssim_window`), and below 3 pixels SSIM is not computed.
``psnr_mouth_db``  / ``ssim_mouth``: the same on the mouth box only (avatars).

Mouth box
---------
``[x0, y0, x1, y1]`` as fractions (0..1) of the reference frame's width and height,
``x`` to the right, ``y`` down. It becomes the pixel rows ``floor(y0 H) .. ceil(y1 H)``
and columns ``floor(x0 W) .. ceil(x1 W)`` (end exclusive) of the aligned frames, so
the box always covers at least the declared area. :func:`video_fidelity_metrics` reads
it from ``context.inputs["mouth_box"]``; finding the box with a detector is another
module's job (it can pass ``mouth_box`` to the pure functions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tuner.evaluators.base import EvalContext
from tuner.results import Direction, Metric

SKIMAGE_MODULES = "skimage.metrics.simple_metrics", "skimage.metrics._structural_similarity"
"""What computing PSNR / SSIM imports (scikit-image, with scipy.stats: ~2 CPU-s): imported at the first
use, not with this module — every trial worker imports this module, few studies ask for these metrics.
A fork server preloads them for a study that does (:func:`tuner.evaluators.registry.warm_ups`)."""

PSNR_CAP_DB = 100.0
"""Per-frame PSNR ceiling in dB (identical frames would be infinite)."""

SSIM_DEFAULT_WINDOW = 7
"""scikit-image's default SSIM window side, pixels."""


def warm_up() -> None:
    """Import what PSNR / SSIM need (:data:`SKIMAGE_MODULES`): a fork server calls it once, so its trial
    workers inherit them."""
    _skimage_metrics()


def _skimage_metrics() -> Any:
    """``skimage.metrics`` with its PSNR and SSIM functions loaded (see :data:`SKIMAGE_MODULES`)."""
    import importlib

    for module in SKIMAGE_MODULES:
        importlib.import_module(module)
    import skimage.metrics

    return skimage.metrics


VIDEO_METRICS: dict[str, tuple[str, Direction]] = {
    "psnr_db": ("dB", "maximize"),
    "ssim": ("1", "maximize"),
    "psnr_mouth_db": ("dB", "maximize"),
    "ssim_mouth": ("1", "maximize"),
}
"""Metric name -> (unit, better direction) for :func:`video_fidelity_metrics`."""

MouthBox = Sequence[float]
"""``[x0, y0, x1, y1]`` as fractions (0..1) of frame width / height."""


def first_request(video: np.ndarray) -> np.ndarray:
    """(B, T, H, W, C) -> (T, H, W, C) of the first request; (T, H, W, C) unchanged."""
    if video.ndim == 5:
        return video[0]
    if video.ndim == 4:
        return video
    raise ValueError(f"expected a video of 4 or 5 dimensions, got shape {video.shape}")


def resize_bilinear(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of (T, H, W, C) frames to (T, height, width, C), float64, align-corners off."""
    _, in_h, in_w, _ = frames.shape
    if (in_h, in_w) == (height, width):
        return frames.astype(np.float64)

    def coords(out_size: int, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = (np.arange(out_size) + 0.5) * in_size / out_size - 0.5
        pos = np.clip(pos, 0, in_size - 1)
        low = np.floor(pos).astype(int)
        high = np.minimum(low + 1, in_size - 1)
        return low, high, pos - low

    y0, y1, wy = coords(height, in_h)
    x0, x1, wx = coords(width, in_w)
    data = frames.astype(np.float64)
    rows = data[:, y0] * (1 - wy)[None, :, None, None] + data[:, y1] * wy[None, :, None, None]
    return rows[:, :, x0] * (1 - wx)[None, None, :, None] + rows[:, :, x1] * wx[None, None, :, None]


def aligned_pair(candidate: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two videos as float64 (T, H, W, C) arrays of one shape (see module docs)."""
    cand, ref = first_request(candidate), first_request(reference)
    if len(cand) == 0 or len(ref) == 0:
        raise ValueError("a video has no frames")
    if len(cand) != len(ref):
        raise ValueError(frame_count_reason(len(cand), len(ref)))
    if cand.shape[-1] != ref.shape[-1]:
        raise ValueError(f"channel counts differ: candidate {cand.shape[-1]}, reference {ref.shape[-1]}")
    return resize_bilinear(cand, ref.shape[1], ref.shape[2]), ref.astype(np.float64)


def frame_count_reason(candidate_frames: int, reference_frames: int) -> str:
    """Why videos of two frame counts are not compared (one line)."""
    return (
        f"the output has {candidate_frames} frames and its reference {reference_frames}: another frame count is "
        f"another video, never truncated (declare the parameter in reference_shape.per)"
    )


def comparable_reason(
    candidate: np.ndarray | None, reference: np.ndarray | None, resize_to_reference: bool
) -> str | None:
    """Why two videos cannot be compared frame by frame, or None when they can: a video missing or not uint8,
    another frame count, or (unless ``resize_to_reference``) frames of another size."""
    missing = missing_video_reason(candidate, reference)
    if missing is not None or candidate is None or reference is None:
        return missing or "no video"
    cand, ref = first_request(np.asarray(candidate)), first_request(np.asarray(reference))
    if cand.ndim != 4 or ref.ndim != 4:
        return None  # aligned_pair says what is wrong with the layout
    if len(cand) != len(ref):
        return frame_count_reason(len(cand), len(ref))
    if cand.shape[1:3] != ref.shape[1:3] and not resize_to_reference:
        return (
            f"the output's frames are {cand.shape[1]}x{cand.shape[2]} px and its reference's "
            f"{ref.shape[1]}x{ref.shape[2]}: declare the parameter in reference_shape.per (or in "
            f"reference_shape.same_content when it only resizes the same scene)"
        )
    return None


def mouth_box_pixels(box: MouthBox, height: int, width: int) -> tuple[int, int, int, int]:
    """Fractional ``[x0, y0, x1, y1]`` -> pixel ``(row0, row1, col0, col1)``, ends exclusive.

    Raises ValueError for a box that is not four finite fractions in 0..1 with
    ``x0 < x1`` and ``y0 < y1``.
    """
    values = [float(v) for v in box]
    if len(values) != 4 or not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"mouth_box must be [x0, y0, x1, y1] as fractions 0..1, got {list(box)}")
    x0, y0, x1, y1 = values
    if not (x0 < x1 and y0 < y1):
        raise ValueError(f"mouth_box needs x0 < x1 and y0 < y1, got {values}")
    row0, row1 = math.floor(y0 * height), min(height, math.ceil(y1 * height))
    col0, col1 = math.floor(x0 * width), min(width, math.ceil(x1 * width))
    return row0, max(row1, row0 + 1), col0, max(col1, col0 + 1)


def _crop(frames: np.ndarray, box: MouthBox | None) -> np.ndarray:
    if box is None:
        return frames
    row0, row1, col0, col1 = mouth_box_pixels(box, frames.shape[1], frames.shape[2])
    return frames[:, row0:row1, col0:col1]


def _compared(
    candidate: np.ndarray, reference: np.ndarray, mouth_box: MouthBox | None
) -> tuple[np.ndarray, np.ndarray]:
    cand, ref = aligned_pair(candidate, reference)
    return _crop(cand, mouth_box), _crop(ref, mouth_box)


def ssim_window(height: int, width: int) -> int:
    """SSIM window side for a (height, width) region: 7, or the largest odd side that fits.

    Raises ValueError when the shorter side is below 3 pixels (no honest SSIM).
    """
    side = min(SSIM_DEFAULT_WINDOW, height, width)
    if side % 2 == 0:
        side -= 1
    if side < 3:
        raise ValueError(f"region of {height}x{width} px is too small for SSIM (needs at least 3x3)")
    return side


def psnr_db(
    candidate: np.ndarray, reference: np.ndarray, peak: float = 255.0, mouth_box: MouthBox | None = None
) -> float:
    """Mean over frames of the per-frame PSNR in dB, each frame capped at 100 dB.

    ``peak`` is the data range (255 for uint8). With ``mouth_box`` only that region
    of the aligned frames is compared (see module docs).
    """
    cand, ref = _compared(candidate, reference, mouth_box)
    per_frame: list[float] = []
    for ref_frame, cand_frame in zip(ref, cand):
        if np.array_equal(ref_frame, cand_frame):
            per_frame.append(PSNR_CAP_DB)
            continue
        value = float(_skimage_metrics().peak_signal_noise_ratio(ref_frame, cand_frame, data_range=peak))
        per_frame.append(min(PSNR_CAP_DB, value))
    return float(np.mean(per_frame))


def ssim(candidate: np.ndarray, reference: np.ndarray, mouth_box: MouthBox | None = None) -> float:
    """Mean over frames of the per-frame SSIM (unit 1; 1 = identical).

    Window: :func:`ssim_window` of the compared region. With ``mouth_box`` only
    that region of the aligned frames is compared.
    """
    cand, ref = _compared(candidate, reference, mouth_box)
    window = ssim_window(ref.shape[1], ref.shape[2])
    per_frame = [
        float(
            _skimage_metrics().structural_similarity(
                ref_frame, cand_frame, win_size=window, channel_axis=-1, data_range=255.0
            )
        )
        for ref_frame, cand_frame in zip(ref, cand)
    ]
    return float(np.mean(per_frame))


def psnr_metric(candidate: np.ndarray | None, reference: np.ndarray | None) -> Metric:
    """``psnr_db`` as a Metric, unavailable (with the reason) when a video is missing."""
    missing = missing_video_reason(candidate, reference)
    if missing is not None or candidate is None or reference is None:
        return Metric.unavailable("psnr_db", "dB", "maximize", missing or "no video")
    return _measured("psnr_db", lambda: psnr_db(candidate, reference))


def missing_video_reason(candidate: np.ndarray | None, reference: np.ndarray | None) -> str | None:
    """Why two videos cannot be compared (missing, or not uint8), or None when they can."""
    if candidate is None:
        return "the workload produced no video"
    if reference is None:
        return "the reference output has no video"
    for label, video in (("candidate", candidate), ("reference", reference)):
        if np.asarray(video).dtype != np.uint8:
            return f"the {label} video is {np.asarray(video).dtype}, expected uint8 (0..255)"
    return None


def _measured(name: str, compute: Callable[[], float]) -> Metric:
    """Run ``compute()``; a ValueError (bad shapes, box, tiny frames) makes it unavailable."""
    unit, direction = VIDEO_METRICS[name]
    try:
        return Metric(name, float(compute()), unit, direction)
    except ValueError as error:
        return Metric.unavailable(name, unit, direction, str(error))


def _mouth_box_from(inputs: Mapping[str, Any]) -> tuple[MouthBox | None, str | None]:
    """The declared mouth box, or (None, reason)."""
    box = inputs.get("mouth_box")
    if box is None:
        return None, "no mouth_box in inputs"
    if isinstance(box, (str, bytes)) or not isinstance(box, Sequence):
        return None, f"mouth_box must be a list [x0, y0, x1, y1] of fractions, got {box!r}"
    return box, None


def video_fidelity_metrics(output: Any, reference: Any, context: EvalContext) -> list[Metric]:
    """``psnr_db``, ``ssim``, ``psnr_mouth_db``, ``ssim_mouth`` of ``output.video`` vs ``reference.video``.

    A quality function (see :mod:`tuner.evaluators.base`). Each metric is unavailable, with
    the reason, when a video is missing or not uint8, the shapes cannot be aligned, the
    region is too small, or (mouth metrics) ``context.inputs`` has no valid ``mouth_box``.
    """
    candidate, ref = output.video, reference.video
    missing = comparable_reason(candidate, ref, context.resize_to_reference)
    if missing is not None:
        return [Metric.unavailable(name, unit, direction, missing) for name, (unit, direction) in VIDEO_METRICS.items()]
    metrics = [
        _measured("psnr_db", lambda: psnr_db(candidate, ref)),
        _measured("ssim", lambda: ssim(candidate, ref)),
    ]
    box, reason = _mouth_box_from(context.inputs)
    if box is None:
        for name in ("psnr_mouth_db", "ssim_mouth"):
            unit, direction = VIDEO_METRICS[name]
            metrics.append(Metric.unavailable(name, unit, direction, reason or "no mouth_box"))
        return metrics
    metrics.append(_measured("psnr_mouth_db", lambda: psnr_db(candidate, ref, mouth_box=box)))
    metrics.append(_measured("ssim_mouth", lambda: ssim(candidate, ref, mouth_box=box)))
    return metrics
