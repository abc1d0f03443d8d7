"""Wan architectures by name, and their components built with seeded random weights (no download).

A preset is what the published checkpoint's config files say, so a network built from it runs the
same kernels at the same sizes as the real one; only the weights are random. Sources:

* ``wan2.1-t2v-1.3b`` -- ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers`` ``transformer/config.json``
  (``WanTransformer3DModel``: 12 heads x 128, ffn 8960, 30 layers, text_dim 4096, freq_dim 256,
  in/out 16 channels, patch (1, 2, 2), qk_norm ``rms_norm_across_heads``, cross_attn_norm, eps 1e-6,
  rope_max_seq_len 1024); 1,418,996,800 parameters (counted here on the meta device).
* ``wan2.1-t2v-14b`` -- ``Wan-AI/Wan2.1-T2V-14B-Diffusers``: the same with 40 heads x 128,
  ffn 13824, 40 layers (Wan's ``wan/configs/wan_t2v_14B.py``: dim 5120).
* ``wan2.2-t2v-a14b`` -- Wan2.2 T2V-A14B, two experts of the 14B size (``transformer`` for the
  high-noise steps, ``transformer_2`` for the low-noise ones), ``boundary_ratio`` 0.875, flow shift
  12.0 (Wan2.2's ``wan/configs/wan_t2v_A14B.py``: ``boundary = 0.875``, ``sample_shift = 12.0``);
  diffusers 0.42's ``WanPipeline`` takes ``transformer_2`` and ``boundary_ratio``.
* VAE: ``AutoencoderKLWan()``'s default config is the Wan2.1 VAE (z_dim 16, 4x temporal and 8x
  spatial compression), used by all three. Scheduler: the checkpoints' ``scheduler_config.json``,
  ``UniPCMultistepScheduler`` with ``prediction_type="flow_prediction"``, ``use_flow_sigmas=True``,
  ``flow_shift`` 3.0 (diffusers' Wan docs: 3.0 is Wan's default; 5.0 suits 720p).
* ``tiny`` -- not a checkpoint: 4 heads x 64, ffn 1024, 4 layers, text_dim 64, and a VAE of base
  width 4 with the Wan VAE's compression (4x temporal, 8x spatial). A trial of a few steps at 64x64
  takes about a second on one CPU thread, most of it in the denoising steps.

Memory: the transformer is built on the ``meta`` device (no storage), cast to the target dtype
there (the ``_keep_in_fp32_modules`` stay fp32, as ``from_pretrained`` keeps them), then given
storage on the target device (``to_empty``) and filled parameter by parameter from a seeded
generator on that device, through one fp32 temporary at a time. So the 14B preset in bf16 needs
its 28 GB on the GPU plus the largest parameter (283 MB) in fp32, and no host memory. The fill
follows PyTorch's default initialisation (Linear / Conv: U(+-1/sqrt(fan_in)); norms: 1 and 0;
``scale_shift_table``: N(0, 1)/sqrt(dim), as Wan's constructor draws it), in a fixed parameter
order: the same seed gives the same weights (rounded to the dtype) in every precision on a device
type. The non-persistent rotary tables are rebuilt on the device.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

_TRANSFORMER_COMMON: dict[str, Any] = {
    "patch_size": (1, 2, 2),
    "in_channels": 16,
    "out_channels": 16,
    "freq_dim": 256,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "image_dim": None,
    "added_kv_proj_dim": None,
    "rope_max_seq_len": 1024,
    "pos_embed_seq_len": None,
}


@dataclass(frozen=True)
class WanPreset:
    """One architecture: the transformer config (one per expert), VAE config, flow shift, text shape."""

    name: str
    transformer: Mapping[str, Any]
    experts: int = 1
    boundary_ratio: float | None = None
    vae: Mapping[str, Any] = field(default_factory=dict)  # AutoencoderKLWan kwargs; {} = its default (Wan2.1 VAE)
    flow_shift: float = 3.0
    text_length: int = 512  # tokens of the UMT5 prompt embedding Wan is trained with
    vae_tile: tuple[int, int] | None = None  # (min, stride) pixels of VAE tiles; None = diffusers' 256 / 192

    @property
    def text_dim(self) -> int:
        return int(self.transformer["text_dim"])

    def transformer_config(self) -> dict[str, Any]:
        return {**_TRANSFORMER_COMMON, **self.transformer}


PRESETS: dict[str, WanPreset] = {
    preset.name: preset
    for preset in (
        WanPreset(
            "tiny",
            {"num_attention_heads": 4, "attention_head_dim": 64, "ffn_dim": 1024, "num_layers": 4, "text_dim": 64},
            vae={
                "base_dim": 4,
                "z_dim": 16,
                "dim_mult": [1, 1, 2, 2],
                "num_res_blocks": 1,
                "temperal_downsample": [False, True, True],
            },
            vae_tile=(32, 24),
        ),  # tiles smaller than the tiny sizes, so tiling does something here
        WanPreset(
            "wan2.1-t2v-1.3b",
            {"num_attention_heads": 12, "attention_head_dim": 128, "ffn_dim": 8960, "num_layers": 30, "text_dim": 4096},
        ),
        WanPreset(
            "wan2.1-t2v-14b",
            {
                "num_attention_heads": 40,
                "attention_head_dim": 128,
                "ffn_dim": 13824,
                "num_layers": 40,
                "text_dim": 4096,
            },
        ),
        WanPreset(
            "wan2.2-t2v-a14b",
            {
                "num_attention_heads": 40,
                "attention_head_dim": 128,
                "ffn_dim": 13824,
                "num_layers": 40,
                "text_dim": 4096,
            },
            experts=2,
            boundary_ratio=0.875,
            flow_shift=12.0,
        ),
    )
}
"""Architecture name (the factory's ``architecture`` kwarg) -> preset."""

SCHEDULERS = ("unipc", "dpm++", "euler")
"""``scheduler`` parameter values: flow-matching UniPC (Wan's), DPM-Solver++ (2nd order), flow-match Euler."""


def preset_named(name: str) -> WanPreset:
    """The preset called ``name``; ValueError listing the known ones otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown architecture {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def parameter_count(preset: WanPreset) -> int:
    """Parameters of the preset's denoiser(s), counted on the meta device (no memory)."""
    from diffusers import WanTransformer3DModel

    with torch.device("meta"):
        model = WanTransformer3DModel(**preset.transformer_config())
    return preset.experts * sum(p.numel() for p in model.parameters())


def _is_norm(module: torch.nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def _fill(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Seeded PyTorch-default initialisation of every parameter, one fp32 temporary at a time."""
    with torch.no_grad():
        for _, module in model.named_modules():
            weight = getattr(module, "weight", None)
            fan_in = math.prod(weight.shape[1:]) if isinstance(weight, torch.Tensor) and weight.ndim >= 2 else 0
            for name, param in module.named_parameters(recurse=False):
                values = torch.empty(param.shape, dtype=torch.float32, device=param.device)
                if name == "scale_shift_table":
                    values.normal_(generator=generator).div_(param.shape[-1] ** 0.5)
                elif _is_norm(module):
                    values.fill_(0.0 if name in ("bias", "beta") else 1.0)
                elif fan_in:
                    bound = 1.0 / math.sqrt(fan_in)
                    values.uniform_(-bound, bound, generator=generator)
                else:
                    values.normal_(generator=generator).mul_(0.02)
                param.copy_(values)
                del values


def _materialize(
    model: torch.nn.Module, device: torch.device, dtype: torch.dtype, seed: int, keep_fp32: tuple[str, ...] = ()
) -> None:
    """Cast the meta model (``keep_fp32`` parts stay fp32), give it storage on ``device``, fill it."""
    torch.nn.Module.to(model, dtype)  # ModelMixin.to warns about its fp32 modules: kept below
    for name, param in model.named_parameters():
        if any(part in keep_fp32 for part in name.split(".")):
            param.data = param.data.float()
    model.to_empty(device=device)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    _fill(model, generator)


def build_transformer(preset: WanPreset, device: str | torch.device, dtype: torch.dtype, seed: int) -> Any:
    """A ``WanTransformer3DModel`` of the preset with seeded random weights, in ``dtype`` on ``device``."""
    from diffusers import WanTransformer3DModel
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    config = preset.transformer_config()
    with torch.device("meta"):
        model = WanTransformer3DModel(**config)
    target = torch.device(device)
    _materialize(model, target, dtype, seed, tuple(WanTransformer3DModel._keep_in_fp32_modules))
    with torch.device(target):  # the rotary tables are non-persistent buffers: computed, not drawn
        model.rope = WanRotaryPosEmbed(config["attention_head_dim"], config["patch_size"], config["rope_max_seq_len"])
    return model.eval().requires_grad_(False)


def build_vae(preset: WanPreset, device: str | torch.device, dtype: torch.dtype, seed: int) -> Any:
    """An ``AutoencoderKLWan`` (the preset's config, else the default = Wan2.1 VAE), seeded random weights."""
    from diffusers import AutoencoderKLWan

    with torch.device("meta"):
        vae = AutoencoderKLWan(**dict(preset.vae))
    _materialize(vae, torch.device(device), dtype, seed)
    return vae.eval().requires_grad_(False)


def make_scheduler(name: str, flow_shift: float) -> Any:
    """A flow-matching scheduler from a config dict: ``unipc`` (Wan's), ``dpm++`` or ``euler``."""
    from diffusers import DPMSolverMultistepScheduler, FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    if name == "unipc":  # the published Wan scheduler_config.json: solver_order 2, bh2, flow sigmas
        return UniPCMultistepScheduler(
            num_train_timesteps=1000,
            prediction_type="flow_prediction",
            use_flow_sigmas=True,
            flow_shift=flow_shift,
            solver_order=2,
            solver_type="bh2",
        )
    if name == "dpm++":
        return DPMSolverMultistepScheduler(
            num_train_timesteps=1000,
            prediction_type="flow_prediction",
            use_flow_sigmas=True,
            flow_shift=flow_shift,
            algorithm_type="dpmsolver++",
            solver_order=2,
        )
    if name == "euler":
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=flow_shift)
    raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, not {name!r}")


def random_text_embedding(text: str, length: int, dim: int, seed: int) -> torch.Tensor:
    """A seeded stand-in for a prompt's text-encoder output, shape (1, length, dim), fp32 on the CPU.

    Drawn from N(0, 1) with a generator seeded by ``seed`` and the text's CRC-32, so each prompt (and
    the negative prompt) has its own fixed embedding."""
    generator = torch.Generator(device="cpu").manual_seed(seed * 2**32 + zlib.crc32(text.encode("utf-8")))
    return torch.randn((1, length, dim), generator=generator)
