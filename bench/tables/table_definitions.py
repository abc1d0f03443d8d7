"""The exhaustive tables this folder holds: which spaces are measured (each spec and the parameters held
fixed, the quality and cost-structure metrics recorded), every setting of each, and where the table of a
hardware type lives. :mod:`build_tables` measures them; :mod:`remeasure` measures rows again."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TABLE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class TableDefinition:
    """A space to measure: the spec it comes from and the parameters held fixed."""

    spec_path: Path
    fixed: dict[str, Any] = field(default_factory=dict)
    quality: tuple[str, ...] = ()
    remeasure_below_s: float = 0.5
    inputs: dict[str, Any] = field(default_factory=dict)
    structure: tuple[str, ...] = ()
    """A call's cost-structure metrics recorded per setting (medians, seconds: tuner.evaluators.runtime.structure)."""


TABLES: dict[str, TableDefinition] = {
    "avatar_dit": TableDefinition(
        ROOT / "search_spaces" / "avatar_demo.yaml", quality=("stlpips_alex", "psnr_db", "ssim")
    ),
    "avqa": TableDefinition(
        ROOT / "search_spaces" / "avqa_demo.yaml",
        fixed={"audio_sample_rate": 16000, "use_cache": True},
        quality=("text_gt_exact_match", "text_exact_match"),
        remeasure_below_s=0.15,
    ),
    "avatar_dit_proxy": TableDefinition(
        ROOT / "search_spaces" / "avatar_demo.yaml",
        quality=("stlpips_alex", "psnr_db", "ssim"),
        inputs={"audio_seconds": 1.0},
    ),
    "wan_tiny": TableDefinition(
        TABLE_DIR / "wan_tiny_grid.yaml",
        quality=("psnr_db", "ssim"),
        structure=("text_s", "denoise_s", "denoise_step_s", "decode_s"),
    ),
    "omni_tiny": TableDefinition(
        ROOT / "search_spaces" / "av_omni_tiny_cpu.yaml",
        fixed={"batch_size": 1, "attn_implementation": "sdpa", "use_cache": True},
        quality=("text_f1", "text_exact_match"),
        structure=("prefill_s", "decode_token_s"),
        remeasure_below_s=0.3,
    ),
}


def hardware_name(threads: int, onednn: bool = True) -> str:
    """The hardware type's name: ``cpu1t``, ``cpu2t``; ``cpu1t-nodnn`` without oneDNN (see module docs)."""
    return f"cpu{threads}t" + ("" if onednn else "-nodnn")


def table_path(table: str, threads: int, onednn: bool = True) -> Path:
    """Where the table of ``table`` measured on that hardware type lives."""
    return TABLE_DIR / f"{table}.{hardware_name(threads, onednn)}.csv"


def settings_of(definition: TableDefinition) -> tuple[list[str], list[dict[str, Any]]]:
    """The parameter names and every setting of the table's space (fixed parameters held)."""
    from tuner.spec.loading import load_spec
    from tuner.spec.space import grid

    spec = load_spec(definition.spec_path)
    values = grid(spec)
    for name, value in definition.fixed.items():
        values[name] = [value]
    names = list(values)
    return names, [dict(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names))]
