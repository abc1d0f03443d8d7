"""The AVQA network: frame and audio encoders, a media encoder, a small text decoder.

Shapes and units
----------------
* Frames: uint8 ``(B, T, H, W, 3)`` with their times in seconds ``(T,)``
  (shared by the batch). Each frame becomes ``tokens_per_frame`` tokens: a
  strided conv stack over RGB plus two coordinate channels, average-pooled to a
  ``2 x 2`` grid.
* Audio: float32 ``(B, S)`` at ``rate_hz``. ``torch.stft`` with a
  ``audio_window_s`` Hann window and an ``audio_hop_s`` hop gives a power
  spectrogram, pooled into ``audio_bands`` log-spaced triangular bands from
  :data:`BAND_LOW_HZ` to :data:`BAND_HIGH_HZ` (bands above the Nyquist frequency
  of a low sample rate stay empty), then ``log`` and two stride-2 convs: one
  token per ``4 * audio_hop_s`` seconds.
* Media tokens: ``sink_tokens`` learned tokens, then the video tokens, then the
  audio tokens, each with a type embedding and a sinusoidal embedding of its
  time in seconds (video tokens also a grid-cell embedding), mixed by
  ``media_layers`` full-attention layers. Memory ``(B, M, dim)``.
* Text: token ids ``(N, L)`` with a key mask ``(N, L)`` (True = real token)
  and positions ``(N, L)``; each decoder layer does causal self-attention (with an
  optional :class:`KVCache`), cross-attention to the media memory of row
  ``media_index[n]``, and an MLP. Logits ``(N, L, vocab)``; the output head
  shares the input embedding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

BAND_LOW_HZ = 150.0
BAND_HIGH_HZ = 7800.0
SPECIAL_TOKENS = ("<pad>", "<bos>", "<sep>", "<eos>")
PAD, BOS, SEP, EOS = range(4)
CHARACTERS = " ?abcdefghijklmnopqrstuvwxyz"


class CharTokenizer:
    """Character-level tokenizer over :data:`CHARACTERS` plus the special tokens.

    A prompt is ``<bos> question <sep>``; an answer is its characters then
    ``<eos>``. Characters outside the vocabulary raise ``ValueError``.
    """

    def __init__(self, vocab: list[str] | None = None) -> None:
        self.vocab = list(vocab) if vocab is not None else [*SPECIAL_TOKENS, *CHARACTERS]
        if tuple(self.vocab[:4]) != SPECIAL_TOKENS:
            raise ValueError(f"vocab must start with {SPECIAL_TOKENS}")
        self._ids = {token: index for index, token in enumerate(self.vocab)}

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[char] for char in text.lower()]
        except KeyError as error:
            raise ValueError(f"character {error} is not in the AVQA vocabulary") from None

    def prompt(self, question: str) -> list[int]:
        return [BOS, *self.encode(question), SEP]

    def decode(self, ids: list[int]) -> str:
        """Characters of ``ids`` up to the first ``<eos>``; other special tokens dropped."""
        chars = []
        for token in ids:
            if token == EOS:
                break
            if token >= len(SPECIAL_TOKENS):
                chars.append(self.vocab[token])
        return "".join(chars)


@dataclass(frozen=True)
class AVQAConfig:
    """Architecture hyper-parameters (stored with the weights)."""

    vocab_size: int = len(SPECIAL_TOKENS) + len(CHARACTERS)
    dim: int = 64
    heads: int = 4
    decoder_layers: int = 3
    media_layers: int = 1
    sink_tokens: int = 2
    audio_bands: int = 32
    audio_hop_s: float = 0.02
    audio_window_s: float = 0.032
    max_text_len: int = 64
    time_frequencies: int = 12
    frame_grid: int = 2

    @property
    def tokens_per_frame(self) -> int:
        return self.frame_grid * self.frame_grid

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(values: Mapping[str, Any]) -> AVQAConfig:
        return AVQAConfig(**dict(values))


def time_features(seconds: torch.Tensor, frequencies: int) -> torch.Tensor:
    """Sinusoidal features ``(..., 2 * frequencies)`` of times in seconds (0.05-4 Hz)."""
    hz = torch.logspace(math.log10(0.05), math.log10(4.0), frequencies, device=seconds.device)
    angles = 2 * math.pi * seconds.float().unsqueeze(-1) * hz
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class FrameEncoder(nn.Module):
    """uint8 frames ``(N, H, W, 3)`` -> tokens ``(N, 4, dim)``."""

    def __init__(self, dim: int, grid: int = 2) -> None:
        super().__init__()
        self.grid = grid
        self.convs = nn.Sequential(
            nn.Conv2d(5, 16, 4, stride=2, padding=1),
            nn.GroupNorm(4, 16),
            nn.GELU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.GroupNorm(4, 32),
            nn.GELU(),
            nn.Conv2d(32, dim, 3, stride=2, padding=1),
            nn.GroupNorm(4, dim),
            nn.GELU(),
        )
        self.norm = nn.LayerNorm(dim)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        count, height, width, _ = frames.shape
        pixels = frames.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        ys = torch.linspace(-1, 1, height, device=frames.device).view(1, 1, height, 1).expand(count, 1, height, width)
        xs = torch.linspace(-1, 1, width, device=frames.device).view(1, 1, 1, width).expand(count, 1, height, width)
        features = self.convs(torch.cat([pixels, xs, ys], dim=1))
        grid = F.adaptive_avg_pool2d(features, self.grid)  # (N, dim, grid, grid)
        return self.norm(grid.flatten(2).transpose(1, 2))


class AudioEncoder(nn.Module):
    """float32 audio ``(B, S)`` at ``rate_hz`` -> tokens ``(B, A, dim)`` (see module docs)."""

    def __init__(self, config: AVQAConfig) -> None:
        super().__init__()
        self.config = config
        self.convs = nn.Sequential(
            nn.Conv1d(config.audio_bands, config.dim, 3, stride=2, padding=1),
            nn.GroupNorm(4, config.dim),
            nn.GELU(),
            nn.Conv1d(config.dim, config.dim, 3, stride=2, padding=1),
            nn.GroupNorm(4, config.dim),
            nn.GELU(),
        )
        self.norm = nn.LayerNorm(config.dim)
        self._banks: dict[tuple[int, str], torch.Tensor] = {}

    def stft_shape(self, rate_hz: int) -> tuple[int, int, int]:
        """``(n_fft, hop, window)`` in samples at ``rate_hz``."""
        window = int(round(self.config.audio_window_s * rate_hz))
        hop = int(round(self.config.audio_hop_s * rate_hz))
        return 1 << (window - 1).bit_length(), hop, window

    def token_count(self, samples: int, rate_hz: int) -> int:
        """Audio tokens for ``samples`` samples (0 for no audio)."""
        if samples == 0:
            return 0
        frames = samples // self.stft_shape(rate_hz)[1] + 1
        return math.ceil(math.ceil(frames / 2) / 2)

    def token_seconds(self, count: int, device: torch.device) -> torch.Tensor:
        """Time (seconds) of each of ``count`` audio tokens."""
        return (torch.arange(count, device=device) * 4 + 1.5) * self.config.audio_hop_s

    def band_energies(self, audio: torch.Tensor, rate_hz: int) -> torch.Tensor:
        """Log band energies ``(B, bands, frames)`` of ``audio``, computed in fp32."""
        n_fft, hop, window = self.stft_shape(rate_hz)
        spectrum = torch.stft(
            audio.float(),
            n_fft,
            hop_length=hop,
            win_length=window,
            window=torch.hann_window(window, device=audio.device),
            center=True,
            return_complex=True,
        )
        power = spectrum.real.square() + spectrum.imag.square()  # (B, n_fft/2+1, frames)
        bands = torch.matmul(self._bank(rate_hz, n_fft, audio.device), power)
        return (torch.log(bands + 1e-5) + 6.0) / 6.0

    def forward(self, audio: torch.Tensor, rate_hz: int) -> torch.Tensor:
        return self.norm(self.convs(self.band_energies(audio, rate_hz)).transpose(1, 2))

    def _bank(self, rate_hz: int, n_fft: int, device: torch.device) -> torch.Tensor:
        key = (rate_hz, str(device))
        if key not in self._banks:
            bins_hz = torch.arange(n_fft // 2 + 1, dtype=torch.float64) * rate_hz / n_fft
            edges = torch.logspace(
                math.log10(BAND_LOW_HZ), math.log10(BAND_HIGH_HZ), self.config.audio_bands + 2, dtype=torch.float64
            )
            low, centre, high = edges[:-2, None], edges[1:-1, None], edges[2:, None]
            rising = (bins_hz - low) / (centre - low)
            falling = (high - bins_hz) / (high - centre)
            bank = torch.clamp(torch.minimum(rising, falling), min=0.0)
            # normalise by the band's full width, so a band cut by the Nyquist frequency reads lower
            self._banks[key] = (bank * 2.0 / (high - low) * (rate_hz / n_fft)).float().to(device)
        return self._banks[key]


class Attention(nn.Module):
    """Multi-head attention on separate query and key/value inputs (SDPA)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key_value = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        return x.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key, value = self.key_value(x).chunk(2, dim=-1)
        return self.split(key), self.split(value)

    def attend(
        self, x: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """``x`` (N, L, dim) attends to ``key``/``value`` (N, heads, K, dim/heads); ``mask`` True = keep."""
        mixed = F.scaled_dot_product_attention(self.split(self.query(x)), key, value, attn_mask=mask)
        return self.out(mixed.transpose(1, 2).flatten(2))


class MediaLayer(nn.Module):
    """Pre-norm full self-attention + MLP over the media tokens."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = self.norm1(x)
        x = x + self.attention.attend(normed, *self.attention.keys_values(normed), None)
        return x + self.mlp(self.norm2(x))


@dataclass
class KVCache:
    """Self-attention keys/values of the tokens decoded so far, one pair per decoder layer.

    Entries are ``(N, heads, L, dim/heads)``; ``key_mask`` (N, L) True marks
    real tokens. ``reorder`` selects rows (beam search).
    """

    self_kv: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    key_mask: torch.Tensor | None = None

    def reorder(self, rows: torch.Tensor) -> None:
        self.self_kv = [(k[rows], v[rows]) for k, v in self.self_kv]
        if self.key_mask is not None:
            self.key_mask = self.key_mask[rows]


class DecoderLayer(nn.Module):
    """Pre-norm causal self-attention, cross-attention to media, MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(3)])
        self.self_attention = Attention(dim, heads)
        self.cross_attention = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        cross_kv: tuple[torch.Tensor, torch.Tensor],
        past_kv: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """New ``x`` and the self-attention keys/values of past + current tokens."""
        normed = self.norms[0](x)
        key, value = self.self_attention.keys_values(normed)
        if past_kv is not None:
            key, value = torch.cat([past_kv[0], key], dim=2), torch.cat([past_kv[1], value], dim=2)
        x = x + self.self_attention.attend(normed, key, value, mask)
        x = x + self.cross_attention.attend(self.norms[1](x), *cross_kv, None)
        return x + self.mlp(self.norms[2](x)), (key, value)


