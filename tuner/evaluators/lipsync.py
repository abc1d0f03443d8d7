"""A weight-free lip-sync proxy: audio envelope vs mouth opening, cross-correlated over lags.

This is a *proxy* for audio-visual synchrony, not SyncNet and not LSE-C / LSE-D:
no learned audio or lip embeddings are involved. It asks one question of a
candidate's own video and audio (no reference output is needed): does the mouth
open when the audio is loud, and how many frames apart are the two?

Audio side (per video frame ``i``, at ``fps`` frames per second)
    window ``i`` = samples ``[round(i * rate / fps), round((i + 1) * rate / fps))``
    (the frame's own display interval ``[i / fps, (i + 1) / fps)``, zero-padded past
    the end); ``rms[i] = sqrt(mean(window ** 2))`` in full-scale units;
    onset strength ``onset[i] = |rms[i + 1] - rms[i]|`` (absolute, not positive-part:
    a closing mouth follows a falling envelope as much as an opening one follows a rise).
Video side
    the mouth box comes from ``inputs["mouth_box"]`` (``[x0, y0, x1, y1]``, fractions
    of the frame width / height) when given; otherwise from the OpenCV Haar frontal
    face cascade (largest face per sampled frame, median box over the frames where a
    face was found; mouth box = lower third of the face box, central half of its
    width — the smile cascade is not used). Aperture ``aperture[t]`` = fraction of
    the box's pixels whose luma (BT.601, 0..255) is ``<=`` one Otsu threshold
    computed over the box pixels of all frames together (dark = open mouth / lips);
    mouth motion ``motion[t] = |aperture[t + 1] - aperture[t]|``.
Correlation
    for each lag ``L`` in ``-15..+15`` frames, the Pearson correlation of the pairs
    ``(audio[t], video[t + L])`` over the overlapping ``t`` (each overlapping part is
    z-scored on its own). **Positive lag = the video lags behind the audio** (the
    mouth moves ``L`` frames after the sound). Best lag = argmax of the correlation
    (ties: smallest ``|L|``, then the negative one); peak = the correlation there;
    margin = peak - median of the correlations over all lags (the analogue of
    SyncNet's confidence: how much the best alignment stands out).

The primary pair is RMS vs aperture (``lipsync_*``); onset vs motion is reported
too (``lipsync_onset_*``). At least :data:`MIN_FRAMES` = 2 x 15 + 1 = 31 frames
with both video and audio are needed, so that the extreme lags still overlap on
16 frames. Frames of the video past the end of the audio are not used.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.evaluators.base import EvalContext
from tuner.evaluators.video import first_request
from tuner.results import Direction, Metric

MAX_LAG_FRAMES = 15
"""Lags searched: ``-MAX_LAG_FRAMES .. +MAX_LAG_FRAMES`` video frames."""

MIN_FRAMES = 2 * MAX_LAG_FRAMES + 1
"""Fewest frames (with both video and audio) for which the metrics are computed."""

HAAR_SAMPLE_FRAMES = 15
"""Evenly spaced frames on which the Haar face detector runs."""

NO_FACE_REASON = "no face found by the Haar cascade and no mouth_box in inputs"

LIPSYNC_METRICS: dict[str, tuple[str, Direction]] = {
    # The signed lag is informational (its sign is the direction of the offset);
    # "minimize" is nominal. Optimise lipsync_abs_lag_frames instead.
    "lipsync_lag_frames": ("frames", "minimize"),
    "lipsync_abs_lag_frames": ("frames", "minimize"),
    "lipsync_peak_corr": ("1", "maximize"),
    "lipsync_margin": ("1", "maximize"),
    "lipsync_onset_lag_frames": ("frames", "minimize"),
    "lipsync_onset_peak_corr": ("1", "maximize"),
    "lipsync_onset_margin": ("1", "maximize"),
}
"""Every metric :func:`lipsync_metrics` returns: name -> (unit, direction)."""

PixelBox = tuple[int, int, int, int]
"""``(x0, y0, x1, y1)`` in pixels; ``x1`` and ``y1`` exclusive."""


@dataclass(frozen=True)
class SyncStats:
    """Summary of one lag-correlation curve (see module docs for the sign convention)."""

    lag_frames: int
    peak_corr: float
    margin: float


def frame_audio_rms(audio: np.ndarray, rate: float, fps: float, n_frames: int) -> np.ndarray:
    """RMS of the audio in each of ``n_frames`` video frames' windows, float64 (n_frames,).

    Window ``i`` holds samples ``[round(i * rate / fps), round((i + 1) * rate / fps))``;
    samples past the end of ``audio`` count as zeros. Units: those of the samples
    (full scale 1.0). ``rate`` in Hz, ``fps`` in frames per second.
    """
    if rate <= 0 or fps <= 0:
        raise ValueError(f"rate and fps must be positive, got rate={rate} Hz, fps={fps}")
    samples = np.asarray(audio, dtype=np.float64).reshape(-1)
    bounds = np.round(np.arange(n_frames + 1) * (rate / fps)).astype(np.int64)
    squares = np.concatenate(([0.0], np.cumsum(samples**2)))
    clipped = np.minimum(bounds, len(samples))
    energy = squares[clipped[1:]] - squares[clipped[:-1]]
    lengths = np.maximum(bounds[1:] - bounds[:-1], 1)
    return np.sqrt(np.maximum(energy, 0.0) / lengths)


def onset_strength(rms: np.ndarray) -> np.ndarray:
    """``|rms[i + 1] - rms[i]|``, length ``len(rms) - 1`` (entry ``i`` = transition i -> i+1)."""
    return np.abs(np.diff(np.asarray(rms, dtype=np.float64)))


def _luma(frames: np.ndarray) -> np.ndarray:
    """uint8 BT.601 luma of (T, h, w, 3) RGB or (T, h, w) grey uint8 frames."""
    if frames.dtype != np.uint8:
        raise ValueError(f"video frames must be uint8, got {frames.dtype}")
    if frames.ndim == 3:
        return frames
    weights = np.array([299, 587, 114], dtype=np.int32)
    return ((frames[..., :3].astype(np.int32) @ weights + 500) // 1000).astype(np.uint8)


def mouth_aperture(frames: np.ndarray, box: PixelBox) -> np.ndarray:
    """Fraction (0..1) of dark pixels in ``box`` per frame, float64 (T,).

    ``frames``: uint8 (T, H, W, 3) RGB or (T, H, W) grey. Dark = luma ``<=`` the Otsu
    threshold of the box pixels of all frames pooled (one threshold per video).
    """
    x0, y0, x1, y1 = box
    if not (0 <= x0 < x1 <= frames.shape[2] and 0 <= y0 < y1 <= frames.shape[1]):
        raise ValueError(f"mouth box {box} is empty or outside frames of shape {frames.shape}")
    import cv2

    crop = _luma(np.ascontiguousarray(frames[:, y0:y1, x0:x1]))
    threshold, _ = cv2.threshold(crop.reshape(-1, 1), 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    return (crop <= threshold).reshape(len(crop), -1).mean(axis=1)


def mouth_motion(aperture: np.ndarray) -> np.ndarray:
    """``|aperture[t + 1] - aperture[t]|``, length ``len(aperture) - 1``."""
    return np.abs(np.diff(np.asarray(aperture, dtype=np.float64)))


@functools.lru_cache(maxsize=1)
def _face_cascade() -> Any:
    import cv2

    cascade_dir: str = cv2.data.haarcascades  # type: ignore[attr-defined]  # absent from cv2's stubs
    cascade = cv2.CascadeClassifier(cascade_dir + "haarcascade_frontalface_default.xml")
    if cascade.empty():
        raise RuntimeError("OpenCV's haarcascade_frontalface_default.xml could not be loaded")
    return cascade


def detect_face_box(frames: np.ndarray, sample_frames: int = HAAR_SAMPLE_FRAMES) -> PixelBox | None:
    """Median Haar frontal-face box over up to ``sample_frames`` evenly spaced frames.

    Per sampled frame the largest detection counts (scale factor 1.1, 4 neighbours,
    faces of at least 24 x 24 pixels). ``None`` unless a face is found in at least
    half of the sampled frames (a lone hit is more likely a false positive).
    """
    luma = _luma(frames)
    picks = np.unique(np.linspace(0, len(luma) - 1, min(sample_frames, len(luma))).round().astype(int))
    boxes = []
    for index in picks:
        found = _face_cascade().detectMultiScale(luma[index], scaleFactor=1.1, minNeighbors=4, minSize=(24, 24))
        if len(found):
            x, y, w, h = max(found, key=lambda b: int(b[2]) * int(b[3]))
            boxes.append((x, y, x + w, y + h))
    if not boxes or 2 * len(boxes) < len(picks):
        return None
    x0, y0, x1, y1 = (int(round(v)) for v in np.median(np.array(boxes, dtype=np.float64), axis=0))
    return x0, y0, x1, y1


def detect_mouth_box(frames: np.ndarray) -> PixelBox | None:
    """Mouth box from :func:`detect_face_box`: lower third, central half width; ``None`` without a face."""
    face = detect_face_box(frames)
    if face is None:
        return None
    x0, y0, x1, y1 = face
    width, height = x1 - x0, y1 - y0
    return x0 + width // 4, y0 + (2 * height) // 3, x0 + (3 * width + 3) // 4, y1


def mouth_box_from_fractions(box: Sequence[float], height: int, width: int) -> PixelBox:
    """``[x0, y0, x1, y1]`` fractions of the frame -> pixel box (outward rounding).

    Raises ``ValueError`` unless ``0 <= x0 < x1 <= 1`` and ``0 <= y0 < y1 <= 1``.
    """
    values = [float(v) for v in box]
    if len(values) != 4 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"mouth_box must be 4 finite fractions [x0, y0, x1, y1], got {box!r}")
    fx0, fy0, fx1, fy1 = values
    if not (0.0 <= fx0 < fx1 <= 1.0 and 0.0 <= fy0 < fy1 <= 1.0):
        raise ValueError(f"mouth_box needs 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1, got {box!r}")
    x0, y0 = int(math.floor(fx0 * width)), int(math.floor(fy0 * height))
    x1, y1 = int(math.ceil(fx1 * width)), int(math.ceil(fy1 * height))
    return x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two equal-length series; NaN when undefined."""
    if len(x) < 3:
        return math.nan
    x_std, y_std = x.std(), y.std()
    if x_std == 0 or y_std == 0:
        return math.nan
    return float(np.mean((x - x.mean()) / x_std * ((y - y.mean()) / y_std)))


