"""The metric vocabulary of a spec: every name an objective, constraint or
``report`` entry may use, with its unit and direction.

Two kinds: :data:`MEASURED_METRICS` are measured for every trial by the
worker itself (latency, memory, throughput; ``count_<name>`` for every counter
a workload reports); :data:`QUALITY_FAMILIES` are computed by evaluator
families (``tuner.evaluators.registry`` maps each family name to the function that
computes it). Adapters add their own names (``declared_metrics``). This table
is data only: it imports nothing heavy, so validating a spec never loads an
evaluator.

The one lookup of a metric's unit and direction is here too:
:func:`catalogue_entry` (unit and direction from this table: the replay tables,
the lookup below) and :func:`unit_of` / :func:`objective_units`, which every
view (status, show, MLflow, plots, labels) calls. Precedence, deliberately:
**what a trial recorded** (the first stored record that has the metric) wins
over **the catalogue**, which wins over **the name's suffix** (``_s``, ``_gb``,
``_db``, ...). The storage is the source of truth and an adapter's metric
carries its declared unit only in the trials; the catalogue answers for a
metric no trial has recorded yet (an objective of an OOM-only study).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
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
    "gpu_util_mean_pct": ("%", "maximize"),  # NVML utilization of the trial's devices over the measurement
    "gpu_util_peak_pct": ("%", "maximize"),
    "gpu_sm_clock_mean_mhz": ("MHz", "maximize"),  # their mean SM clock: below boost under load is throttling
    "gpu_power_mean_w": ("W", "minimize"),  # their summed board power, mean over the measurement
    "energy_per_output_j": ("J", "minimize"),  # gpu_power_mean_w / throughput_items_per_s
    "bare_p50_s": ("s", "minimize"),  # measurement.bare_twin: the same call, nothing of the tuner around it
    "twin_ratio": ("1", "minimize"),  # latency_p50_s / bare_p50_s
    "prepare_s": ("s", "minimize"),  # a measured call's spans, medians (tuner.evaluators.runtime.spans)
    "model_s": ("s", "minimize"),  # the model's own work: what a bare timing of the model call measures
    "postprocess_s": ("s", "minimize"),  # the model's result to the returned output (host copy, uint8)
    "outside_spans_s": ("s", "minimize"),  # latency_p50_s less the spans: glue and the timing itself
    # a call's cost structure, medians (tuner.evaluators.runtime.structure): phases inside model_s, one step / token
    **dict.fromkeys(
        ("text_s", "denoise_s", "denoise_step_s", "decode_s", "prefill_s", "decode_token_s"), ("s", "minimize")
    ),
    "time_to_first_chunk_s": ("s", "minimize"),  # a chunked workload's (tuner.evaluators.runtime.streaming)
    "chunk_latency_p50_s": ("s", "minimize"),
    "chunk_latency_p95_s": ("s", "minimize"),
    "real_time_factor": ("1", "maximize"),  # seconds of output per second of compute
    "stall_count": ("count", "minimize"),  # chunks later than a viewer who started at the first one needs them
    "sustained_throughput_per_hour": ("items/h", "maximize"),  # measurement.sustained, at the knee over streams
    "sustained_latency_p50_s": ("s", "minimize"),
    "sustained_latency_p95_s": ("s", "minimize"),
    "sustained_streams": ("streams", "maximize"),  # the knee: more streams raise throughput < knee_gain
    "outputs_per_device_hour": ("1/h", "maximize"),  # throughput x 3600 / the slot's devices (tuner.spec.measure.price)
    "cost_per_output_usd": ("USD", "minimize"),  # the spec's device-hour price / outputs_per_device_hour
    "cost_per_1k_outputs_usd": ("USD", "minimize"),
}

STREAMING_METRICS = (
    "time_to_first_chunk_s",
    "chunk_latency_p50_s",
    "chunk_latency_p95_s",
    "real_time_factor",
    "stall_count",
)
"""The figures of a chunked call (:mod:`tuner.evaluators.runtime.streaming`); a command reports them from the
marker lines of its ``chunks`` block."""


@dataclass(frozen=True)
class MetricFamily:
    """The metrics one evaluator family reports: name -> (unit, direction)."""

    name: str
    metrics: dict[str, tuple[str, Direction]]
    needs_reference: bool = True
    reference_free: frozenset[str] = frozenset()
    """Of a family that needs a reference, the metrics computed from the trial's own output alone."""

    def needs_reference_for(self, name: str) -> bool:
        """Whether metric ``name`` of this family compares with the reference output."""
        return self.needs_reference and name not in self.reference_free


