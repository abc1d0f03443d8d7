"""The per-call settings of a loaded diffusers video pipeline that change without a reload: its scheduler and flow
shift (Wan: flow matching), and its VAE's tiling and slicing.

:func:`apply_scheduler_and_vae` changes only what differs from what it last applied (kept in ``applied``, the
model's record of applied settings: ``loaded_scheduler``, the scheduler the pipeline was loaded with, is where
``scheduler: null`` returns to). A scheduler or flow shift on a non-Wan pipeline, an unknown scheduler or a flow
shift <= 0 raises ``InvalidSetting``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.adapters.factories.wan.presets import SCHEDULERS, WanPreset, make_scheduler
from tuner.adapters.factories.wan.text import is_wan
from tuner.workloads.base import InvalidSetting


def apply_scheduler_and_vae(
    pipe: Any, params: Mapping[str, Any], applied: dict[str, Any], preset: WanPreset | None
) -> None:
    """Set ``pipe``'s scheduler / flow shift and VAE tiling / slicing from ``params`` (``scheduler``, ``flow_shift``,
    ``vae_tiling``, ``vae_slicing``) where they differ from ``applied``; ``preset``: a random-weights preset, whose
    VAE tile (size, stride in pixels) a tiling uses (None: diffusers' default tile)."""
    wanted = (params.get("scheduler"), params.get("flow_shift"))
    if wanted != applied.get("scheduler", (None, None)):
        if wanted == (None, None):  # back to the loaded scheduler
            pipe.scheduler = applied["loaded_scheduler"]
        elif not is_wan(pipe):
            raise InvalidSetting("scheduler / flow_shift are offered for Wan pipelines (flow matching) only")
        else:
            name = str(wanted[0] or "unipc")
            if name not in SCHEDULERS:
                raise InvalidSetting(f"scheduler must be one of {', '.join(SCHEDULERS)}, not {name!r}")
            loaded = applied["loaded_scheduler"]
            shift = float(
                wanted[1] if wanted[1] is not None else loaded.config.get("flow_shift", loaded.config.get("shift", 3.0))
            )
            if shift <= 0:
                raise InvalidSetting(f"flow_shift must be > 0 (got {shift})")
            pipe.scheduler = make_scheduler(name, shift)
        applied["scheduler"] = wanted
    vae = getattr(pipe, "vae", None)
    tiling, slicing = bool(params.get("vae_tiling", False)), bool(params.get("vae_slicing", False))
    if vae is None or (tiling, slicing) == applied.get("vae"):
        return
    if tiling:
        tile = preset.vae_tile if preset is not None else None
        vae.enable_tiling(
            **(
                {}
                if tile is None
                else {
                    "tile_sample_min_height": tile[0],
                    "tile_sample_min_width": tile[0],
                    "tile_sample_stride_height": tile[1],
                    "tile_sample_stride_width": tile[1],
                }
            )
        )
    elif hasattr(vae, "disable_tiling"):
        vae.disable_tiling()
    if slicing and hasattr(vae, "enable_slicing"):
        vae.enable_slicing()
    elif hasattr(vae, "disable_slicing"):
        vae.disable_slicing()
    applied["vae"] = (tiling, slicing)


__all__ = ["apply_scheduler_and_vae"]
