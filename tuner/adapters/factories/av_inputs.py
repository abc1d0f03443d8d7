"""Qwen2.5-Omni thinker inputs built directly, as its processor builds them, with no processor download.

One request is a video (frames), an audio clip and a question; :func:`build_inputs` turns them
into the keyword arguments of ``Qwen2_5OmniThinkerForConditionalGeneration.generate``:

* **frames**: sampled as ``Qwen2VLVideoProcessor.sample_frames`` does with ``fps`` (``n =
  seconds x fps``, at least 4, at most ``max_frames`` and the frames there are, floored to a
  multiple of the temporal patch 2, evenly spread), resized to :func:`smart_resize`'s size
  (multiples of 28 px, ``min_pixels <= h x w <= max_pixels``, aspect kept; torchvision's
  uint8 bicubic-antialias kernel; a synthetic clip is drawn at that size), scaled to [0, 1] and normalised with the CLIP
  mean / std, then patchified in the processor's layout: ``pixel_values_videos`` of shape
  ``(t x h x w, 3 x 2 x 14 x 14)`` with ``video_grid_thw = [[t, h, w]]`` (t = frames / 2, h, w =
  pixels / 14) and ``video_second_per_grid = 2 / fps``. Video tokens: ``t x h x w / 4``.
* **audio**: mono float32 at 16 kHz, cut to ``audio_seconds``; log-mel features by the
  ``WhisperFeatureExtractor`` class constructed with the checkpoint's ``preprocessor_config``
  values (128 bins, n_fft 400, hop 160, padded to ``chunk_length`` 300 s): ``input_features``
  ``(1, 128, 30000)`` and ``feature_attention_mask`` ``(1, 30000)`` (1 on the clip's L frames,
  L = samples / 160). Audio tokens: ``((L - 1) // 2 + 1 - 2) // 2 + 1`` (the processor's and the
  audio tower's formula). ``audio_seconds = 0`` sends no audio at all.
* **input_ids**: the chat template as the processor expands it, with ``use_audio_in_video``
  False (video then audio, each between its start / end tokens)::

      <|im_start|>system\\n S <|im_end|>\\n <|im_start|>user\\n <|vision_bos|> <|VIDEO|> x V <|vision_eos|>
      <|audio_bos|> <|AUDIO|> x A <|audio_eos|> Q <|im_end|>\\n <|im_start|>assistant\\n

  S and Q are the system prompt and question ids (the tokenizer's when there is one, else
  seeded ordinary ids).

A batch of B repeats the request B times (every tensor concatenated along its request axis).
Settings the model or processor would refuse raise :class:`InvalidSetting`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.adapters.factories.omni_presets import TOKENS
from tuner.workloads.base import InvalidSetting

PATCH_SIZE = 14
TEMPORAL_PATCH_SIZE = 2
MERGE_SIZE = 2
MIN_FRAMES = 4  # Qwen2VLVideoProcessor.min_frames
AUDIO_RATE = 16000  # Hz, the feature extractor's only rate
HOP_LENGTH = 160  # samples per mel frame (10 ms)
AUDIO_CHUNK_SECONDS = 300  # Qwen2.5-Omni preprocessor_config chunk_length: the longest clip it keeps
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
DEFAULT_MIN_PIXELS = 128 * 28 * 28  # the Omni processor's video size.shortest_edge
DEFAULT_MAX_PIXELS = 768 * 28 * 28  # and size.longest_edge
MAX_POSITIONS = 32768  # text_config.max_position_embeddings


@dataclass(frozen=True)
class MediaSettings:
    """The knobs that shape one request's inputs (units: frames per second, pixels, seconds)."""

    video_fps: float = 2.0
    max_frames: int = 768
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS
    audio_seconds: float = 10.0
    batch_size: int = 1

    def check(self) -> None:
        """InvalidSetting for values the processor or the model refuses."""
        if not self.video_fps > 0:
            raise InvalidSetting(f"video_fps must be > 0, not {self.video_fps}")
        if self.max_frames < TEMPORAL_PATCH_SIZE:
            raise InvalidSetting(f"max_frames must be >= {TEMPORAL_PATCH_SIZE} (one temporal patch)")
        if not 0 < self.min_pixels <= self.max_pixels:
            raise InvalidSetting(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")
        if not 0 <= self.audio_seconds <= AUDIO_CHUNK_SECONDS:
            raise InvalidSetting(
                f"audio_seconds must be in [0, {AUDIO_CHUNK_SECONDS}] (the feature extractor keeps "
                f"at most {AUDIO_CHUNK_SECONDS} s), not {self.audio_seconds}"
            )
        if self.audio_seconds > 0 and audio_token_count(int(self.audio_seconds * AUDIO_RATE) // HOP_LENGTH) < 1:
            raise InvalidSetting(f"audio_seconds {self.audio_seconds} gives no audio token (use 0 for no audio)")
        if self.batch_size < 1:
            raise InvalidSetting(f"batch_size must be >= 1, not {self.batch_size}")


@dataclass
class ThinkerInputs:
    """``generate`` keyword arguments for a batch, and what they hold."""

    tensors: dict[str, Any]
    video_tokens: int  # per request
    audio_tokens: int  # per request
    prompt_tokens: int  # per request, placeholders included
    frames: int  # sampled frames per request
    frame_size: tuple[int, int]  # resized (height, width) in pixels


def smart_resize(
    height: int, width: int, min_pixels: int, max_pixels: int, factor: int = PATCH_SIZE * MERGE_SIZE
) -> tuple[int, int]:
    """The processor's resized (height, width): multiples of ``factor``, pixels within the bounds, aspect kept."""
    if max(height, width) / min(height, width) > 200:
        raise InvalidSetting(f"aspect ratio must be below 200, got {height}x{width}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def sample_frame_indices(total_frames: int, source_fps: float, fps: float, max_frames: int) -> np.ndarray:
    """Indices of the frames ``Qwen2VLVideoProcessor.sample_frames`` keeps when sampling at ``fps``
    (its float32 ``arange`` included, so the same frames are picked)."""
    import torch

    cap = math.floor(min(max_frames, total_frames) / TEMPORAL_PATCH_SIZE) * TEMPORAL_PATCH_SIZE
    wanted = min(max(total_frames / source_fps * fps, MIN_FRAMES), cap, total_frames)
    count = math.floor(wanted / TEMPORAL_PATCH_SIZE) * TEMPORAL_PATCH_SIZE
    if count < TEMPORAL_PATCH_SIZE:
        raise InvalidSetting(
            f"a video of {total_frames} frames cannot be sampled into one temporal patch ({TEMPORAL_PATCH_SIZE} frames)"
        )
    return torch.arange(0, total_frames, total_frames / count).int().numpy().astype(np.int64)


def synthetic_frames(indices: np.ndarray, source_fps: float, height: int, width: int, seed: int) -> np.ndarray:
    """Frames ``indices`` of a deterministic clip at ``height`` x ``width``: uint8 (T, H, W, 3).

    A pattern drifting over time (two gradients and a moving disc) plus seeded noise, evaluated
    on the target grid directly, so no source-size array is ever built."""
    y, x = np.meshgrid(np.linspace(0.0, 1.0, height), np.linspace(0.0, 1.0, width), indexing="ij")
    frames = np.empty((len(indices), height, width, 3), dtype=np.uint8)
    for slot, index in enumerate(indices):
        t = float(index) / source_fps
        cx, cy = 0.5 + 0.3 * math.cos(t), 0.5 + 0.3 * math.sin(t)
        disc = ((x - cx) ** 2 + (y - cy) ** 2 < 0.02).astype(np.float64)
        noise = np.random.default_rng([seed, int(index)]).normal(0.0, 12.0, (height, width, 3))
        base = np.stack([255 * x, 255 * y, np.full_like(x, 128 + 100 * math.sin(t))], axis=-1)
        frames[slot] = np.clip(base + 90.0 * disc[..., None] + noise, 0, 255).astype(np.uint8)
    return frames


def synthetic_audio(seconds: float, seed: int) -> np.ndarray:
    """A deterministic 16 kHz clip: a slow chirp, a beep every second and seeded noise, float32 in [-1, 1]."""
    t = np.arange(int(round(seconds * AUDIO_RATE))) / AUDIO_RATE
    chirp = 0.3 * np.sin(2 * np.pi * (220.0 + 40.0 * t) * t)
    beeps = 0.2 * np.sin(2 * np.pi * 880.0 * t) * ((t % 1.0) < 0.1)
    noise = np.random.default_rng(seed).normal(0.0, 0.02, t.shape)
    return np.clip(chirp + beeps + noise, -1.0, 1.0).astype(np.float32)


def resample_audio(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Mono samples at ``rate`` Hz resampled to ``target`` Hz by linear interpolation (float32)."""
    if rate == target:
        return audio
    positions = np.arange(int(len(audio) * target / rate)) * rate / target
    return np.interp(positions, np.arange(len(audio)), audio).astype(np.float32)


def resize_frames(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 (T, H, W, 3) -> (T, height, width, 3): bicubic with antialias on the uint8 tensor, the kernel
    torchvision's ``resize`` calls for the processor (same bytes)."""
    import torch

    if frames.shape[1:3] == (height, width):
        return frames
    tensor = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).contiguous()
    resized = torch.nn.functional.interpolate(
        tensor, size=(height, width), mode="bicubic", antialias=True, align_corners=False
    )
    return resized.permute(0, 2, 3, 1).numpy()


def patchify(frames: np.ndarray) -> tuple[Any, list[int]]:
    """uint8 (T, H, W, 3) frames (H, W multiples of 28) -> (``pixel_values_videos``, ``[t, h, w]``).

    Rescale 1/255, CLIP normalisation, last frame repeated to a multiple of 2 frames, then the
    processor's (t, h/2, w/2, 2, 2, C, 2, 14, 14) patch order, flattened to rows of 1176 floats."""
    import torch

    video = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
    mean, std = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), torch.tensor(CLIP_STD).view(1, 3, 1, 1)
    video = (video - mean) / std
    if pad := -video.shape[0] % TEMPORAL_PATCH_SIZE:
        video = torch.cat([video, video[-1:].expand(pad, -1, -1, -1)])
    count, channels, height, width = video.shape
    grid_t, grid_h, grid_w = count // TEMPORAL_PATCH_SIZE, height // PATCH_SIZE, width // PATCH_SIZE
    patches = video.view(
        grid_t,
        TEMPORAL_PATCH_SIZE,
        channels,
        grid_h // MERGE_SIZE,
        MERGE_SIZE,
        PATCH_SIZE,
        grid_w // MERGE_SIZE,
        MERGE_SIZE,
        PATCH_SIZE,
    )
    patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(grid_t * grid_h * grid_w, channels * TEMPORAL_PATCH_SIZE * PATCH_SIZE * PATCH_SIZE)
    return flat.contiguous(), [grid_t, grid_h, grid_w]


def video_token_count(grid_thw: Sequence[int]) -> int:
    """Placeholder tokens of one video: ``t x h x w / merge^2``."""
    return int(grid_thw[0] * grid_thw[1] * grid_thw[2]) // (MERGE_SIZE * MERGE_SIZE)


def audio_token_count(mel_frames: int) -> int:
    """Placeholder tokens of ``mel_frames`` log-mel frames (conv stride 2, then pooling by 2)."""
    return ((mel_frames - 1) // 2 + 1 - 2) // 2 + 1


def log_mel(audio: np.ndarray) -> tuple[Any, Any]:
    """(``input_features`` (1, 128, 30000) float32, ``feature_attention_mask`` (1, 30000) int32)."""
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(
        feature_size=128,
        sampling_rate=AUDIO_RATE,
        hop_length=HOP_LENGTH,
        chunk_length=AUDIO_CHUNK_SECONDS,
        n_fft=400,
        padding_value=0.0,
        return_attention_mask=True,
    )
    features = extractor(
        audio, sampling_rate=AUDIO_RATE, padding="max_length", return_attention_mask=True, return_tensors="pt"
    )
    return features["input_features"], features["attention_mask"]


def prompt_ids(video_tokens: int, audio_tokens: int, system: Sequence[int], question: Sequence[int]) -> list[int]:
    """The expanded chat prompt (see module docs); no audio block when ``audio_tokens`` is 0."""
    t = TOKENS
    ids = [
        t.im_start,
        t.system,
        t.newline,
        *system,
        t.im_end,
        t.newline,
        t.im_start,
        t.user,
        t.newline,
        t.vision_start,
        *[t.video] * video_tokens,
        t.vision_end,
    ]
    if audio_tokens:
        ids += [t.audio_start, *[t.audio] * audio_tokens, t.audio_end]
    return ids + [*question, t.im_end, t.newline, t.im_start, t.assistant, t.newline]


def seeded_text_ids(count: int, seed: int) -> list[int]:
    """``count`` ordinary (non-special) token ids drawn with ``seed``: a question without a tokenizer."""
    return [int(i) for i in np.random.default_rng([seed, 17]).integers(0, TOKENS.plain_text_ids, count)]


@dataclass(frozen=True)
class VideoSource:
    """A source clip: ``total_frames`` at ``fps`` of ``height`` x ``width`` px; decoded frames (``array``,
    uint8 (T, H, W, 3)) or, when None, the :func:`synthetic_frames` clip of ``seed``."""

    total_frames: int
    fps: float
    height: int
    width: int
    array: np.ndarray | None = None
    seed: int = 0

    def frames(self, indices: np.ndarray, height: int, width: int) -> np.ndarray:
        """Frames ``indices`` resized to ``height`` x ``width`` (a synthetic clip is drawn at that size)."""
        if self.array is None:
            return synthetic_frames(indices, self.fps, height, width, self.seed)
        return resize_frames(self.array[indices], height, width)


def build_inputs(
    settings: MediaSettings,
    video: VideoSource,
    audio: np.ndarray | None,
    system: Sequence[int],
    question: Sequence[int],
) -> ThinkerInputs:
    """The thinker's ``generate`` inputs for ``settings.batch_size`` copies of one request
    (``audio``: 16 kHz samples, or None for none)."""
    import torch

    settings.check()
    indices = sample_frame_indices(video.total_frames, video.fps, settings.video_fps, settings.max_frames)
    height, width = smart_resize(video.height, video.width, settings.min_pixels, settings.max_pixels)
    pixels, grid = patchify(video.frames(indices, height, width))
    video_tokens = video_token_count(grid)
    batch = settings.batch_size
    tensors: dict[str, Any] = {
        "pixel_values_videos": torch.cat([pixels] * batch),
        "video_grid_thw": torch.tensor([grid] * batch, dtype=torch.long),
        "video_second_per_grid": torch.tensor([TEMPORAL_PATCH_SIZE / settings.video_fps] * batch),
    }
    audio_tokens = 0
    if settings.audio_seconds > 0 and audio is not None and len(audio):
        features, mask = log_mel(audio[: int(settings.audio_seconds * AUDIO_RATE)])
        audio_tokens = audio_token_count(int(mask.sum()))
        if audio_tokens < 1:
            raise InvalidSetting(f"{len(audio) / AUDIO_RATE:.3f} s of audio give no audio token")
        tensors["input_features"] = features.repeat(batch, 1, 1)
        tensors["feature_attention_mask"] = mask.repeat(batch, 1)
    ids = prompt_ids(video_tokens, audio_tokens, system, question)
    if len(ids) >= MAX_POSITIONS:
        raise InvalidSetting(f"the prompt has {len(ids)} tokens; the thinker holds {MAX_POSITIONS} positions")
    tensors["input_ids"] = torch.tensor([ids] * batch, dtype=torch.long)
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ThinkerInputs(
        tensors=tensors,
        video_tokens=video_tokens,
        audio_tokens=audio_tokens,
        prompt_tokens=len(ids),
        frames=len(indices),
        frame_size=(height, width),
    )
