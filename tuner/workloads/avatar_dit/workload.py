"""``AvatarDiTWorkload``: a small audio-driven talking-head video DiT.

A small stand-in for Live Avatar-style models: a diffusion transformer that
animates a reference portrait from speech, clip after clip, with real torch
compute whose cost follows the tuned settings. The DiT is **trained** (on
procedural faces and speech, :mod:`.train`); ``setup`` loads its weights from
the committed checkpoint (or ``inputs["weights"]``), so the weights never depend
on the seed or the tuned parameters. The output is the network's generation
from noise (:mod:`.sampler`); see ``docs/models/avatar_dit.md`` for measured
quality and cost per knob.

Parameters (``params``; defaults in :data:`.settings.DEFAULT_PARAMS`)
---------------------------------------------------------------------
``infer_frames``  int >= 1: frames per clip; the DiT attends jointly over all
                  tokens of a clip (cost ~ quadratic in it). Trained up to 32;
                  longer clips run but lose quality (see the model card).
``num_clip``      int >= 1: clips, chained through motion frames. Absent:
                  ``ceil(audio_seconds * fps / infer_frames)``.
``sample_steps``  int 1..8: Euler steps per clip (fewer: noisier frames).
``resolution``    int: generation side in pixels, a multiple of
                  ``patch * 2`` (4 with the committed model; trained at 32,
                  48 and 64).
``batch_size``    int >= 1: independent requests per forward (same audio and
                  portrait, own noise each); ``items`` of the output.
``precision``     "fp32" | "bf16" | "fp16" (autocast; fp16 is CUDA-only).
``streams``       1 | 2: with 2 on CUDA and ``online_decode``, clip i is
                  decoded on a side stream while clip i+1 denoises. On the
                  CPU, or without ``online_decode``, 2 behaves exactly as 1.
``online_decode`` bool: decode each clip when finished (flat memory) or keep
                  every latent and decode all at the end.

A parameter name not listed here raises :class:`InvalidSetting` (a typo in a
search space must not pass silently). One clip's self-attention runs over
``(infer_frames + 3) * (resolution / (2 * patch))**2`` tokens: a reference
frame and two motion frames precede the generated ones.

Inputs (``context.inputs``)
---------------------------
``audio_seconds`` (2.0), ``fps`` (12), ``output_size`` (64: every resolution
is presented at this size, bilinear, no antialiasing), ``portrait_seed``
(``context.seed``), ``weights`` (path of a checkpoint; default the committed
``weights/avatar_dit.pt``; a missing file raises
:class:`~.checkpoint.WeightsMissing` naming the training command), ``audio_seed``
(``context.seed``: another utterance per seed). The audio is
synthesised from ``audio_seed``; initial noise comes from one CPU generator per
request seeded from ``context.seed`` and the request index, so request 0 gets the
same noise at every batch size. Seeds below 1,000,000 were never trained on
(:mod:`.data`). The architecture comes from the checkpoint; a ``model`` input
is refused.

Output: ``video`` uint8 (batch_size, frames, output_size, output_size, 3), the generated
``num_clip * infer_frames`` frames cut to the audio's duration (``ceil(audio_seconds * fps)``
frames: a talking head ends with its audio, so every ``infer_frames`` gives a video of one
length and one content, compared frame by frame with the reference's); ``audio`` the input
audio (float32, 16 kHz); counters ``frames`` (generated per request, before the cut), ``clips``, ``tokens_per_clip``, ``dit_forwards`` and
``dit_gflops`` (analytic matmul FLOPs of all DiT forwards of the call). Spans prepare / model / postprocess
(``call_spans``) and the cost structure (``call_structure``): each sampling step, the decode.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tuner.evaluators.runtime.spans import CallSpans
from tuner.evaluators.runtime.streaming import ChunkClock
from tuner.evaluators.runtime.structure import Timeline, named
from tuner.results import Metric
from tuner.workloads.avatar_dit.checkpoint import load_checkpoint
from tuner.workloads.avatar_dit.inputs import (
    AUDIO_RATE_HZ,
    frame_audio_features,
    render_portraits,
    synth_speech_audio,
    windowed_audio_features,
)
from tuner.workloads.avatar_dit.model import (
    LATENT_CHANNELS,
    VAE_DOWNSAMPLE,
    AvatarDiT,
    PixelShuffleCodec,
)
from tuner.workloads.avatar_dit.sampler import Conditioning, GenerationPlan, generate_video
from tuner.workloads.avatar_dit.settings import AvatarInputs, AvatarSettings
from tuner.workloads.base import RunContext, Workload, WorkloadOutput
from tuner.workloads.params import torch_device

_MAX_CACHED_CONDITIONINGS = 8


def request_seed(seed: int, request: int) -> int:
    """Noise seed of request ``request`` in a batch: request 0 draws the same noise at every batch size."""
    return (seed * 1_000_003 + request) % (2**63)


class AvatarDiTWorkload(Workload):
    """Built-in talking-avatar DiT workload (see module docs for params, inputs and output)."""

    def __init__(self) -> None:
        self._built_for: tuple[Path, str] | None = None
        self._model: AvatarDiT | None = None
        self._codec = PixelShuffleCodec()
        self._audio_key: tuple[float, int] | None = None
        self._chunks: ChunkClock | None = None
        self._spans: CallSpans | None = None
        self._timeline: Timeline | None = None
        self._shape: tuple[int, bool] = (1, False)  # (clips, decode on the side stream) of the last call
        self._audio: np.ndarray | None = None
        self._conditionings: dict[tuple[int, int, AvatarInputs, int], Conditioning] = {}
        self._decode_stream: torch.cuda.Stream | None = None

    @property
    def dit(self) -> AvatarDiT | None:
        """The loaded DiT (``None`` before ``setup``), for inspection; do not modify it."""
        return self._model

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        """Load the weights, validate ``params`` and synthesise the audio (not timed)."""
        self._prepare(params, context)

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        """Generate ``batch_size`` talking-head videos; deterministic for a seed and params.

        The first call for a (resolution, frame count) also renders and encodes
        the reference portrait and the audio windows, which later calls reuse
        (the worker's warmup absorbs it).
        """
        spans = self._spans = CallSpans(
            torch.cuda if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        )
        spans.begin()
        device, inputs, settings = self._prepare(params, context)
        assert self._model is not None and self._audio is not None
        chunks = self._chunks = ChunkClock(torch.cuda if device.type == "cuda" else None)
        chunks.begin()
        kept = math.ceil(inputs.audio_seconds * inputs.fps)  # frames the video keeps: the audio's duration

        def clip_ready(clip: int) -> None:
            frames = max(0, min(settings.infer_frames, kept - clip * settings.infer_frames))
            chunks.chunk(frames / inputs.fps)

        plan = GenerationPlan(
            batch_size=settings.batch_size,
            infer_frames=settings.infer_frames,
            num_clip=settings.num_clip,
            sample_steps=settings.sample_steps,
            precision=settings.precision,
            online_decode=settings.online_decode,
            output_size=inputs.output_size,
        )
        side = self._side_stream(device) if settings.streams == 2 else None
        with torch.inference_mode():
            conditioning = self._conditioning(settings, inputs, context.seed, device)
            draw_noise = self._noise_source(settings, context.seed, device)
            spans.mark("prepare")
            timeline = self._timeline = Timeline(torch.cuda if device.type == "cuda" else None)
            self._shape = (settings.num_clip, side is not None)
            timeline.start()
            video = generate_video(
                self._model, self._codec, conditioning, draw_noise, plan, side, clip_ready, timeline.mark
            )
            spans.mark("model")
            video_array = video.cpu().numpy()[:, : math.ceil(inputs.audio_seconds * inputs.fps)]
            spans.mark("postprocess")
        config = self._model.config
        forwards = settings.num_clip * settings.sample_steps
        flops = config.forward_flops(settings.resolution, settings.infer_frames, settings.batch_size)
        return WorkloadOutput(
            video=video_array,
            audio=self._audio.copy(),
            audio_rate=AUDIO_RATE_HZ,
            items=settings.batch_size,
            counters={
                "frames": float(settings.total_frames),
                "clips": float(settings.num_clip),
                "tokens_per_clip": float(config.tokens_per_clip(settings.resolution, settings.infer_frames)),
                "dit_forwards": float(forwards),
                "dit_gflops": forwards * flops / 1e9,
            },
        )

    def call_spans(self) -> Mapping[str, float] | None:
        """The last call's seconds: ``prepare`` (settings, conditioning and noise), ``model`` (sampling and decode
        of every clip) and ``postprocess`` (the host copy): :mod:`tuner.evaluators.runtime.spans`."""
        return self._spans.seconds() if self._spans is not None else None

    def call_structure(self) -> Mapping[str, Any] | None:
        """The last call's structure (:mod:`tuner.evaluators.runtime.structure`), inside ``model``: each sampling
        step of every clip (``steps``, one DiT pass each), ``denoise`` (their sum), ``decode`` (every decode on the
        main stream; absent with ``streams`` 2 on CUDA, where decoding overlaps the next clip's steps), ``clip``
        (each clip's noise and context). CUDA events on CUDA (no synchronisation in the call), else the host
        clock."""
        if self._timeline is None:
            return None
        intervals = self._timeline.intervals()
        steps = named(intervals, "step")
        clips, side = self._shape
        phases = {
            "denoise": sum(steps),
            "clip": sum(named(intervals, "clip")),
            **({} if side else {"decode": sum(named(intervals, "decode"))}),
        }
        return {
            "phases": phases,
            "series": {"steps": steps},
            "counts": {"passes_per_step": 1, "clips": clips, "steps_per_clip": len(steps) // max(1, clips)},
        }

    def measured_metrics(self) -> list[Metric]:
        """The last call's streaming figures: each clip is a chunk (:mod:`tuner.evaluators.runtime.streaming`)."""
        return self._chunks.metrics() if self._chunks is not None else []

    def declared_weights(self, context: RunContext) -> Mapping[str, Path]:
        """The checkpoint ``run`` reads: ``inputs["weights"]`` or the committed ``weights/avatar_dit.pt``."""
        return {"avatar_dit": AvatarInputs.from_context(context).weights}

    def teardown(self) -> None:
        cuda_used = self._built_for is not None and self._built_for[1].startswith("cuda")
        self._model = None
        self._decode_stream = None
        self._built_for = None
        self._conditionings.clear()
        if cuda_used:
            torch.cuda.empty_cache()

    def _prepare(
        self, params: Mapping[str, Any], context: RunContext
    ) -> tuple[torch.device, AvatarInputs, AvatarSettings]:
        """Read inputs, load the model (once per weights file and device), validate params, make the audio."""
        device = torch_device(context)
        inputs = AvatarInputs.from_context(context)
        key = (inputs.weights, str(device))
        if self._built_for != key:
            model, _ = load_checkpoint(inputs.weights)
            self._model = model.to(device).eval()
            self._conditionings.clear()
            self._decode_stream = None
            self._built_for = key
        assert self._model is not None
        settings = AvatarSettings.from_params(params, inputs, self._model.config, device)
        audio_key = (inputs.audio_seconds, inputs.audio_seed)
        if self._audio_key != audio_key:
            self._audio = synth_speech_audio(inputs.audio_seconds, inputs.audio_seed, AUDIO_RATE_HZ)
            self._audio_key = audio_key
        return device, inputs, settings

    def _side_stream(self, device: torch.device) -> torch.cuda.Stream | None:
        """The workload's one decode stream on CUDA (kept across runs); None on the CPU."""
        if device.type != "cuda":
            return None
        if self._decode_stream is None:
            self._decode_stream = torch.cuda.Stream(device=device)
        return self._decode_stream

    def _conditioning(
        self, settings: AvatarSettings, inputs: AvatarInputs, seed: int, device: torch.device
    ) -> Conditioning:
        """Reference latent and audio windows for this resolution and length (cached)."""
        key = (settings.resolution, settings.total_frames, inputs, seed)
        if key in self._conditionings:
            return self._conditionings[key]
        assert self._model is not None and self._audio is not None
        window = self._model.config.audio_window
        described = frame_audio_features(self._audio, AUDIO_RATE_HZ, inputs.fps, settings.total_frames + window // 2)
        audio = torch.from_numpy(windowed_audio_features(described.features, settings.total_frames, window))
        portrait = torch.from_numpy(render_portraits(settings.resolution, inputs.portrait_seed, np.zeros(1)))
        reference = self._codec.encode(portrait.permute(0, 3, 1, 2) * 2.0 - 1.0)  # (1, C, h, w)
        conditioning = Conditioning(reference=reference.unsqueeze(2).to(device), audio=audio.to(device))
        if len(self._conditionings) >= _MAX_CACHED_CONDITIONINGS:
            self._conditionings.clear()
        self._conditionings[key] = conditioning
        return conditioning

    @staticmethod
    def _noise_source(settings: AvatarSettings, seed: int, device: torch.device) -> Callable[[int], torch.Tensor]:
        """``clip -> (B, C, T, h, w)`` noise; request b's clips come from its own CPU generator in order."""
        generators = [torch.Generator().manual_seed(request_seed(seed, b)) for b in range(settings.batch_size)]
        latent_side = settings.resolution // VAE_DOWNSAMPLE
        shape = (LATENT_CHANNELS, settings.infer_frames, latent_side, latent_side)

        def draw_noise(clip: int) -> torch.Tensor:
            del clip  # drawn in clip order, so each generator's position already encodes the clip
            return torch.stack([torch.randn(shape, generator=g) for g in generators]).to(device)

        return draw_noise
