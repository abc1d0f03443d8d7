"""The settings diffusers 0.42 offers around a Wan pipeline, applied and checked (read from its source).

* **Caches** (``transformer.enable_cache(config)``, ``diffusers.hooks``): ``fbc`` First-Block Cache
  (``FirstBlockCacheConfig(threshold)``), ``pab`` Pyramid Attention Broadcast (self-attention
  recomputed every ``interval`` calls between timesteps 100 and 800), ``fastercache`` (attention
  reuse every ``interval`` calls; ``is_guidance_distilled=True`` because Wan runs its cond and uncond
  passes as two calls, while FasterCache's CFG-branch approximation expects them concatenated in one
  batch and would split the batch), ``taylorseer`` (``TaylorSeerCacheConfig(cache_interval)``),
  ``magcache`` (``MagCacheConfig(threshold, mag_ratios)``: the ratios are checkpoint-dependent, so
  they are measured here -- :func:`calibrate_mag_ratios` -- for the network and setting at hand),
  ``seacache`` (``SeaCacheConfig(threshold)``, which has a built-in Wan T2V adapter). PAB and
  FasterCache keep one state for both CFG calls of a step (diffusers' hooks are not per cache
  context): a skipped call reuses the other branch's attention output; the quality metrics measure
  that. TaylorSeer's default module patterns match nothing in Wan (it would be a no-op): its
  self-attention, cross-attention and feed-forward outputs are named explicitly. ``TextKVCacheConfig`` exists but only for NucleusMoE blocks: not offered.
* **Attention backends** (``set_attention_backend``; ``AttentionBackendName``): all names are
  accepted except the ``*_hub`` ones, which download a kernel from the Hub at run time. CUDA-only
  kernels are refused on a CPU device and flash kernels in fp32; a missing package is refused with
  diffusers' own message.
* **Offload**: ``model`` (``enable_model_cpu_offload``), ``group_block`` / ``group_leaf``
  (``enable_group_offload``, block- or leaf-level, CUDA streams), ``sequential``
  (``enable_sequential_cpu_offload``); all need an accelerator.
* **torch.compile**: mode ``default``, ``reduce-overhead``, ``max-autotune``,
  ``max-autotune-no-cudagraphs``; ``regional`` scope (``compile_repeated_blocks``: the Wan blocks,
  diffusers' recommendation) or ``full`` (the whole transformer), both in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tuner.workloads.base import InvalidSetting

CACHES = ("none", "fbc", "pab", "fastercache", "taylorseer", "magcache", "seacache")
"""``cache`` parameter values."""

CACHE_DEFAULTS: dict[str, dict[str, float]] = {
    "fbc": {"threshold": 0.05},
    "pab": {"interval": 2},
    "fastercache": {"interval": 2},
    "taylorseer": {"interval": 5},
    "magcache": {"threshold": 0.06},
    "seacache": {"threshold": 0.25},
}
"""Each method's knob and diffusers' default for it (``cache_threshold`` / ``cache_interval`` override)."""

OFFLOADS = ("none", "model", "group_block", "group_leaf", "sequential")
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
"""The torch.compile modes that record CUDA graphs (on a CUDA device)."""
_CUDA_ONLY_PREFIXES = (
    "flash",
    "_flash",
    "sage",
    "_sage",
    "xformers",
    "_native_flash",
    "_native_efficient",
    "_native_cudnn",
    "aiter",
)
_TAYLORSEER_WAN = (r"blocks\.\d+\.attn1", r"blocks\.\d+\.attn2", r"blocks\.\d+\.ffn")
"""The modules TaylorSeer predicts on Wan: each block's self-attention, cross-attention and feed-forward
(its default patterns, ``^blocks.*attn`` matched whole, name no Wan module: they end in ``attn1``)."""
_HALF_ONLY_PREFIXES = ("flash", "_flash", "_native_flash", "sage", "_sage")


@dataclass(frozen=True)
class CacheChoice:
    """A cache method and its one knob: ``threshold`` (fbc, magcache, seacache) or ``interval``
    (pab, fastercache, taylorseer, in denoiser calls)."""

    method: str = "none"
    threshold: float | None = None
    interval: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> CacheChoice:
        """From ``cache``, ``cache_threshold``, ``cache_interval`` (the method's default when absent)."""
        method = str(params.get("cache", "none"))
        if method not in CACHES:
            raise InvalidSetting(f"cache must be one of {', '.join(CACHES)}, not {method!r}")
        if method == "none":
            return cls()
        defaults = CACHE_DEFAULTS[method]
        if "threshold" in defaults:
            threshold = float(params.get("cache_threshold", defaults["threshold"]))
            if not threshold >= 0:
                raise InvalidSetting(f"cache_threshold must be >= 0 (got {threshold})")
            return cls(method, threshold=threshold)
        interval = int(params.get("cache_interval", defaults["interval"]))
        if interval < 1:
            raise InvalidSetting(f"cache_interval must be >= 1 (got {interval})")
        return cls(method, interval=interval)


def cache_config(
    choice: CacheChoice,
    current_timestep: Callable[[], Any],
    num_inference_steps: int,
    mag_ratios: list[float] | None = None,
) -> Any:
    """The diffusers config object for ``choice`` (None for ``none``).

    ``current_timestep``: the pipeline's current timestep (PAB / FasterCache ask it); ``mag_ratios``:
    MagCache's per-step residual ratios (:func:`calibrate_mag_ratios`)."""
    from diffusers.hooks import (
        FasterCacheConfig,
        FirstBlockCacheConfig,
        MagCacheConfig,
        PyramidAttentionBroadcastConfig,
        SeaCacheConfig,
        TaylorSeerCacheConfig,
    )

    method = choice.method
    if method == "none":
        return None
    if method == "fbc":
        return FirstBlockCacheConfig(threshold=float(choice.threshold or 0.0))
    if method == "pab":
        return PyramidAttentionBroadcastConfig(
            spatial_attention_block_skip_range=choice.interval,
            spatial_attention_timestep_skip_range=(100, 800),
            current_timestep_callback=current_timestep,
        )
    if method == "fastercache":
        return FasterCacheConfig(
            spatial_attention_block_skip_range=int(choice.interval or 2),
            spatial_attention_timestep_skip_range=(-1, 681),
            current_timestep_callback=current_timestep,
            is_guidance_distilled=True,
            tensor_format="BCFHW",
        )
    if method == "taylorseer":
        return TaylorSeerCacheConfig(cache_interval=int(choice.interval or 5), cache_identifiers=list(_TAYLORSEER_WAN))
    if method == "magcache":
        if mag_ratios is None:
            raise ValueError("MagCache needs mag_ratios (calibrate_mag_ratios)")
        return MagCacheConfig(
            threshold=float(choice.threshold or 0.0),
            num_inference_steps=num_inference_steps,
            mag_ratios=list(mag_ratios),
        )
    return SeaCacheConfig(threshold=float(choice.threshold or 0.0))


def calibrate_mag_ratios(transformer: torch.nn.Module, generate: Callable[[], Any], cfg: bool) -> list[float]:
    """MagCache's ratios for this network, measured as diffusers' calibration mode defines them.

    Runs ``generate()`` (one full generation, no cache) while hooks on the first and last Wan blocks
    take the block stack's residual (last output - first input) on each conditional call (with CFG
    the calls alternate cond, uncond); ratio i = mean over tokens of |residual_i| / |residual_i-1|
    (1.0 for the first step). One ratio per denoising step."""
    blocks = transformer.blocks  # type: ignore[attr-defined]
    calls: list[int] = [0]
    state: dict[str, Any] = {"input": None, "previous": None}
    ratios: list[float] = []

    def before(_module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        state["input"] = args[0]

    def after(_module: torch.nn.Module, _args: tuple[Any, ...], output: Any) -> None:
        index = calls[0]
        calls[0] += 1
        if cfg and index % 2:
            return  # an unconditional call
        hidden = output[0] if isinstance(output, tuple) else output
        residual = (hidden - state["input"]).float()
        previous = state["previous"]
        ratios.append(
            1.0
            if previous is None
            else float((torch.linalg.norm(residual, dim=-1) / (torch.linalg.norm(previous, dim=-1) + 1e-8)).mean())
        )
        state["previous"] = residual

    handles = [blocks[0].register_forward_pre_hook(before), blocks[-1].register_forward_hook(after)]
    try:
        generate()
    finally:
        for handle in handles:
            handle.remove()
    return ratios


def check_attention_backend(name: str, device: str, dtype: torch.dtype) -> None:
    """InvalidSetting when diffusers would refuse ``name`` here, or it would download a kernel."""
    from diffusers.models.attention_dispatch import AttentionBackendName, _check_attention_backend_requirements

    known = {member.value for member in AttentionBackendName}
    if name not in known:
        raise InvalidSetting(f"attention_backend must be one of diffusers' {', '.join(sorted(known))}; not {name!r}")
    if name.endswith("_hub"):
        raise InvalidSetting(
            f"attention backend {name!r} downloads its kernel from the Hub at run time; "
            "nothing may download during a study"
        )
    if device == "cpu" and name.startswith(_CUDA_ONLY_PREFIXES):
        raise InvalidSetting(f"attention backend {name!r} needs a CUDA device (the trial runs on the CPU)")
    if dtype == torch.float32 and name.startswith(_HALF_ONLY_PREFIXES):
        raise InvalidSetting(f"attention backend {name!r} runs in fp16 / bf16 only (precision is fp32)")
    try:
        _check_attention_backend_requirements(AttentionBackendName(name))
    except (RuntimeError, ImportError) as error:
        raise InvalidSetting(str(error)) from None


def switch_attention_backend(denoisers: list[Any], name: str, device: str, compiled: bool) -> None:
    """Set the loaded ``denoisers``' attention backend to ``name`` without a reload (``attention_backend`` left
    out of ``reload_on``); InvalidSetting where diffusers would refuse it here, or when the denoisers are
    compiled (their graph holds the old backend: keep ``attention_backend`` in ``reload_on`` with ``compile``)."""
    if compiled:
        raise InvalidSetting(
            "attention_backend switches without a reload only on an uncompiled model; with "
            "compile, name attention_backend in reload_on"
        )
    check_attention_backend(name, device, next(denoisers[0].parameters()).dtype)
    for denoiser in denoisers:
        denoiser.set_attention_backend(name)


def place(pipe: Any, offload: str, device: str) -> None:
    """Put the pipeline on ``device``, or offload it (see module docs); InvalidSetting on a CPU."""
    if offload not in OFFLOADS:
        raise InvalidSetting(f"offload must be one of {', '.join(OFFLOADS)}, not {offload!r}")
    if offload == "none":
        pipe.to(device)
        return
    if not device.startswith("cuda"):
        raise InvalidSetting(
            f"offload {offload!r} moves weights between the host and an accelerator; the trial runs on {device}"
        )
    if offload == "model":
        pipe.enable_model_cpu_offload(device=device)
    elif offload == "sequential":
        pipe.enable_sequential_cpu_offload(device=device)
    else:
        pipe.enable_group_offload(
            onload_device=torch.device(device),
            offload_device=torch.device("cpu"),
            offload_type="block_level" if offload == "group_block" else "leaf_level",
            num_blocks_per_group=1 if offload == "group_block" else None,
            use_stream=True,
        )


def compile_mode(value: Any) -> str:
    """The ``compile`` parameter as a mode name (booleans: ``default`` / ``none``)."""
    if isinstance(value, bool) or value is None:
        return "default" if value else "none"
    mode = str(value)
    if mode not in COMPILE_MODES:
        raise InvalidSetting(f"compile must be one of {', '.join(COMPILE_MODES)} (or a bool), not {mode!r}")
    return mode


def compile_transformer(transformer: torch.nn.Module, mode: str, scope: str) -> None:
    """``torch.compile`` in place: the repeated Wan blocks (``regional``) or the whole model (``full``)."""
    if mode == "none":
        return
    if scope == "regional":
        transformer.compile_repeated_blocks(mode=mode)  # type: ignore[operator]
    elif scope == "full":
        transformer.compile(mode=mode)
    else:
        raise InvalidSetting(f"compile_scope must be regional or full, not {scope!r}")
