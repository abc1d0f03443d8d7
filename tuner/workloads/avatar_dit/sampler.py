"""Flow-matching Euler sampling of chained clips, and decoding to pixels.

Flow convention: ``x_t = (1 - t) x_data + t noise``, so the velocity is
``dx/dt = noise - x_data``; the DiT is trained to predict it (see
:mod:`.train`). Sampling integrates from t = 1 (noise) to t = 0 (data) with
``sample_steps`` uniform Euler steps; the output is the network's generation,
nothing is steered towards a drawn target.

Clips are chained: clip ``i > 0`` sees the last ``motion_frames`` latents of
clip ``i - 1`` as context (clip 0 sees copies of the reference latent).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tuner.workloads.avatar_dit.model import AvatarDiT, PixelShuffleCodec

AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
"""Precision name -> autocast dtype (None: plain fp32)."""


def autocast_for(device: torch.device, precision: str) -> AbstractContextManager[object]:
    """The autocast context for ``precision`` on ``device`` (a no-op for fp32)."""
    dtype = AUTOCAST_DTYPES[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def flow_times(sample_steps: int) -> list[float]:
    """The ``sample_steps + 1`` flow times 1 = t_0 > t_1 > ... > t_n = 0 (uniform)."""
    return [1.0 - step / sample_steps for step in range(sample_steps + 1)]


@dataclass(frozen=True)
class Conditioning:
    """What every clip is generated from, already on the device (fp32).

    ``reference``: (1, C, 1, h, w) latent of the portrait at rest.
    ``audio``: (total_frames, audio_window, features) audio features per frame.
    """

    reference: torch.Tensor
    audio: torch.Tensor


@dataclass(frozen=True)
class GenerationPlan:
    """How to generate: the tuned settings the sampler needs.

    Decoding on a side stream is asked for by passing one to :func:`generate_video`.
    """

    batch_size: int
    infer_frames: int
    num_clip: int
    sample_steps: int
    precision: str
    online_decode: bool
    output_size: int


def sample_clip(
    model: AvatarDiT,
    noise: torch.Tensor,
    context: torch.Tensor,
    audio: torch.Tensor,
    sample_steps: int,
    precision: str,
    on_step: Callable[[], None] | None = None,
) -> torch.Tensor:
    """Euler-integrate one clip from ``noise`` (B, C, T, h, w) to fp32 latents of the same shape; ``on_step()``
    is called after each step's update is queued (a timeline marks it)."""
    x = noise.float()
    times = flow_times(sample_steps)
    for t, t_next in zip(times[:-1], times[1:]):
        t_batch = torch.full((x.shape[0],), t, device=x.device)
        with autocast_for(x.device, precision):
            predicted = model(x, context, t_batch, audio)
        x = x + (t_next - t) * predicted.float()
        if on_step is not None:
            on_step()
    return x