QUALITY_FAMILIES: tuple[MetricFamily, ...] = (
    MetricFamily(
        "video",
        {
            "psnr_db": ("dB", "maximize"),
            "ssim": ("1", "maximize"),
            "psnr_mouth_db": ("dB", "maximize"),
            "ssim_mouth": ("1", "maximize"),
        },
    ),
    MetricFamily("perceptual", {"stlpips_alex": ("1", "minimize"), "lpips_alex": ("1", "minimize")}),
    MetricFamily(
        "flicker",
        {"flicker_mae": ("levels", "minimize"), "flicker_score": ("1", "maximize"), "flicker_ratio": ("1", "minimize")},
        reference_free=frozenset({"flicker_mae", "flicker_score"}),
    ),
    MetricFamily(
        "warping",
        {"warping_error": ("1", "minimize"), "warping_error_ratio": ("1", "minimize")},
        reference_free=frozenset({"warping_error"}),
    ),
    MetricFamily(
        "seam",
        {"seam_score": ("1", "minimize"), "seam_score_ratio": ("1", "minimize")},
        reference_free=frozenset({"seam_score"}),
    ),
    MetricFamily(
        "lipsync",
        {
            "lipsync_lag_frames": ("frames", "minimize"),
            "lipsync_abs_lag_frames": ("frames", "minimize"),
            "lipsync_peak_corr": ("1", "maximize"),
            "lipsync_margin": ("1", "maximize"),
            "lipsync_onset_lag_frames": ("frames", "minimize"),
            "lipsync_onset_peak_corr": ("1", "maximize"),
            "lipsync_onset_margin": ("1", "maximize"),
        },
        needs_reference=False,
    ),
    MetricFamily(
        "text",
        {
            "text_exact_match": ("1", "maximize"),
            "text_f1": ("1", "maximize"),
            "text_rouge_l": ("1", "maximize"),
            "text_chrf": ("score", "maximize"),
            "text_bleu": ("score", "maximize"),
            "text_gt_exact_match": ("1", "maximize"),
            "text_gt_f1": ("1", "maximize"),
            "text_gt_rouge_l": ("1", "maximize"),
            "text_gt_chrf": ("score", "maximize"),
            "text_gt_bleu": ("score", "maximize"),
            "text_truncated_fraction": ("1", "minimize"),
        },
    ),
)

QUALITY_METRIC_NAMES: frozenset[str] = frozenset(name for family in QUALITY_FAMILIES for name in family.metrics)

NO_REFERENCE_METRICS: frozenset[str] = frozenset(
    name for family in QUALITY_FAMILIES for name in family.metrics if not family.needs_reference_for(name)
)
"""Quality metrics computed from a trial's own output alone (temporal stability, the lip-sync proxy)."""

COMPANION_METRICS: tuple[str, ...] = ("flicker_mae", "flicker_score", "warping_error")
"""No-reference temporal figures every trial of a study that compares videos with a reference reports beside
them (:func:`trial_quality_metrics`): the literature's reference-free check, and the only temporal figure where a
shape's reference could not run. ``seam_score`` joins them where the setting has a clip length (``infer_frames``)."""

VIDEO_REFERENCE_FAMILIES = ("video", "perceptual", "flicker", "warping", "seam")


def trial_quality_metrics(
    measured: Iterable[str], setting_names: Iterable[str], installed: Callable[[str], bool] = lambda name: True
) -> list[str]:
    """The quality metrics a trial computes: those of ``measured`` (a spec's measured metrics) and, when one of
    them compares a video with the reference, the :data:`COMPANION_METRICS` (and ``seam_score`` when
    ``setting_names`` -- parameters and derived values -- hold ``infer_frames``) whose modules are ``installed``."""
    asked = set(measured) & QUALITY_METRIC_NAMES
    compares_video = any(
        name in family.metrics and family.needs_reference_for(name)
        for family in QUALITY_FAMILIES
        if family.name in VIDEO_REFERENCE_FAMILIES
        for name in asked
    )
    if compares_video:
        companions = [*COMPANION_METRICS, *(["seam_score"] if "infer_frames" in set(setting_names) else [])]
        asked |= {name for name in companions if installed(name)}
    return sorted(asked)


