"""Procedural talking-head data: training clips, the held-out split and ground truth.

A *pair* is a portrait seed (face shape, colours, feature placement: see
:class:`~.inputs.PortraitStyle`) and a speech-like audio clip. Its ground-truth
video, at any resolution and frame rate, is the portrait redrawn at every frame
with the mouth opened by the audio envelope of that frame
(:func:`ground_truth_video`). Everything is a pure function of seeds.

Splits
------
Training uses portrait and audio seeds ``>= TRAIN_SEED_MIN`` only; every seed
below it is held out. The workload's portraits and audio come from
``context.seed`` (small numbers), so a study always animates unseen faces with
unseen speech; :data:`HELD_OUT_SEEDS` is the evaluation set of the model card.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tuner.workloads.avatar_dit.inputs import (
    AUDIO_RATE_HZ,
    PortraitStyle,
    frame_audio_features,
    render_portraits,
    synth_speech_audio,
    windowed_audio_features,
)
from tuner.workloads.avatar_dit.model import PixelShuffleCodec

TRAIN_SEED_MIN = 1_000_000
"""Smallest portrait / audio seed used in training; smaller seeds are held out."""

HELD_OUT_SEEDS: tuple[int, ...] = tuple(range(100, 108))
"""Seeds (portrait and audio alike) of the model card's held-out evaluation set."""

TRAINING_FPS: tuple[float, ...] = (10.0, 12.0, 15.0, 20.0, 25.0)
"""Frame rates training clips are cut at (one per clip, drawn uniformly)."""

TRAINING_AUDIO_SECONDS = 3.0
"""Length of each audio clip of the training pool, seconds."""

MAX_TRAINING_FRAMES = 32
"""Longest training clip, frames."""


def ground_truth_video(portrait_seed: int, audio: np.ndarray, fps: float, frames: int, size: int) -> np.ndarray:
    """The true talking-head video of (portrait, audio): uint8 (frames, size, size, 3).

    Frame ``i`` is the portrait with the mouth opening of audio frame ``i`` at
    ``fps`` (see :func:`~.inputs.frame_audio_features`); past the end of the
    audio the mouth is at rest.
    """
    opening = frame_audio_features(audio, AUDIO_RATE_HZ, fps, frames).mouth_open
    return (render_portraits(size, portrait_seed, opening) * 255.0).round().astype(np.uint8)


def mouth_box(portrait_seed: int, margin: float = 0.02) -> list[float]:
    """``[x0, y0, x1, y1]`` fractions of the frame covering the lips at full opening.

    ``margin``: extra fraction of the frame on every side. This is the box the
    lip-sync proxy and the mouth-region fidelity metrics take as ``mouth_box``.
    """
    style = PortraitStyle.from_seed(portrait_seed)
    half_width = style.mouth_half_width / 2.0 + margin
    half_height = style.mouth_max_half_height / 2.0 + margin
    center_y = (style.mouth_y + 1.0) / 2.0
    return [
        max(0.0, 0.5 - half_width),
        max(0.0, center_y - half_height),
        min(1.0, 0.5 + half_width),
        min(1.0, center_y + half_height),
    ]


@dataclass(frozen=True)
class TrainingClip:
    """One training batch (fp32 CPU tensors; B clips, T frames, h = resolution / 2).

    ``reference`` (B, C, 1, h, w) the portrait at rest; ``motion`` (B, C, M, h, w)
    the frames before the clip (copies of the reference for a first clip);
    ``frames`` (B, C, T, h, w) the ground-truth latents to generate; ``audio``
    (B, T, window, features) the audio windows of those frames; ``mouth``
    (B, 1, 1, h, w) 1.0 on latent pixels inside the portrait's :func:`mouth_box`, else 0.0.
    """

    reference: torch.Tensor
    motion: torch.Tensor
    frames: torch.Tensor
    audio: torch.Tensor
    mouth: torch.Tensor


def mouth_mask(portrait_seed: int, side: int) -> torch.Tensor:
    """(side, side) float32 mask of the pixels whose centres lie in the portrait's mouth box."""
    x0, y0, x1, y1 = mouth_box(portrait_seed)
    centres = (torch.arange(side, dtype=torch.float32) + 0.5) / side
    rows = ((centres >= y0) & (centres <= y1)).float()
    cols = ((centres >= x0) & (centres <= x1)).float()
    return rows[:, None] * cols[None, :]