def lag_correlation(a: np.ndarray, b: np.ndarray, max_lag: int = MAX_LAG_FRAMES) -> tuple[np.ndarray, np.ndarray]:
    """Pearson correlation of ``(a[t], b[t + lag])`` for ``lag`` in ``-max_lag..max_lag``.

    ``a`` and ``b`` are truncated to their common length. Returns ``(lags, corrs)``:
    int64 and float64 arrays of length ``2 * max_lag + 1``; a correlation is NaN when
    the overlap is shorter than 3 or a part is constant. Positive lag: ``b`` lags
    behind ``a``.
    """
    n = min(len(a), len(b))
    x, y = np.asarray(a, dtype=np.float64)[:n], np.asarray(b, dtype=np.float64)[:n]
    lags = np.arange(-max_lag, max_lag + 1, dtype=np.int64)
    corrs = np.empty(len(lags))
    for i, lag in enumerate(lags):
        if lag >= 0:
            corrs[i] = _pearson(x[: n - lag], y[lag:])
        else:
            corrs[i] = _pearson(x[-lag:], y[: n + lag])
    return lags, corrs


def sync_stats(lags: np.ndarray, corrs: np.ndarray) -> SyncStats:
    """Best lag, peak correlation and margin (peak - median over the defined lags).

    Ties for the peak go to the smallest ``|lag|``, then to the negative lag.
    Raises ``ValueError`` when no correlation is defined.
    """
    defined = np.isfinite(corrs)
    if not defined.any():
        raise ValueError("no lag has a defined correlation")
    peak = float(np.max(corrs[defined]))
    best = min(
        (int(lag) for lag, c in zip(lags, corrs) if np.isfinite(c) and c == peak), key=lambda lag: (abs(lag), lag)
    )
    return SyncStats(lag_frames=best, peak_corr=peak, margin=peak - float(np.median(corrs[defined])))


