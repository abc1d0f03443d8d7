"""Metrics by name: which part of the worker produces each one.

A spec uses a metric simply by naming it in an objective or a constraint.
:data:`MEASURED_METRICS` are measured for every trial (latency, memory,
throughput; ``count_<name>`` for every counter a workload reports).
Quality metrics come from evaluator *families* (:data:`FAMILIES`): each family
is one function, imported lazily (the coordinator never imports torch or
OpenCV), that computes all of its metrics in one pass. A trial runs only the
families whose metrics its spec uses, and the time each family takes is
reported as ``eval_<family>_s`` — never charged to the candidate's latency.

Families that compare with the reference report every metric unavailable when
the study has no reference output; the lip-sync proxy needs only the
candidate's own video and audio.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any, Iterable

from evaluators.base import EvalContext, QualityFunction
from tuner.results import Direction, Metric

MEASURED_METRICS: dict[str, tuple[str, Direction]] = {
    "latency_p50_s": ("s", "minimize"),
    "latency_p95_s": ("s", "minimize"),
    "latency_mean_s": ("s", "minimize"),
    "latency_cv": ("1", "minimize"),
    "throughput_items_per_s": ("items/s", "maximize"),
    "peak_vram_gb": ("GB", "minimize"),
    "peak_vram_reserved_gb": ("GB", "minimize"),
    "peak_vram_nvml_gb": ("GB", "minimize"),
    "peak_rss_gb": ("GB", "minimize"),
}


@dataclass(frozen=True)
class Family:
    """One evaluator function (``module:function``) and the metrics it returns."""

    name: str
    function_path: str
    metrics: dict[str, tuple[str, Direction]]
    needs_reference: bool = True
    warm_up: str | None = None

    def load(self) -> QualityFunction:
        module, _, function = self.function_path.partition(":")
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


FAMILIES: tuple[Family, ...] = (
    Family("video", "evaluators.video:video_fidelity_metrics", {
        "psnr_db": ("dB", "maximize"), "ssim": ("1", "maximize"),
        "psnr_mouth_db": ("dB", "maximize"), "ssim_mouth": ("1", "maximize")}),
    Family("perceptual", "evaluators.perceptual:perceptual_metrics", {
        "stlpips_alex": ("1", "minimize"), "lpips_alex": ("1", "minimize")},
        warm_up="evaluators.perceptual:warm_up"),
    Family("flicker", "evaluators.temporal:flicker_metrics", {
        "flicker_mae": ("levels", "minimize"), "flicker_score": ("1", "maximize"),
        "flicker_ratio": ("1", "minimize")}),
    Family("warping", "evaluators.temporal:warping_metrics", {
        "warping_error": ("1", "minimize"), "warping_error_ratio": ("1", "minimize")}),
    Family("seam", "evaluators.temporal:seam_metrics", {
        "seam_score": ("1", "minimize"), "seam_score_ratio": ("1", "minimize")}),
    Family("lipsync", "evaluators.lipsync:lipsync_metrics", {
        "lipsync_lag_frames": ("frames", "minimize"), "lipsync_abs_lag_frames": ("frames", "minimize"),
        "lipsync_peak_corr": ("1", "maximize"), "lipsync_margin": ("1", "maximize"),
        "lipsync_onset_lag_frames": ("frames", "minimize"), "lipsync_onset_peak_corr": ("1", "maximize"),
        "lipsync_onset_margin": ("1", "maximize")},
        needs_reference=False),
    Family("text", "evaluators.text:text_metrics", {
        "text_exact_match": ("1", "maximize"), "text_f1": ("1", "maximize"),
        "text_rouge_l": ("1", "maximize"), "text_chrf": ("score", "maximize"),
        "text_bleu": ("score", "maximize"), "text_gt_exact_match": ("1", "maximize"),
        "text_gt_f1": ("1", "maximize"), "text_gt_rouge_l": ("1", "maximize"),
        "text_gt_chrf": ("score", "maximize"), "text_gt_bleu": ("score", "maximize"),
        "text_truncated_fraction": ("1", "minimize")}),
)

QUALITY_METRICS: dict[str, tuple[str, Direction, Family]] = {
    name: (unit, direction, family)
    for family in FAMILIES for name, (unit, direction) in family.metrics.items()
}


def warm_ups(names: Iterable[str]) -> list[str]:
    """``module:function`` warm-ups of the families that compute any of ``names``."""
    wanted = set(names)
    return [f.warm_up for f in FAMILIES if f.warm_up and wanted & set(f.metrics)]


def known_metric(name: str) -> bool:
    """True when some part of the worker can produce ``name``."""
    return name in MEASURED_METRICS or name in QUALITY_METRICS or name.startswith("count_")


def metric_direction(name: str) -> Direction | None:
    if name in MEASURED_METRICS:
        return MEASURED_METRICS[name][1]
    if name in QUALITY_METRICS:
        return QUALITY_METRICS[name][1]
    return None


def evaluate_quality(names: Iterable[str], output: Any, reference: Any | None,
                     context: EvalContext) -> list[Metric]:
    """Compute the named quality metrics of ``output`` (against ``reference``).

    Returns the requested metrics plus ``eval_<family>_s`` (seconds) for each
    family that ran. A family that raises reports its metrics unavailable
    with the error as the reason.
    """
    wanted = set(names)
    metrics: list[Metric] = []
    for family in FAMILIES:
        requested = sorted(wanted & set(family.metrics))
        if not requested:
            continue
        if family.needs_reference and reference is None:
            metrics.extend(Metric.unavailable(n, *family.metrics[n], "no reference output in this study")
                           for n in requested)
            continue
        started = time.perf_counter()
        try:
            produced = {m.name: m for m in family.load()(output, reference, context)}
        except Exception as error:  # noqa: BLE001 - an evaluator failure is an unavailable metric
            produced = {}
            failure = f"{family.name} evaluator failed: {type(error).__name__}: {error}"
        else:
            failure = f"the {family.name} evaluator did not report it"
        for name in requested:
            metrics.append(produced.get(name) or Metric.unavailable(name, *family.metrics[name], failure))
        metrics.append(Metric(f"eval_{family.name}_s", time.perf_counter() - started, "s", "minimize"))
    return metrics
