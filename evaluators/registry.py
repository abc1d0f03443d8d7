"""Quality evaluators by metric name.

A spec uses a quality metric simply by naming it in an objective or a
constraint; :data:`QUALITY_METRICS` says which evaluator computes it. Metrics
the worker always measures (latency, memory, throughput, counters) are listed
in :data:`MEASURED_METRICS`. Evaluators compare a trial's output with the
study's reference output; without a reference every quality metric is
unavailable, with the reason.
"""

from __future__ import annotations

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

def _psnr(output: Any, reference: Any, context: EvalContext) -> list[Metric]:
    from evaluators.video import psnr_metric

    return [psnr_metric(output.video, reference.video)]


QUALITY_METRICS: dict[str, tuple[str, Direction, QualityFunction]] = {
    "psnr_db": ("dB", "maximize", _psnr),
}


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
    """Compute the named quality metrics of ``output`` against ``reference``."""
    metrics: list[Metric] = []
    seen: set[int] = set()
    wanted = set(names)
    for name in wanted:
        unit, direction, function = QUALITY_METRICS[name]
        if reference is None:
            metrics.append(Metric.unavailable(name, unit, direction, "no reference output in this study"))
            continue
        if id(function) in seen:
            continue
        seen.add(id(function))
        try:
            metrics.extend(m for m in function(output, reference, context) if m.name in wanted)
        except Exception as error:  # noqa: BLE001 - an evaluator failure is an unavailable metric
            metrics.append(Metric.unavailable(name, unit, direction, f"{type(error).__name__}: {error}"))
    return metrics
