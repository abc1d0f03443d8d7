"""The networks of the avatar workload: an audio-driven video DiT (trained, see
:mod:`.train`) and a fixed pixel-shuffle latent codec.

The DiT attends jointly over every token of a clip, so its attention cost grows
with the square of ``(frames of the clip + context frames) x patches per frame``.

Shapes (B batch, C latent channels, T frames, h x w latent pixels, p patch):

* latents: (B, C, T, h, w), C = :data:`LATENT_CHANNELS`, h = w = resolution /
  :data:`VAE_DOWNSAMPLE` (the codec folds each 2 x 2 block of RGB pixels into
  the 12 channels of one latent pixel; it has no weights and loses nothing);
* one clip's token sequence: ``[reference frame, motion frames..., generated
  frames...]``, each frame ``(h/p) * (w/p)`` tokens of ``dim`` features; every
  token also sees the reference latent at its own position (an image-to-video
  channel concatenation, as in Wan I2V), so copying the portrait is easy;
* token positions are fractions of the frame (:func:`position_embedding`), so
  one image location has one embedding at every resolution;
* audio: (B, T, window, features) per generated frame (see ``inputs``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

VAE_DOWNSAMPLE = 2
"""Pixels per latent pixel along each side (the codec's pixel (un)shuffle factor)."""

LATENT_CHANNELS = 3 * VAE_DOWNSAMPLE**2
"""Channels of a latent pixel: the RGB values of its 2 x 2 pixel block."""

TOKEN_KINDS = ("reference", "motion", "generated")
"""Kinds of frames in a clip's token sequence, in sequence order."""

POSITION_GRID = 16.0
"""Spatial positions are embedded as fractions of the frame times this many units."""


@dataclass(frozen=True)
class AvatarDiTConfig:
    """Architecture of the DiT. ``dim`` features per token (divisible by 4 and by
    ``heads``), ``depth`` blocks, ``patch`` latent pixels per token side,
    ``motion_frames`` latent frames carried from one clip to the next,
    ``audio_window`` audio frames (centred) each video frame listens to."""

    dim: int = 96
    depth: int = 2
    heads: int = 4
    patch: int = 2
    motion_frames: int = 2
    audio_window: int = 3
    audio_features: int = 6
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"model {field.name} must be a positive integer, got {value!r}")
        if self.dim % 4 or self.dim % self.heads:
            raise ValueError(f"model dim={self.dim} must be divisible by 4 and by heads={self.heads}")

    def to_dict(self) -> dict[str, int]:
        """Plain dict (what a checkpoint stores)."""
        return asdict(self)

    @staticmethod
    def from_dict(values: Mapping[str, Any]) -> AvatarDiTConfig:
        """Inverse of :meth:`to_dict`; raise ValueError for unknown keys or bad values."""
        known = {field.name for field in fields(AvatarDiTConfig)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown model config keys {unknown}; known: {sorted(known)}")
        return AvatarDiTConfig(**dict(values))

    @property
    def pixels_per_token(self) -> int:
        """Image pixels along one side of a token: patch x VAE downsampling."""
        return self.patch * VAE_DOWNSAMPLE

    @property
    def context_frames(self) -> int:
        """Frames in front of the generated ones: one reference + the motion frames."""
        return 1 + self.motion_frames

    def tokens_per_frame(self, resolution: int) -> int:
        """Tokens of one frame generated at ``resolution`` x ``resolution`` pixels."""
        return (resolution // self.pixels_per_token) ** 2

    def tokens_per_clip(self, resolution: int, infer_frames: int) -> int:
        """Length of the sequence the self-attention runs over for one clip."""
        return (self.context_frames + infer_frames) * self.tokens_per_frame(resolution)

    def forward_flops(self, resolution: int, infer_frames: int, batch: int) -> float:
        """Multiply-add FLOPs (2 per MAC) of one DiT forward: the matmuls of the
        patch and reference embeddings, attention (projections + scores + values),
        audio cross-attention, MLP and output head. Elementwise work and the
        per-clip conditioning MLPs (time, grid size, audio, modulation) are left out."""
        per_frame = self.tokens_per_frame(resolution)
        tokens = self.tokens_per_clip(resolution, infer_frames)
        generated = infer_frames * per_frame
        patch_features = LATENT_CHANNELS * self.patch**2
        d = self.dim
        per_block = (
            4 * tokens * d * d
            + 2 * tokens * tokens * d  # self-attention
            + 2 * generated * d * d
            + 2 * generated * self.audio_window * d  # cross: q, out, scores+values
            + 2 * infer_frames * self.audio_window * d * d  # cross: k, v of the audio tokens
            + 2 * tokens * d * d * self.mlp_ratio
        )  # MLP
        embed = (tokens + per_frame) * patch_features * d  # patches + reference
        macs = embed + self.depth * per_block + generated * d * patch_features
        return 2.0 * batch * macs


def patchify(latents: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, T, h, w) -> (B, T * (h/p) * (w/p), C * p * p), frame-major order."""
    b, c, t, h, w = latents.shape
    x = latents.reshape(b, c, t, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 3, 5, 1, 4, 6).reshape(b, t * (h // patch) * (w // patch), c * patch * patch)


def unpatchify(tokens: torch.Tensor, frames: int, height: int, width: int, patch: int) -> torch.Tensor:
    """Inverse of :func:`patchify`: (B, T*(h/p)*(w/p), C*p*p) -> (B, C, T, h, w)."""
    b = tokens.shape[0]
    c = tokens.shape[2] // (patch * patch)
    x = tokens.reshape(b, frames, height // patch, width // patch, c, patch, patch)
    return x.permute(0, 4, 1, 2, 5, 3, 6).reshape(b, c, frames, height, width)


def sincos(positions: torch.Tensor, dim: int, max_period: float = 10_000.0) -> torch.Tensor:
    """Sinusoidal embedding (N,) -> (N, dim), periods from 2 pi to ``max_period`` positions."""
    half = dim // 2
    steps = torch.arange(half, dtype=torch.float32, device=positions.device)
    frequencies = torch.exp(-math.log(max_period) * steps / half)
    angles = positions.float()[:, None] * frequencies[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


def position_embedding(frames: int, rows: int, cols: int, dim: int) -> torch.Tensor:
    """Fixed (frames * rows * cols, dim) embedding: temporal sincos of the frame
    index over ``dim`` plus spatial sincos (rows on the first half, columns on
    the second) of the token centre as a fraction of the frame times
    :data:`POSITION_GRID`, so a location keeps its embedding at every resolution."""
    frame_index = torch.arange(frames).repeat_interleave(rows * cols)
    row_position = ((torch.arange(rows) + 0.5) * POSITION_GRID / rows).repeat_interleave(cols).repeat(frames)
    col_position = ((torch.arange(cols) + 0.5) * POSITION_GRID / cols).repeat(frames * rows)
    spatial = torch.cat(
        [sincos(row_position, dim // 2, 4 * POSITION_GRID), sincos(col_position, dim // 2, 4 * POSITION_GRID)], dim=1
    )
    return sincos(frame_index, dim, 256.0) + spatial


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """adaLN: ``x * (1 + scale) + shift`` with (B, 1, D) shift/scale."""
    return x * (1.0 + scale) + shift


class TimestepEmbedder(nn.Module):
    """Flow time t in [0, 1] (B,) -> conditioning vector (B, dim): sincos of 1000 t, then an MLP."""

    def __init__(self, dim: int, frequency_dim: int = 128) -> None:
        super().__init__()
        self.frequency_dim = frequency_dim
        self.mlp = nn.Sequential(nn.Linear(frequency_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(sincos(t * 1000.0, self.frequency_dim))


class SelfAttention(nn.Module):
    """Multi-head attention of every token to every token of the clip."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v)
        return self.out(attended.transpose(1, 2).reshape(b, n, d))


class AudioCrossAttention(nn.Module):
    """Each generated frame's tokens attend to that frame's window of audio tokens."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        """x (B, T*P, D) generated tokens; audio (B, T, W, D) -> (B, T*P, D)."""
        b, t, w, d = audio.shape
        per_frame = x.shape[1] // t
        hd = d // self.heads
        q = self.q(x).reshape(b * t, per_frame, self.heads, hd).transpose(1, 2)
        k, v = self.kv(audio).reshape(b * t, w, 2, self.heads, hd).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v)
        return self.out(attended.transpose(1, 2).reshape(b, t * per_frame, d))


class DiTBlock(nn.Module):
    """adaLN-modulated self-attention, audio cross-attention (generated tokens only), MLP."""

    def __init__(self, config: AvatarDiTConfig) -> None:
        super().__init__()
        d = config.dim
        self.norms = nn.ModuleList(nn.LayerNorm(d, elementwise_affine=False, eps=1e-6) for _ in range(3))
        self.self_attention = SelfAttention(d, config.heads)
        self.audio_attention = AudioCrossAttention(d, config.heads)
        self.mlp = nn.Sequential(
            nn.Linear(d, config.mlp_ratio * d), nn.GELU(approximate="tanh"), nn.Linear(config.mlp_ratio * d, d)
        )
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 9 * d))

    def forward(
        self, x: torch.Tensor, condition: torch.Tensor, audio: torch.Tensor, context_tokens: int
    ) -> torch.Tensor:
        (shift_a, scale_a, gate_a, shift_c, scale_c, gate_c, shift_m, scale_m, gate_m) = (
            self.modulation(condition).unsqueeze(1).chunk(9, dim=-1)
        )
        x = x + gate_a * self.self_attention(modulate(self.norms[0](x), shift_a, scale_a))
        context, generated = x[:, :context_tokens], x[:, context_tokens:]
        heard = self.audio_attention(modulate(self.norms[1](generated), shift_c, scale_c), audio)
        x = torch.cat([context, generated + gate_c * heard], dim=1)
        return x + gate_m * self.mlp(modulate(self.norms[2](x), shift_m, scale_m))


class AvatarDiT(nn.Module):
    """Velocity predictor of the flow-matching sampler.

    ``forward(noisy, context, t, audio_features)``:
    noisy (B, C, T, h, w) latents of the frames being generated; context
    (B, C, 1 + motion_frames, h, w) reference latent then motion latents;
    t (B,) flow time in [0, 1] (1 = pure noise); audio_features (B, T,
    audio_window, features). Returns the predicted velocity ``dx/dt`` =
    noise - data, (B, C, T, h, w) (see :mod:`.sampler` for the convention).
    The adaLN modulations and the output head start at zero (DiT's adaLN-Zero).
    """

    def __init__(self, config: AvatarDiTConfig) -> None:
        super().__init__()
        self.config = config
        d = config.dim
        patch_features = LATENT_CHANNELS * config.patch**2
        self.patch_embed = nn.Linear(patch_features, d)
        self.reference_embed = nn.Linear(patch_features, d, bias=False)
        self.kind_embed = nn.Parameter(torch.randn(len(TOKEN_KINDS), d) * 0.02)
        self.time_embed = TimestepEmbedder(d)
        self.grid_embed = nn.Sequential(nn.Linear(32, d), nn.SiLU(), nn.Linear(d, d))
        self.audio_embed = nn.Sequential(nn.Linear(config.audio_features, d), nn.SiLU(), nn.Linear(d, d))
        self.audio_window_embed = nn.Parameter(torch.randn(config.audio_window, d) * 0.02)
        self.blocks = nn.ModuleList(DiTBlock(config) for _ in range(config.depth))
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.head = nn.Linear(d, patch_features)
        self._positions: dict[tuple[int, int, int, str], torch.Tensor] = {}
        for zeroed in [block.modulation[1] for block in self.blocks] + [self.final_modulation[1], self.head]:
            nn.init.zeros_(zeroed.weight)
            nn.init.zeros_(zeroed.bias)

    def _sequence_embedding(self, frames: int, rows: int, cols: int, device: torch.device) -> torch.Tensor:
        """Fixed position embedding (frames*rows*cols, D), cached per shape."""
        key = (frames, rows, cols, str(device))
        if key not in self._positions:
            self._positions[key] = position_embedding(frames, rows, cols, self.config.dim).to(device)
        return self._positions[key]

    def forward(
        self, noisy: torch.Tensor, context: torch.Tensor, t: torch.Tensor, audio_features: torch.Tensor
    ) -> torch.Tensor:
        p = self.config.patch
        b, frames, height, width = noisy.shape[0], noisy.shape[2], noisy.shape[3], noisy.shape[4]
        rows, cols = height // p, width // p
        sequence = torch.cat([context, noisy], dim=2)
        total = sequence.shape[2]
        kinds = torch.tensor([0] + [1] * (context.shape[2] - 1) + [2] * frames, device=noisy.device)
        per_frame = self.reference_embed(patchify(context[:, :, :1], p))  # (B, rows*cols, D)
        tokens = self.patch_embed(patchify(sequence, p)).reshape(b, total, rows * cols, -1)
        tokens = tokens + per_frame.unsqueeze(1) + self.kind_embed[kinds][None, :, None, :]
        tokens = tokens.reshape(b, total * rows * cols, -1) + self._sequence_embedding(total, rows, cols, noisy.device)
        grid = torch.full((b,), float(rows), device=noisy.device)
        condition = self.time_embed(t) + self.grid_embed(sincos(grid, 32, 256.0))
        audio = self.audio_embed(audio_features) + self.audio_window_embed
        context_tokens = context.shape[2] * rows * cols
        for block in self.blocks:
            tokens = block(tokens, condition, audio, context_tokens)
        shift, scale = self.final_modulation(condition).unsqueeze(1).chunk(2, dim=-1)
        generated = modulate(self.final_norm(tokens[:, context_tokens:]), shift, scale)
        return unpatchify(self.head(generated), frames, height, width, p)


class PixelShuffleCodec(nn.Module):
    """The fixed latent codec (no weights, lossless): a 2 x 2 pixel (un)shuffle.

    ``encode``: RGB (N, 3, H, W) in [-1, 1] -> latents (N, 12, H/2, W/2).
    ``decode``: latents (N, 12, h, w) -> RGB (N, 3, 2h, 2w), clamped to [-1, 1].
    It stands where a video VAE stands in Live Avatar / Wan; its decode is cheap,
    so ``online_decode`` changes memory and ordering more than time.
    """

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        return F.pixel_unshuffle(images, VAE_DOWNSAMPLE)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return F.pixel_shuffle(latents, VAE_DOWNSAMPLE).clamp(-1.0, 1.0)