class TrainingData:
    """Draws training clips from a pool of speech clips and endless fresh portraits.

    Deterministic for ``seed``: the same sequence of :meth:`batch` calls returns
    the same tensors. ``audio_pool`` audio clips of
    :data:`TRAINING_AUDIO_SECONDS` are synthesised up front (seeds from
    ``TRAIN_SEED_MIN``); portraits use fresh seeds ``>= TRAIN_SEED_MIN``.
    ``first_clip_share`` of the clips start at frame 0 with the reference as
    motion context, like the first clip of a video.
    """

    def __init__(
        self, seed: int, audio_window: int, motion_frames: int, audio_pool: int = 192, first_clip_share: float = 0.3
    ) -> None:
        self._rng = np.random.default_rng(seed)
        self._window = audio_window
        self._motion = motion_frames
        self._first_clip_share = first_clip_share
        audio_seeds = TRAIN_SEED_MIN + self._rng.choice(10_000_000, size=audio_pool, replace=False)
        self._audio = [synth_speech_audio(TRAINING_AUDIO_SECONDS, int(s)) for s in audio_seeds]
        self._described: dict[tuple[int, float], tuple[np.ndarray, np.ndarray]] = {}
        self._codec = PixelShuffleCodec()

    def _audio_frames(self, index: int, fps: float, frames: int) -> tuple[np.ndarray, np.ndarray]:
        """(windows (frames, window, F), mouth openings (frames,)) of pool clip ``index`` at ``fps``
        (``frames`` must be the same for every call with one ``fps``)."""
        key = (index, fps)
        if key not in self._described:
            reach = self._window // 2
            described = frame_audio_features(self._audio[index], AUDIO_RATE_HZ, fps, frames + reach)
            windows = windowed_audio_features(described.features, frames, self._window)
            self._described[key] = (windows, described.mouth_open[:frames])
        return self._described[key]

    def batch(self, resolution: int, frames: int, batch_size: int) -> TrainingClip:
        """``batch_size`` clips of ``frames`` (<= :data:`MAX_TRAINING_FRAMES`) frames at
        ``resolution`` pixels, each with a fresh face."""
        if not 1 <= frames <= MAX_TRAINING_FRAMES:
            raise ValueError(f"training clips have 1..{MAX_TRAINING_FRAMES} frames, got {frames}")
        fps = float(self._rng.choice(TRAINING_FPS))
        span = int(TRAINING_AUDIO_SECONDS * fps) + 4  # a few silent frames past the end, as in videos
        references, motions, targets, audios, mouths = [], [], [], [], []
        for _ in range(batch_size):
            index = int(self._rng.integers(len(self._audio)))
            windows, opening = self._audio_frames(index, fps, span + MAX_TRAINING_FRAMES)
            first = self._rng.random() < self._first_clip_share
            start = 0 if first else int(self._rng.integers(1, max(2, span - frames + 1)))
            before = np.maximum(np.arange(start - self._motion, start), 0)
            openings = np.concatenate([[0.0], opening[before], opening[start : start + frames]])
            portrait_seed = int(self._rng.integers(TRAIN_SEED_MIN, 2**31))
            images = render_portraits(resolution, portrait_seed, openings)
            latents = self._codec.encode(torch.from_numpy(images).permute(0, 3, 1, 2) * 2.0 - 1.0)
            latents = latents.permute(1, 0, 2, 3)  # (C, 1 + M + T, h, w)
            references.append(latents[:, :1])
            motions.append(
                latents[:, :1].expand(-1, self._motion, -1, -1) if first else latents[:, 1 : 1 + self._motion]
            )
            targets.append(latents[:, 1 + self._motion :])
            audios.append(torch.from_numpy(windows[start : start + frames]))
            mouths.append(mouth_mask(portrait_seed, latents.shape[-1])[None, None])
        return TrainingClip(
            torch.stack(references),
            torch.stack(motions),
            torch.stack(targets),
            torch.stack(audios),
            torch.stack(mouths),
        )
