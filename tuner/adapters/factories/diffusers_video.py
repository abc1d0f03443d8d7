"""A python-adapter factory for a diffusers video pipeline: Wan from weights or from its config.

``workload.python``::

    factory: tuner.adapters.factories.diffusers_video:make_video_pipeline
    kwargs: {weights: random, architecture: wan2.1-t2v-1.3b, device: cuda, seed: 0}
    #   or: {model_path: /weights/Wan2.1-T2V-1.3B-Diffusers, pipeline_class: "diffusers:WanPipeline"}
    reload_on: [precision, offload, attention_backend, compile]

**Weights.** ``model_path``: a local diffusers directory (``local_files_only``; the VAE in
``vae_dtype``, the rest in ``precision``). ``weights: random``: a ``WanPipeline`` built from an
``architecture`` preset (:mod:`.wan.presets`: ``tiny``, ``wan2.1-t2v-1.3b``, ``wan2.1-t2v-14b``,
``wan2.2-t2v-a14b``) with weights drawn from ``seed``, without any download. Text: with random
weights, or a directory without a text encoder, each prompt's embedding is a seeded tensor of
the shape Wan's UMT5 gives, (B, 512, text_dim); with a text encoder, a Wan prompt is encoded once
on the CPU (first call, outside the pipeline) and reused: latency and memory are the pipeline's
denoising and decoding, not the text encoder's. :meth:`DiffusersVideoModel.weights_identity` says
which weights ran (``random:<preset>:<seed>`` or ``path:<dir>``); quality metrics of random
weights measure agreement with the reference setting of an untrained network, not image quality.

**load(static)** -- the ``reload_on`` values: ``precision`` (fp32 / bf16 / fp16, the denoiser),
``vae_dtype`` (default the ``vae_dtype`` kwarg, fp32 as Wan keeps it), ``offload`` (none / model /
group_block / group_leaf / sequential; the old ``cpu_offload: true`` = model), ``attention_backend``,
``compile`` (a mode or a bool; ``compile_scope`` kwarg: regional or full). See :mod:`.wan.knobs`.

**run(params, inputs)** -- ``num_frames`` (4k+1), ``height`` / ``width`` (multiples of 16: the
pipeline would silently round anything else), ``num_inference_steps``, ``guidance_scale`` (CFG, two
denoiser calls per step, only above 1), ``guidance_scale_2`` (low-noise expert; two-expert presets
only), ``batch_size`` (videos per call), ``scheduler`` (unipc / dpm++ / euler) and ``flow_shift``,
``cache`` with ``cache_threshold`` / ``cache_interval``, ``vae_tiling``, ``vae_slicing``, and
``attention_backend`` when ``reload_on`` leaves it out (uncompiled only). These apply without a reload (a
cache's hooks are swapped when it changes, the denoisers' attention backend set). Inputs: ``prompt``,
``negative_prompt``. Output: uint8 video (B, T, H, W, 3); counters ``frames``, ``steps``, ``cfg``.
Spans (``call_spans``): prepare / model / postprocess; cost
structure (``call_structure``, :mod:`.call_clocks`): text, setup, each denoising step, decode.
A setting the pipeline would refuse or silently change raises ``InvalidSetting``. MagCache
without a ``mag_ratios`` kwarg calibrates its ratios by one uncached generation the first time a
setting asks for it: the trial's first call, a warm-up call when ``measurement.warmup >= 1`` or ``auto``.
:meth:`DiffusersVideoModel.warmup_calls` is exact (``knows_warmup``): under ``measurement.warmup: auto`` a setting
whose shape this load has run, with nothing to compile or calibrate, is timed without a warm-up; a new shape
is warmed by a one-step call (``warmup_settings``, :mod:`.wan.warmup`; kwarg ``light_warmup: false``: by the whole
call, which is counted as a repeat when as fast).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tuner.adapters.factories import import_named, torch_dtype
from tuner.adapters.factories.call_clocks import PipelineClock, device_cuda, host_seconds
from tuner.adapters.factories.wan.knobs import (
    CUDA_GRAPH_MODES,
    CacheChoice,
    cache_config,
    calibrate_mag_ratios,
    check_attention_backend,
    compile_mode,
    compile_transformer,
    place,
    switch_attention_backend,
)
from tuner.adapters.factories.wan.presets import build_transformer, build_vae, make_scheduler, preset_named
from tuner.adapters.factories.wan.settings import apply_scheduler_and_vae
from tuner.adapters.factories.wan.text import PromptEmbeddings, is_wan
from tuner.adapters.factories.wan.warmup import (
    calibration_key,
    light_warmup,
    needs_calibration,
    shape_key,
    warmup_calls,
)
from tuner.evaluators.runtime.spans import CallSpans
from tuner.workloads.base import InvalidSetting, WorkloadOutput

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".ckpt")


class DiffusersVideoModel:
    """``load`` / ``run`` for a diffusers video pipeline (see module docs)."""

    def __init__(
        self,
        model_path: str | None = None,
        pipeline_class: str = "diffusers:DiffusionPipeline",
        device: str = "cuda",
        seed: int = 0,
        weights: str | None = None,
        architecture: str = "tiny",
        vae_dtype: str = "fp32",
        compile_scope: str = "regional",
        mag_ratios: list[float] | None = None,
        light_warmup: bool = True,
    ) -> None:
        self.weights = weights or ("random" if model_path is None else "path")
        if self.weights not in ("random", "path"):
            raise ValueError(f"weights must be 'random' or 'path', not {self.weights!r}")
        if self.weights == "path" and not model_path:
            raise ValueError("weights: path needs model_path (a local diffusers directory)")
        self.preset = preset_named(architecture) if self.weights == "random" else None
        self.model_path, self.pipeline_class = model_path, pipeline_class
        self.device, self.seed = device, int(seed)
        self.vae_dtype, self.compile_scope, self.mag_ratios = vae_dtype, compile_scope, mag_ratios
        self.light_warmup = bool(light_warmup)  # False: a new shape is warmed by the whole call (docs/benchmarks.md)
        self.pipe: Any = None
        self._prompts = PromptEmbeddings(self.seed, device, self.preset.text_length if self.preset is not None else 512)
        self._applied: dict[str, Any] = {}
        self._calibrated: dict[tuple[Any, ...], list[float]] = {}
        self._spans = CallSpans()
        self._clock: PipelineClock | None = None
        self._compile, self._compiled_shapes = "none", set[tuple[Any, ...]]()
        self._backend: Any = None  # the denoisers' attention backend (None: diffusers' default)

    # -- weights -----------------------------------------------------------------------------------------
    def weights_identity(self, inputs: Mapping[str, Any]) -> str:
        """``random:<preset>:<seed>`` for seeded random weights, ``path:<model_path>`` for a directory."""
        if self.preset is not None:
            return f"random:{self.preset.name}:{self.seed}"
        return f"path:{self.model_path}"

    def declared_weights(self, inputs: Mapping[str, Any]) -> dict[str, Path]:
        """The weight files of ``model_path`` by relative name (the worker records their sha256); none when random."""
        if self.preset is not None or self.model_path is None:
            return {}
        root = Path(self.model_path)
        return {
            str(path.relative_to(root)): path
            for path in sorted(root.rglob("*"))
            if path.is_file() and path.name.endswith(_WEIGHT_SUFFIXES)
        }

    # -- load --------------------------------------------------------------------------------------------
    def load(self, static_params: Mapping[str, Any]) -> None:
        """Build or read the pipeline for these static settings and place it (see module docs)."""
        dtype = torch_dtype(static_params)
        vae_dtype = torch_dtype({"precision": static_params.get("vae_dtype", self.vae_dtype)})
        offload = str(static_params.get("offload", "model" if static_params.get("cpu_offload") else "none"))
        backend = static_params.get("attention_backend")
        mode = compile_mode(static_params.get("compile", "none"))
        if backend is not None:
            check_attention_backend(str(backend), self.device, dtype)
        if offload != "none" and not self.device.startswith("cuda"):
            raise InvalidSetting(f"offload {offload!r} needs an accelerator; the trial runs on {self.device}")
        if mode in CUDA_GRAPH_MODES and offload != "none":
            raise InvalidSetting(
                f"compile {mode!r} records CUDA graphs, which replay fixed weight addresses; "
                f"offload {offload!r} moves the weights between calls: not together"
            )
        pipe = self._build_random(dtype, vae_dtype) if self.preset is not None else self._read(dtype, vae_dtype)
        if hasattr(pipe, "set_progress_bar_config"):
            pipe.set_progress_bar_config(disable=True)
        denoisers = _denoisers(pipe)
        if backend is not None:
            for denoiser in denoisers:
                denoiser.set_attention_backend(str(backend))
        place(pipe, offload, self.device)
        for denoiser in denoisers:
            compile_transformer(denoiser, mode, self.compile_scope)
        self.pipe, self._applied = pipe, {"loaded_scheduler": getattr(pipe, "scheduler", None)}
        self._compile, self._compiled_shapes, self._backend = mode, set(), backend

    def _build_random(self, dtype: Any, vae_dtype: Any) -> Any:
        from diffusers import WanPipeline

        preset = self.preset
        assert preset is not None
        experts = [build_transformer(preset, self.device, dtype, self.seed + index) for index in range(preset.experts)]
        vae = build_vae(preset, self.device, vae_dtype, self.seed + 100)
        return WanPipeline(
            tokenizer=None,
            text_encoder=None,
            vae=vae,
            scheduler=make_scheduler("unipc", preset.flow_shift),
            transformer=experts[0],
            transformer_2=experts[1] if len(experts) > 1 else None,
            boundary_ratio=preset.boundary_ratio,
        )

    def _read(self, dtype: Any, vae_dtype: Any) -> Any:
        pipeline_type = import_named(self.pipeline_class)
        root = Path(str(self.model_path))
        extra: dict[str, Any] = {}
        if not (root / "text_encoder").is_dir() and (root / "model_index.json").is_file():
            extra = {"text_encoder": None, "tokenizer": None}  # seeded embeddings instead
        dtypes = {_dtype_keyword(): {"default": dtype, "vae": vae_dtype}}  # per component: the VAE its own
        pipe = pipeline_type.from_pretrained(str(root), local_files_only=True, **dtypes, **extra)
        if is_wan(pipe) and getattr(pipe, "text_encoder", None) is not None:
            self._prompts.encoder = (pipe.tokenizer, pipe.text_encoder)  # kept off the pipeline, on the CPU
            pipe.register_modules(text_encoder=None, tokenizer=None)
        return pipe

    def unload(self) -> None:
        """Drop the pipeline (and the device memory it held)."""
        self.pipe, self._applied = None, {}
        self._prompts.clear()
        gc.collect()
        self._empty_device_cache()

    # -- run ---------------------------------------------------------------------------------------------
    def run(self, params: Mapping[str, Any], inputs: Mapping[str, Any]) -> WorkloadOutput:
        """Generate ``batch_size`` videos for ``inputs['prompt']`` with these settings (module docs)."""
        import torch

        if self.pipe is None:
            raise RuntimeError("run() before load()")
        self._spans.begin()
        frames, height, width = int(params["num_frames"]), int(params["height"]), int(params["width"])
        self._check_shape(frames, height, width)
        batch = int(params.get("batch_size", params.get("num_videos_per_prompt", 1)))
        if batch < 1:
            raise InvalidSetting(f"batch_size must be >= 1 (got {batch})")
        guidance = float(params.get("guidance_scale", 5.0))
        call: dict[str, Any] = {
            "num_frames": frames,
            "height": height,
            "width": width,
            "num_inference_steps": int(params["num_inference_steps"]),
            "guidance_scale": guidance,
            "output_type": "np",
        }
        if call["num_inference_steps"] < 1:
            raise InvalidSetting(f"num_inference_steps must be >= 1 (got {call['num_inference_steps']})")
        if "guidance_scale_2" in params:
            if getattr(self.pipe, "transformer_2", None) is None:
                raise InvalidSetting("guidance_scale_2 is for the low-noise expert of a two-expert (Wan2.2 A14B) model")
            call["guidance_scale_2"] = float(params["guidance_scale_2"])
        clock = self._clock = self._clock or PipelineClock(device_cuda(self.device))
        text_started = time.perf_counter()
        call.update(self._prompts.call_text(self.pipe, inputs, batch))
        clock.text(host_seconds(text_started))
        apply_scheduler_and_vae(self.pipe, params, self._applied, self.preset)
        backend = params.get("attention_backend")
        if backend is not None and backend != self._backend:  # not in reload_on: switched on the loaded model
            switch_attention_backend(_denoisers(self.pipe), str(backend), self.device, self._compile != "none")
            self._backend = backend
        self._apply_cache(CacheChoice.from_params(params), call, guidance > 1.0, calibration_key(params))
        generator = torch.Generator(device="cpu").manual_seed(self.seed)
        self._spans.mark("prepare")
        result = clock.call(self.pipe, 2 if guidance > 1.0 else 1, **call, generator=generator)  # ends in a host copy
        self._spans.mark("model")
        video = np.asarray(result.frames)
        if video.ndim == 4:
            video = video[None]
        video = (np.clip(video, 0.0, 1.0) * 255).round().astype(np.uint8)
        self._spans.mark("postprocess")
        self._compiled_shapes.add(shape_key(params))
        return WorkloadOutput(
            video=video,
            items=video.shape[0],
            counters={
                "frames": float(video.shape[1]),
                "steps": float(call["num_inference_steps"]),
                "cfg": float(guidance > 1.0),
            },
        )

    knows_warmup = True  # warmup_calls is exact: measurement.warmup auto skips a warm setting's warm-up

    def warmup_calls(self, params: Mapping[str, Any]) -> int:
        """Untimed calls this setting needs in this process before its timings mean anything (exact,
        :func:`.wan.warmup.warmup_calls`): a shape new to the load 1 (3 with CUDA graphs), a MagCache
        calibration 1, anything else none. So compiling and calibrating count as start-up, never latency."""
        return warmup_calls(params, self._compile, self._compiled_shapes, self._calibrating(params))

    def warmup_settings(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """A cheaper warm-up call for ``params`` -- one denoising step, the same shapes, text and decode -- or
        None where only the call itself warms (compiled, calibrating, two experts): :func:`.wan.warmup.light_warmup`."""
        if not self.light_warmup:
            return None
        experts = len(_denoisers(self.pipe)) if self.pipe is not None else 1
        return light_warmup(params, self._compile, self._calibrating(params), experts)

    def _calibrating(self, params: Mapping[str, Any]) -> bool:
        return needs_calibration(params, bool(self.mag_ratios), self._calibrated)

    def call_spans(self) -> dict[str, float]:
        """The last call's seconds: ``prepare`` (text, scheduler, cache hooks, generator), ``model`` (the pipeline
        call, decode and its host copy included) and ``postprocess`` (to uint8) -- :mod:`tuner.evaluators.runtime.spans`."""
        return self._spans.seconds()

    def call_structure(self) -> dict[str, Any] | None:
        """The last call's structure (:mod:`.call_clocks`): ``text`` (the prompt embeddings: UMT5 on the CPU at a
        prompt's first call, else a cache lookup, ~0; a non-Wan pipeline encodes its prompt strings inside the call,
        in ``setup``), ``setup``, each denoising step (``steps``; 1 + CFG denoiser
        passes each: ``passes_per_step``), ``denoise`` (their sum) and ``decode`` -- all inside ``model`` but
        ``text`` (inside ``prepare``). CUDA events on a CUDA device (no synchronisation in the call), else the
        host clock."""
        return self._clock.report() if self._clock is not None else None

    def _check_shape(self, frames: int, height: int, width: int) -> None:
        temporal = int(getattr(self.pipe, "vae_scale_factor_temporal", 4))
        spatial = int(getattr(self.pipe, "vae_scale_factor_spatial", 8))
        denoiser = getattr(self.pipe, "transformer", None)
        patch = tuple(getattr(getattr(denoiser, "config", None), "patch_size", None) or (1, 2, 2))
        multiple = spatial * int(patch[1])
        if (
            frames < 1
            or (frames - 1) % temporal
            or height < multiple
            or width < multiple
            or height % multiple
            or width % multiple
        ):
            raise InvalidSetting(
                f"num_frames must be {temporal}k+1 and height/width positive multiples of {multiple} "
                f"(got {frames}, {height}x{width}); the pipeline would round them"
            )

    def _apply_cache(self, choice: CacheChoice, call: Mapping[str, Any], cfg: bool, calibration: Any) -> None:
        """Swap the denoisers' cache hooks when the method or its knob (or MagCache's steps) changed;
        ``calibration``: the setting's MagCache calibration key (:func:`.wan.warmup.calibration_key`)."""
        denoisers = _denoisers(self.pipe)
        key = (choice, call["num_inference_steps"] if choice.method == "magcache" else None)
        if key == self._applied.get("cache", ((CacheChoice(), None))):
            return
        if choice.method != "none" and not all(hasattr(d, "enable_cache") for d in denoisers):
            raise InvalidSetting(f"cache {choice.method!r}: this pipeline's denoiser has no enable_cache")
        for denoiser in denoisers:
            if getattr(denoiser, "is_cache_enabled", False):
                denoiser.disable_cache()
        self._applied["cache"] = (CacheChoice(), None)
        ratios = None
        if choice.method == "magcache":
            if len(denoisers) > 1:
                raise InvalidSetting("magcache counts steps per denoiser: not with two experts (Wan2.2 A14B)")
            ratios = self.mag_ratios or self._calibration(call, cfg, calibration)
        for denoiser in denoisers if choice.method != "none" else []:
            config = cache_config(choice, lambda: self.pipe.current_timestep, int(call["num_inference_steps"]), ratios)
            try:
                denoiser.enable_cache(config)
            except ValueError as error:
                raise InvalidSetting(f"cache {choice.method!r}: {error}") from None
        self._applied["cache"] = key

    def _calibration(self, call: Mapping[str, Any], cfg: bool, key: Any) -> list[float]:
        """MagCache ratios of this network for the call's settings, measured once per setting (``key``)."""
        import torch

        if key not in self._calibrated:
            self._calibrated[key] = calibrate_mag_ratios(
                self.pipe.transformer,
                lambda: self.pipe(**call, generator=torch.Generator("cpu").manual_seed(self.seed)),
                cfg,
            )
        return self._calibrated[key]

    def synchronize(self) -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    @staticmethod
    def _empty_device_cache() -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def _dtype_keyword() -> str:
    """``dtype`` where diffusers has it (0.42 deprecates ``torch_dtype``), else ``torch_dtype``."""
    try:
        from diffusers.utils.deprecation_utils import _resolve_dtype  # noqa: F401
    except ImportError:
        return "torch_dtype"
    return "dtype"


def _denoisers(pipe: Any) -> list[Any]:
    """The pipeline's transformer(s) (Wan2.2: both experts), else its UNet; those present."""
    found = [getattr(pipe, name, None) for name in ("transformer", "transformer_2")]
    found = [module for module in found if module is not None] or [getattr(pipe, "unet", None)]
    return [module for module in found if module is not None]


def make_video_pipeline(**kwargs: Any) -> DiffusersVideoModel:
    """The factory named in ``video_gen.yaml``, ``wan_t2v_diffusers.yaml`` and ``wan_tiny_cpu.yaml``."""
    return DiffusersVideoModel(**kwargs)


__all__ = ["DiffusersVideoModel", "make_video_pipeline"]
