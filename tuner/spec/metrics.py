"""The metric vocabulary of a spec: every name an objective, constraint or
``report`` entry may use, with its unit and direction.

Two kinds: :data:`MEASURED_METRICS` are measured for every trial by the
worker itself (latency, memory, throughput; ``count_<name>`` for every counter
a workload reports); :data:`QUALITY_FAMILIES` are computed by evaluator
families (``tuner.evaluators.registry`` maps each family name to the function that
computes it). Adapters add their own names (``declared_metrics``). This table
is data only: it imports nothing heavy, so validating a spec never loads an
evaluator.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.results import Direction

MEASURED_METRICS: dict[str, tuple[str, Direction]] = {
    "latency_p50_s": ("s", "minimize"),
    "latency_p95_s": ("s", "minimize"),
    "latency_mean_s": ("s", "minimize"),
    "latency_cv": ("1", "minimize"),
    "throughput_items_per_s": ("items/s", "maximize"),
    "peak_vram_gb": ("GB", "minimize"),
    "peak_vram_reserved_gb": ("GB", "minimize"),
    "peak_vram_nvml_gb": ("GB", "minimize"),
    "peak_vram_device_gb": ("GB", "minimize"),  # what decides an OOM: max(NVML, reserved) (tuner.evaluators.memory)
    "peak_rss_gb": ("GB", "minimize"),
    "trial_disk_gb": ("GB", "minimize"),  # what the trial left in its directory (du-style, 1e9 bytes)
}


@dataclass(frozen=True)
class MetricFamily:
    """The metrics one evaluator family reports: name -> (unit, direction)."""

    name: str
    metrics: dict[str, tuple[str, Direction]]
    needs_reference: bool = True


QUALITY_FAMILIES: tuple[MetricFamily, ...] = (
    MetricFamily("video", {
        "psnr_db": ("dB", "maximize"), "ssim": ("1", "maximize"),
        "psnr_mouth_db": ("dB", "maximize"), "ssim_mouth": ("1", "maximize")}),
    MetricFamily("perceptual", {"stlpips_alex": ("1", "minimize"), "lpips_alex": ("1", "minimize")}),
    MetricFamily("flicker", {
        "flicker_mae": ("levels", "minimize"), "flicker_score": ("1", "maximize"),
        "flicker_ratio": ("1", "minimize")}),
    MetricFamily("warping", {"warping_error": ("1", "minimize"), "warping_error_ratio": ("1", "minimize")}),
    MetricFamily("seam", {"seam_score": ("1", "minimize"), "seam_score_ratio": ("1", "minimize")}),
    MetricFamily("lipsync", {
        "lipsync_lag_frames": ("frames", "minimize"), "lipsync_abs_lag_frames": ("frames", "minimize"),
        "lipsync_peak_corr": ("1", "maximize"), "lipsync_margin": ("1", "maximize"),
        "lipsync_onset_lag_frames": ("frames", "minimize"), "lipsync_onset_peak_corr": ("1", "maximize"),
        "lipsync_onset_margin": ("1", "maximize")},
        needs_reference=False),
    MetricFamily("text", {
        "text_exact_match": ("1", "maximize"), "text_f1": ("1", "maximize"),
        "text_rouge_l": ("1", "maximize"), "text_chrf": ("score", "maximize"),
        "text_bleu": ("score", "maximize"), "text_gt_exact_match": ("1", "maximize"),
        "text_gt_f1": ("1", "maximize"), "text_gt_rouge_l": ("1", "maximize"),
        "text_gt_chrf": ("score", "maximize"), "text_gt_bleu": ("score", "maximize"),
        "text_truncated_fraction": ("1", "minimize")}),
)

QUALITY_METRIC_NAMES: frozenset[str] = frozenset(
    name for family in QUALITY_FAMILIES for name in family.metrics)


def known_metric(name: str) -> bool:
    """True when some part of the worker can produce ``name``."""
    return name in MEASURED_METRICS or name in QUALITY_METRIC_NAMES or name.startswith("count_")
