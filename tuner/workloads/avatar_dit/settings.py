"""The avatar DiT's tuned parameters and inputs, read and validated: :class:`AvatarSettings`, :class:`AvatarInputs`.

What each parameter and input means, its range and its default is the workload's contract, stated in
:mod:`tuner.workloads.avatar_dit.workload`'s docstring; this module holds the defaults (:data:`DEFAULT_PARAMS`)
and the checks. Anything the workload cannot run raises :class:`~tuner.workloads.base.InvalidSetting`
(a parameter name not listed there included: a typo in a search space must not pass silently).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.workloads.avatar_dit.checkpoint import DEFAULT_WEIGHTS
from tuner.workloads.avatar_dit.sampler import AUTOCAST_DTYPES
from tuner.workloads.base import InvalidSetting, RunContext
from tuner.workloads.params import as_integer

if TYPE_CHECKING:
    import torch

    from tuner.workloads.avatar_dit.model import AvatarDiTConfig

DEFAULT_PARAMS: Mapping[str, Any] = {
    "infer_frames": 12,
    "sample_steps": 4,
    "resolution": 32,
    "batch_size": 1,
    "precision": "fp32",
    "streams": 1,
    "online_decode": True,
}
"""Values used for absent parameters (``num_clip`` is derived, see :mod:`.workload`'s docstring)."""

KNOWN_PARAMS = frozenset(DEFAULT_PARAMS) | {"num_clip"}
MAX_SAMPLE_STEPS = 8


@dataclass(frozen=True)
class AvatarInputs:
    """The workload's reading of ``context.inputs`` (see :mod:`.workload`'s docstring)."""

    audio_seconds: float
    fps: float
    output_size: int
    portrait_seed: int
    weights: Path
    audio_seed: int = 0

    @staticmethod
    def from_context(context: RunContext) -> AvatarInputs:
        inputs = context.inputs
        try:
            if "model" in inputs:
                raise ValueError(
                    "'model' is not an input any more: the architecture comes from the weights "
                    "file (train another with python -m tuner.workloads.avatar_dit.train and pass "
                    "inputs['weights'])"
                )
            weights = inputs.get("weights", DEFAULT_WEIGHTS)
            if not isinstance(weights, (str, Path)) or not str(weights):
                raise ValueError(f"weights must be a file path, got {weights!r}")
            return AvatarInputs(
                audio_seconds=_positive_real(inputs.get("audio_seconds", 2.0), "audio_seconds"),
                fps=_positive_real(inputs.get("fps", 12), "fps"),
                output_size=as_integer(inputs.get("output_size", 64), "output_size", minimum=1),
                portrait_seed=as_integer(inputs.get("portrait_seed", context.seed), "portrait_seed", minimum=0),
                weights=Path(weights).expanduser().resolve(),
                audio_seed=as_integer(inputs.get("audio_seed", context.seed), "audio_seed", minimum=0),
            )
        except ValueError as error:
            raise InvalidSetting(f"avatar_dit inputs: {error}") from error


@dataclass(frozen=True)
class AvatarSettings:
    """Validated tuned parameters (see :mod:`.workload`'s docstring for meanings)."""

    infer_frames: int
    num_clip: int
    sample_steps: int
    resolution: int
    batch_size: int
    precision: str
    streams: int
    online_decode: bool

    @property
    def total_frames(self) -> int:
        """Output frames per request: ``num_clip * infer_frames``."""
        return self.num_clip * self.infer_frames

    @staticmethod
    def from_params(
        params: Mapping[str, Any], inputs: AvatarInputs, model: AvatarDiTConfig, device: torch.device
    ) -> AvatarSettings:
        """Validate ``params``; raise :class:`InvalidSetting` for anything this workload cannot run."""
        unknown = sorted(set(params) - KNOWN_PARAMS)
        if unknown:
            raise InvalidSetting(f"unknown avatar_dit params {unknown}; known: {sorted(KNOWN_PARAMS)}")
        merged = {**DEFAULT_PARAMS, **params}
        infer_frames = as_integer(merged["infer_frames"], "infer_frames", minimum=1)
        derived_clips = math.ceil(inputs.audio_seconds * inputs.fps / infer_frames)
        num_clip = as_integer(merged.get("num_clip", derived_clips), "num_clip", minimum=1)
        sample_steps = as_integer(merged["sample_steps"], "sample_steps", minimum=1)
        if sample_steps > MAX_SAMPLE_STEPS:
            raise InvalidSetting(f"sample_steps={sample_steps} is above {MAX_SAMPLE_STEPS}")
        resolution = as_integer(merged["resolution"], "resolution", minimum=1)
        step = model.pixels_per_token
        if resolution % step:
            raise InvalidSetting(f"resolution={resolution} is not a multiple of patch x VAE downsampling = {step}")
        precision = merged["precision"]
        if precision not in AUTOCAST_DTYPES:
            raise InvalidSetting(f"precision={precision!r} is not one of {sorted(AUTOCAST_DTYPES)}")
        if precision == "fp16" and device.type != "cuda":
            raise InvalidSetting("precision='fp16' needs a CUDA device (the CPU supports fp32 and bf16)")
        streams = as_integer(merged["streams"], "streams", minimum=1)
        if streams > 2:
            raise InvalidSetting(f"streams={streams} is not 1 or 2")
        online_decode = merged["online_decode"]
        if not isinstance(online_decode, (bool, np.bool_)):
            raise InvalidSetting(f"online_decode must be a bool, got {online_decode!r}")
        return AvatarSettings(
            infer_frames,
            num_clip,
            sample_steps,
            resolution,
            as_integer(merged["batch_size"], "batch_size", minimum=1),
            precision,
            streams,
            bool(online_decode),
        )


def _positive_real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not float(value) > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)