UNIT_SUFFIXES: dict[str, str] = {
    "s": "_s",
    "GB": "_gb",
    "dB": "_db",
    "items/s": "_items_per_s",
    "frames": "_frames",
    "USD": "_usd",
}
"""Unit -> the suffix a metric name carries for it (``latency_p50_s``)."""

RecordedMetrics = Mapping[str, Mapping[str, object]]
"""One trial's stored metrics: name -> ``{"value", "unit", "direction", "reason"}`` (``TrialRecord.metrics``)."""


AGGREGATE_SUFFIX = re.compile(r"^(?P<base>[^:]+):(?P<how>worst|p(?P<percent>[1-9][0-9]?))$")
"""``<metric>:worst`` / ``<metric>:p<NN>``: a figure over a trial's inputs (spec ``cases``) rather than their mean
(:mod:`tuner.runner.measure.inputs`); the plain name is the mean."""


def split_aggregate(name: str) -> tuple[str, str | None]:
    """``("psnr_db", "worst")`` for ``psnr_db:worst``, ``("stlpips_alex", "p90")`` for ``stlpips_alex:p90``,
    ``(name, None)`` for a plain name."""
    match = AGGREGATE_SUFFIX.fullmatch(name)
    return (match["base"], match["how"]) if match else (name, None)


def base_metric(name: str) -> str:
    """The metric an aggregate is taken of (``psnr_db`` for ``psnr_db:worst``); a plain name itself."""
    return split_aggregate(name)[0]


def known_metric(name: str) -> bool:
    """True when some part of the worker can produce ``name`` (an aggregate of such a metric included)."""
    name = base_metric(name)
    return name in MEASURED_METRICS or name in QUALITY_METRIC_NAMES or name.startswith("count_")


INSTRUMENT_COUNTS: frozenset[str] = frozenset({"memory_samples", "memory_sample_hz"})
"""Figures about the measurement itself (how often the memory sampler looked), recorded beside the metrics."""


def has_direction(name: str) -> bool:
    """Whether a better direction means something for ``name``: False for counters -- a workload's
    ``count_<name>`` (frames, tokens it reports) and :data:`INSTRUMENT_COUNTS` -- which are facts about a run,
    not figures of merit (their stored direction is a placeholder the storage needs); True otherwise."""
    name = base_metric(name)
    return not name.startswith("count_") and name not in INSTRUMENT_COUNTS


def catalogue_entry(name: str) -> tuple[str, Direction] | None:
    """(unit, direction) the catalogue gives ``name`` (``count_<name>``: ``("1", "minimize")``, as the
    worker records counters; an aggregate: its metric's); None for a name it does not know (an adapter's own
    metric)."""
    name = base_metric(name)
    if name in MEASURED_METRICS:
        return MEASURED_METRICS[name]
    for family in QUALITY_FAMILIES:
        if name in family.metrics:
            return family.metrics[name]
    return ("1", "minimize") if name.startswith("count_") else None


def _recorded(name: str, key: str, recorded: Iterable[RecordedMetrics]) -> str | None:
    for metrics in recorded:
        value = metrics.get(name, {}).get(key)
        if value:
            return str(value)
    return None


def unit_of(name: str, recorded: Iterable[RecordedMetrics] = ()) -> str:
    """The unit of metric ``name``: as the first trial of ``recorded`` that stored one recorded it,
    else the catalogue's, else one read from the name's suffix (:data:`UNIT_SUFFIXES`), else ``""``."""
    unit = _recorded(name, "unit", recorded)
    if unit is not None:
        return unit
    known = catalogue_entry(name)
    if known is not None:
        return known[0]
    return next((unit for unit, suffix in UNIT_SUFFIXES.items() if base_metric(name).endswith(suffix)), "")


def objective_units(names: Iterable[str], recorded: Iterable[RecordedMetrics] = ()) -> dict[str, str]:
    """Name -> :func:`unit_of` for each of ``names`` (``recorded`` may be a one-pass iterable)."""
    stored = list(recorded)
    return {name: unit_of(name, stored) for name in names}
