"""What a diffusers video pipeline's call needs warmed first, and the cheaper call that warms it.

A warm model keeps the shapes it has run (:func:`shape_key`) and the MagCache calibrations it has made
(:func:`calibration_key`). :func:`warmup_calls` is the exact count of untimed calls a setting needs
(``knows_warmup``): a shape new to the load needs one (the first call's lazy set-up, a larger allocator pool,
kernels chosen per shape), three with CUDA graphs (compile, record, first replay); a MagCache setting without
ratios needs its calibration. :func:`light_warmup` is the setting of a cheaper call that warms the same
things: one denoising step instead of many -- every step runs the same shapes through the same kernels, and
the text encoding and the VAE decode are the full call's. Not offered where the whole call is what warms:
a compiled denoiser (its graphs may branch by step), a calibration to make, a single-step setting, a
two-expert model (Wan2.2 A14B: which expert a step runs depends on its timestep, so one step warms one).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from tuner.adapters.factories.wan.knobs import CUDA_GRAPH_MODES

LIGHT_STEPS = 1
"""The denoising steps of a lighter warm-up call."""


def shape_key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    """What decides the denoiser's input shapes and kernels: a compiled graph serves one such key, and a key
    this load has run needs no warm-up (the attention backend is part of it: other kernels)."""
    return (
        params.get("num_frames"),
        params.get("height"),
        params.get("width"),
        params.get("batch_size", params.get("num_videos_per_prompt", 1)),
        float(params.get("guidance_scale", 5.0)) > 1.0,
        params.get("attention_backend"),
    )


def calibration_key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a MagCache calibration depends on: the call's shape, steps, guidance and scheduler."""
    return tuple(
        params.get(name)
        for name in (
            "num_frames",
            "height",
            "width",
            "num_inference_steps",
            "guidance_scale",
            "guidance_scale_2",
            "scheduler",
            "flow_shift",
        )
    )


def needs_calibration(params: Mapping[str, Any], given_ratios: bool, calibrated: Collection[Any]) -> bool:
    """True when ``params`` asks for MagCache, no ratios were given and this setting was never calibrated."""
    return (
        str(params.get("cache", "none")) == "magcache"
        and not given_ratios
        and calibration_key(params) not in calibrated
    )


def warmup_calls(params: Mapping[str, Any], compile_mode: str, shapes_run: Collection[Any], calibrating: bool) -> int:
    """Untimed calls ``params`` needs in this load before its timings mean anything (module docs):
    ``compile_mode`` the denoiser's, ``shapes_run`` the :func:`shape_key` values run since the load,
    ``calibrating`` whether MagCache must calibrate first (:func:`needs_calibration`)."""
    calls = 0
    if shape_key(params) not in shapes_run:
        calls = 3 if compile_mode in CUDA_GRAPH_MODES else 1
    return max(calls, 1) if calibrating else calls


def light_warmup(
    params: Mapping[str, Any], compile_mode: str, calibrating: bool, experts: int = 1
) -> dict[str, Any] | None:
    """The setting of a cheaper warm-up call for ``params``: :data:`LIGHT_STEPS` denoising steps, MagCache off
    (its hooks are per step count); None where only the call itself warms (module docs; ``experts``: the
    pipeline's denoisers)."""
    steps = int(params.get("num_inference_steps", 0) or 0)
    if compile_mode != "none" or calibrating or steps <= LIGHT_STEPS or experts > 1:
        return None
    light = dict(params, num_inference_steps=LIGHT_STEPS)
    if str(params.get("cache", "none")) == "magcache":
        light["cache"] = "none"
    return light
