"""Video fidelity against the reference output.

Both videos are brought to a common shape before comparing: the first request
of a batch, the first ``min(frames)`` frames, and, when sizes differ, the
candidate resized to the reference's size with one fixed resampler (bilinear,
no antialiasing, via :func:`numpy` interpolation on a separable grid).
"""

from __future__ import annotations

import math

import numpy as np

from tuner.results import Metric


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
    frames = min(len(cand), len(ref))
    if frames == 0:
        raise ValueError("a video has no frames")
    cand, ref = cand[:frames], ref[:frames]
    return resize_bilinear(cand, ref.shape[1], ref.shape[2]), ref.astype(np.float64)


def psnr_db(candidate: np.ndarray, reference: np.ndarray, peak: float = 255.0) -> float:
    """Mean over frames of the per-frame PSNR in dB; identical frames count as 100 dB."""
    cand, ref = aligned_pair(candidate, reference)
    mse = ((cand - ref) ** 2).reshape(len(ref), -1).mean(axis=1)
    per_frame = [100.0 if m == 0 else min(100.0, 10 * math.log10(peak * peak / m)) for m in mse]
    return float(np.mean(per_frame))


def psnr_metric(candidate: np.ndarray | None, reference: np.ndarray | None) -> Metric:
    """``psnr_db`` as a Metric, unavailable (with the reason) when a video is missing."""
    if candidate is None:
        return Metric.unavailable("psnr_db", "dB", "maximize", "the workload produced no video")
    if reference is None:
        return Metric.unavailable("psnr_db", "dB", "maximize", "the reference output has no video")
    return Metric("psnr_db", psnr_db(candidate, reference), "dB", "maximize")