def _all_unavailable(reason: str) -> list[Metric]:
    return [Metric.unavailable(name, unit, direction, reason) for name, (unit, direction) in LIPSYNC_METRICS.items()]


def _pair_metrics(prefix: str, audio_series: np.ndarray, video_series: np.ndarray, with_abs: bool) -> list[Metric]:
    """Lag / peak / margin metrics of one (audio, video) series pair, named ``prefix_*``."""
    names = (
        [f"{prefix}_lag_frames"]
        + ([f"{prefix}_abs_lag_frames"] if with_abs else [])
        + [f"{prefix}_peak_corr", f"{prefix}_margin"]
    )
    if np.ptp(audio_series) == 0 or np.ptp(video_series) == 0:
        side = "audio" if np.ptp(audio_series) == 0 else "mouth"
        reason = f"the {side} series of {prefix} is constant over the video, so no correlation is defined"
        return [Metric.unavailable(n, *LIPSYNC_METRICS[n], reason) for n in names]
    try:
        stats = sync_stats(*lag_correlation(audio_series, video_series, MAX_LAG_FRAMES))
    except ValueError as error:
        return [Metric.unavailable(n, *LIPSYNC_METRICS[n], str(error)) for n in names]
    values = {
        f"{prefix}_lag_frames": float(stats.lag_frames),
        f"{prefix}_abs_lag_frames": float(abs(stats.lag_frames)),
        f"{prefix}_peak_corr": stats.peak_corr,
        f"{prefix}_margin": stats.margin,
    }
    return [Metric(n, values[n], *LIPSYNC_METRICS[n]) for n in names]


