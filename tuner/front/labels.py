"""How a metric is named for humans: ``latency_p50_s`` -> ``latency p50 [s]``.

The one place that turns a metric's machine name (the key in the storage and in MLflow,
which never changes) and its unit into the words people read: plot axes (PNG and HTML),
hover text, table headers and MLflow run names all call :func:`metric_label` /
:func:`metric_value_text`.

The unit comes from, in order: the caller (a trial's stored metric carries its unit), the
metric catalogue (:mod:`tuner.spec.metrics`), or the name's own suffix (``_s``, ``_gb``,
``_db``). Units ``1`` and ``score`` are dimensionless and not shown.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from tuner.spec.metrics import MEASURED_METRICS, QUALITY_FAMILIES

DIMENSIONLESS = frozenset({"", "1", "score"})
# the suffix a name carries for its unit (stripped from the label: the unit is shown in brackets)
_UNIT_SUFFIXES = {"s": "_s", "GB": "_gb", "dB": "_db", "items/s": "_items_per_s", "frames": "_frames"}
_WHOLE_NAMES = {"stlpips_alex": "ST-LPIPS", "lpips_alex": "LPIPS", "text_rouge_l": "text ROUGE-L",
                "text_gt_rouge_l": "text GT ROUGE-L"}
_WORDS = {"psnr": "PSNR", "ssim": "SSIM", "lpips": "LPIPS", "stlpips": "ST-LPIPS", "vram": "VRAM", "rss": "RSS",
          "nvml": "NVML", "cv": "CV", "mae": "MAE", "f1": "F1", "bleu": "BLEU", "chrf": "chrF", "gt": "GT"}
_DIRECTION_WORDS = {"minimize": "lower is better", "maximize": "higher is better"}


def catalogue_unit(name: str) -> str | None:
    """The unit :mod:`tuner.spec.metrics` gives ``name`` (``count_*``: ``1``); None when unknown."""
    if name in MEASURED_METRICS:
        return MEASURED_METRICS[name][0]
    for family in QUALITY_FAMILIES:
        if name in family.metrics:
            return family.metrics[name][0]
    return "1" if name.startswith("count_") else None


def metric_unit(name: str, unit: str | None = None) -> str:
    """``unit`` when given, else the catalogue's, else one read from the name's suffix (``""``: none)."""
    if unit:
        return unit
    known = catalogue_unit(name)
    if known is not None:
        return known
    for candidate, suffix in _UNIT_SUFFIXES.items():
        if name.endswith(suffix):
            return candidate
    return ""


def unit_of(name: str, records_metrics: Iterable[Mapping[str, Mapping[str, object]]]) -> str:
    """The unit of ``name`` as stored with the first trial that has it (adapters declare their
    own metrics), else :func:`metric_unit`'s."""
    for metrics in records_metrics:
        stored = metrics.get(name, {}).get("unit")
        if stored:
            return str(stored)
    return metric_unit(name)


def metric_words(name: str, unit: str | None = None) -> str:
    """The name without its unit suffix, in words: ``peak_rss_gb`` -> ``peak RSS``."""
    if name in _WHOLE_NAMES:
        return _WHOLE_NAMES[name]
    suffix = _UNIT_SUFFIXES.get(metric_unit(name, unit), "")
    base = name[: -len(suffix)] if suffix and name.endswith(suffix) and len(name) > len(suffix) else name
    return " ".join(_WORDS.get(word, word) for word in base.split("_") if word)


def metric_label(name: str, unit: str | None = None, direction: str | None = None) -> str:
    """``latency p50 [s]``, ``peak RSS [GB]``, ``ST-LPIPS``; with a direction:
    ``latency p50 [s] (lower is better)``."""
    shown = metric_unit(name, unit)
    label = metric_words(name, unit) + ("" if shown in DIMENSIONLESS else f" [{shown}]")
    return f"{label} ({_DIRECTION_WORDS[direction]})" if direction in _DIRECTION_WORDS else label


def format_number(value: float) -> str:
    """Three significant digits (``1.32``, ``0.013``, ``31.2``); thousands and above whole (``1,234``)."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def metric_value_text(name: str, value: float, unit: str | None = None, with_name: bool = True) -> str:
    """A value as a person reads it: ``latency p50 1.32 s``, ``ST-LPIPS 0.013``, ``PSNR 31.2 dB``;
    ``with_name=False`` and a unit: ``1.32 s`` (the unit says what it is)."""
    shown = metric_unit(name, unit)
    number = format_number(value) + ("" if shown in DIMENSIONLESS else f" {shown}")
    return f"{metric_words(name, unit)} {number}" if with_name or shown in DIMENSIONLESS else number