def decode_to_pixels(codec: PixelShuffleCodec, latents: torch.Tensor, output_size: int, precision: str) -> torch.Tensor:
    """Latents (B, C, T, h, w) -> uint8 frames (B, T, S, S, 3) at S = ``output_size``.

    The codec's RGB is resized with bilinear interpolation (align_corners off, no
    antialiasing) so that every resolution is presented at one size.
    """
    b, c, t, h, w = latents.shape
    flat = latents.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
    with autocast_for(latents.device, precision):
        rgb = codec.decode(flat)
    rgb = F.interpolate(
        rgb.float(), size=(output_size, output_size), mode="bilinear", align_corners=False, antialias=False
    )
    pixels = ((rgb + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8)
    return pixels.reshape(b, t, 3, output_size, output_size).permute(0, 1, 3, 4, 2).contiguous()


def motion_context(latents: torch.Tensor, motion_frames: int) -> torch.Tensor:
    """The last ``motion_frames`` frames of (B, C, T, h, w), left-padded with the first frame if T is short."""
    tail = latents[:, :, -motion_frames:]
    missing = motion_frames - tail.shape[2]
    if missing > 0:
        tail = torch.cat([latents[:, :, :1].expand(-1, -1, missing, -1, -1), tail], dim=2)
    return tail


def generate_video(
    model: AvatarDiT,
    codec: PixelShuffleCodec,
    conditioning: Conditioning,
    draw_noise: Callable[[int], torch.Tensor],
    plan: GenerationPlan,
    side: torch.cuda.Stream | None = None,
    on_clip: Callable[[int], None] | None = None,
    mark: Callable[[str], None] | None = None,
) -> torch.Tensor:
    """All clips, chained and decoded: uint8 (B, num_clip * infer_frames, S, S, 3) on the device.

    ``draw_noise(clip_index)`` returns that clip's initial noise (B, C, T, h, w).
    With ``online_decode`` each clip is decoded as soon as it is sampled (only
    pixels are kept); without it every latent is kept and all are decoded at
    the end in one batch (higher peak memory). ``side``: a CUDA stream on which
    finished clips are decoded while the next clip denoises (used only with
    ``online_decode``); the result is ready on the current stream on return.
    ``on_clip(k)`` is called once clip ``k``'s pixels are queued, on the stream that makes them (a chunk
    clock marks it there); without ``online_decode`` every clip's call comes after the one final decode.
    ``mark(name)`` (a :class:`~tuner.evaluators.runtime.structure.Timeline`'s) ends an interval on the current
    stream: ``clip`` (a clip's noise and context), ``step`` (each sampling step), ``decode`` (each decode on
    the current stream; none for a decode on ``side``, which overlaps the next clip's steps).
    """
    marked: Callable[[str], None] = mark or (lambda name: None)
    motion_frames = model.config.motion_frames
    reference = conditioning.reference.expand(plan.batch_size, -1, -1, -1, -1)
    motion = reference.expand(-1, -1, motion_frames, -1, -1)
    device = conditioning.reference.device
    side = side if plan.online_decode and device.type == "cuda" else None
    pieces: list[torch.Tensor] = []
    for clip in range(plan.num_clip):
        frames = slice(clip * plan.infer_frames, (clip + 1) * plan.infer_frames)
        context = torch.cat([reference, motion], dim=2)
        audio = conditioning.audio[frames].unsqueeze(0).expand(plan.batch_size, -1, -1, -1)
        noise = draw_noise(clip)
        marked("clip")
        latents = sample_clip(model, noise, context, audio, plan.sample_steps, plan.precision, lambda: marked("step"))
        motion = motion_context(latents, motion_frames)
        if not plan.online_decode:
            pieces.append(latents)
        elif side is None:
            pieces.append(decode_to_pixels(codec, latents, plan.output_size, plan.precision))
            marked("decode")
            if on_clip is not None:
                on_clip(clip)
        else:
            pieces.append(_decode_on_side_stream(codec, latents, plan, side))
            if on_clip is not None:
                with torch.cuda.stream(side):
                    on_clip(clip)
    if side is not None:
        main = torch.cuda.current_stream(device)
        main.wait_stream(side)
        for piece in pieces:
            piece.record_stream(main)  # made on the side stream, read by the main one
    if not plan.online_decode:
        pixels = decode_to_pixels(codec, torch.cat(pieces, dim=2), plan.output_size, plan.precision)
        marked("decode")
        for clip in range(plan.num_clip if on_clip is not None else 0):
            on_clip(clip)  # type: ignore[misc]
        return pixels
    return torch.cat(pieces, dim=1)


def _decode_on_side_stream(
    codec: PixelShuffleCodec, latents: torch.Tensor, plan: GenerationPlan, side: torch.cuda.Stream
) -> torch.Tensor:
    """Queue the decode of ``latents`` on ``side`` so the next clip can denoise meanwhile."""
    side.wait_stream(torch.cuda.current_stream(latents.device))
    with torch.cuda.stream(side):
        pixels = decode_to_pixels(codec, latents, plan.output_size, plan.precision)
    latents.record_stream(side)  # keep the allocator from reusing it before the side stream reads it
    return pixels