def _frame_rate(inputs: Mapping[str, Any], n_video: int, audio_seconds: float) -> float:
    """``inputs["fps"]`` when given, else video frames / audio seconds. Raises ``ValueError``."""
    if inputs.get("fps") is None:
        return n_video / audio_seconds
    fps = float(inputs["fps"])
    if not math.isfinite(fps) or fps <= 0:
        raise ValueError(f"inputs fps must be a positive number, got {inputs['fps']!r}")
    return fps


def lipsync_metrics(output: Any, reference: Any, context: EvalContext) -> list[Metric]:
    """The lip-sync proxy metrics of ``output``'s own video and audio (see module docs).

    ``reference`` is accepted for the evaluator signature and ignored. Uses the first
    request of a batched video, ``context.inputs["fps"]`` (default: video frames /
    audio seconds) and ``context.inputs["mouth_box"]`` (default: Haar detection).
    Returns every metric of :data:`LIPSYNC_METRICS`; each is unavailable, with the
    reason, when it cannot be computed. Without audio the reason is the output's own
    ``audio_unavailable_reason`` when it has one (a command's video with no audio
    track: :class:`tuner.adapters.command.CommandOutput`).
    """
    del reference
    video, audio, rate = (
        getattr(output, "video", None),
        getattr(output, "audio", None),
        getattr(output, "audio_rate", None),
    )
    if video is None:
        return _all_unavailable("the workload produced no video")
    if audio is None or not rate:
        return _all_unavailable(
            getattr(output, "audio_unavailable_reason", None) or "the workload produced no audio (or no audio_rate)"
        )
    frames = first_request(np.asarray(video))
    samples = np.asarray(audio, dtype=np.float64).reshape(-1)
    if len(frames) == 0 or len(samples) == 0:
        return _all_unavailable("the video or the audio is empty")
    if frames.dtype != np.uint8:
        return _all_unavailable(f"the video must be uint8, got {frames.dtype}")
    try:
        fps = _frame_rate(context.inputs, len(frames), len(samples) / rate)
    except (TypeError, ValueError) as error:
        return _all_unavailable(str(error))
    frames_with_audio = int(math.floor(len(samples) * fps / rate + 1e-6))
    n_frames = min(len(frames), frames_with_audio)
    if n_frames < MIN_FRAMES:
        return _all_unavailable(
            f"only {n_frames} frames have both video and audio (at {fps:g} fps); the lip-sync proxy needs "
            f"at least {MIN_FRAMES} (2 x {MAX_LAG_FRAMES} lags + 1)"
        )
    frames = frames[:n_frames]
    declared = context.inputs.get("mouth_box")
    if declared is not None:
        try:
            box: PixelBox | None = mouth_box_from_fractions(declared, frames.shape[1], frames.shape[2])
        except (TypeError, ValueError) as error:
            return _all_unavailable(f"invalid mouth_box in inputs: {error}")
    else:
        box = detect_mouth_box(frames)
    if box is None:
        return _all_unavailable(NO_FACE_REASON)
    rms = frame_audio_rms(samples, rate, fps, n_frames)
    aperture = mouth_aperture(frames, box)
    return _pair_metrics("lipsync", rms, aperture, with_abs=True) + _pair_metrics(
        "lipsync_onset", onset_strength(rms), mouth_motion(aperture), with_abs=False
    )