class AVQAModel(nn.Module):
    """Media encoders + text decoder (see module docs)."""

    def __init__(self, config: AVQAConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.dim
        self.frames = FrameEncoder(dim, config.frame_grid)
        self.audio = AudioEncoder(config)
        self.sinks = nn.Parameter(torch.randn(config.sink_tokens, dim) * 0.02)
        self.media_type = nn.Parameter(torch.randn(2, dim) * 0.02)
        self.grid_cell = nn.Parameter(torch.randn(config.tokens_per_frame, dim) * 0.02)
        self.time = nn.Linear(2 * config.time_frequencies, dim)
        self.media_layers = nn.ModuleList([MediaLayer(dim, config.heads) for _ in range(config.media_layers)])
        self.media_norm = nn.LayerNorm(dim)
        self.embed = nn.Embedding(config.vocab_size, dim)
        self.position = nn.Embedding(config.max_text_len, dim)
        self.layers = nn.ModuleList([DecoderLayer(dim, config.heads) for _ in range(config.decoder_layers)])
        self.final_norm = nn.LayerNorm(dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.position.weight, std=0.02)

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        return cast(list[DecoderLayer], list(self.layers))

    def encode_media(
        self, frames: torch.Tensor, frame_seconds: torch.Tensor, audio: torch.Tensor | None, rate_hz: int
    ) -> torch.Tensor:
        """Memory ``(B, M, dim)`` of frames ``(B, T, H, W, 3)`` uint8 and audio ``(B, S)`` (or None)."""
        batch, count = frames.shape[:2]
        per_frame = self.frames(frames.flatten(0, 1)).view(batch, count, -1, self.config.dim)
        video_time = self.time(time_features(frame_seconds, self.config.time_frequencies))
        video = per_frame + self.grid_cell + video_time[None, :, None, :] + self.media_type[0]
        parts = [self.sinks.expand(batch, -1, -1).to(video.dtype), video.flatten(1, 2)]
        if audio is not None and audio.shape[1] > 0:
            tokens = self.audio(audio, rate_hz)
            seconds = self.audio.token_seconds(tokens.shape[1], audio.device)
            parts.append(tokens + self.time(time_features(seconds, self.config.time_frequencies)) + self.media_type[1])
        memory = torch.cat(parts, dim=1)
        for layer in self.media_layers:
            memory = layer(memory)
        return self.media_norm(memory)

    def cross_keys_values(
        self, memory: torch.Tensor, media_index: torch.Tensor | None = None
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's cross-attention keys/values of ``memory``, rows picked by ``media_index``."""
        result = []
        for layer in self.decoder_layers:
            key, value = layer.cross_attention.keys_values(memory)
            if media_index is not None:
                key, value = key[media_index], value[media_index]
            result.append((key, value))
        return result

    def decode(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        key_mask: torch.Tensor,
        cross_kv: list[tuple[torch.Tensor, torch.Tensor]],
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Logits ``(N, L, vocab)`` for ``tokens`` (N, L) placed after whatever ``cache`` holds.

        ``key_mask`` (N, L) marks real tokens of this chunk. With a cache, its
        self-attention keys/values and mask are extended in place.
        """
        x = self.embed(tokens) + self.position(positions.clamp(max=self.config.max_text_len - 1))
        length = tokens.shape[1]
        past_mask = cache.key_mask if cache is not None and cache.key_mask is not None else None
        full_mask = key_mask if past_mask is None else torch.cat([past_mask, key_mask], dim=1)
        past = full_mask.shape[1] - length
        rows = torch.arange(length, device=tokens.device)[:, None] + past
        columns = torch.arange(full_mask.shape[1], device=tokens.device)[None, :]
        # a padded query row would see no key at all (NaN): it always sees itself
        mask = ((columns <= rows)[None] & full_mask[:, None, :]) | (columns == rows)[None]
        mask = mask[:, None]  # broadcast over heads
        for index, layer in enumerate(self.decoder_layers):
            past_kv = cache.self_kv[index] if cache is not None and index < len(cache.self_kv) else None
            x, kv = layer(x, mask, cross_kv[index], past_kv)
            if cache is not None:
                if index < len(cache.self_kv):
                    cache.self_kv[index] = kv
                else:
                    cache.self_kv.append(kv)
        if cache is not None:
            cache.key_mask = full_mask
        return F.linear(self.final_norm(x), self.embed.weight)


def parameter_count(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
