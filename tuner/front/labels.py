"""How a metric is named for humans: ``latency_p50_s`` -> ``latency p50 [s]``.

The one place that turns a metric's machine name (the key in the storage and in MLflow,
which never changes) and its unit into the words people read: plot axes (PNG and HTML),
hover text, table headers and MLflow run names all call :func:`metric_label` /
:func:`metric_value_text`.

The unit comes from the caller (a trial's stored metric carries its unit), else
:func:`tuner.spec.metrics.unit_of` (the metric catalogue, else the name's own suffix: ``_s``,
``_gb``, ``_db``). Units ``1`` and ``score`` are dimensionless and not shown.
"""

from __future__ import annotations

from tuner.spec.metrics import UNIT_SUFFIXES, unit_of

DIMENSIONLESS = frozenset({"", "1", "score"})
_WHOLE_NAMES = {
    "stlpips_alex": "ST-LPIPS",
    "lpips_alex": "LPIPS",
    "text_rouge_l": "text ROUGE-L",
    "text_gt_rouge_l": "text GT ROUGE-L",
}
_WORDS = {
    "psnr": "PSNR",
    "ssim": "SSIM",
    "lpips": "LPIPS",
    "stlpips": "ST-LPIPS",
    "vram": "VRAM",
    "rss": "RSS",
    "nvml": "NVML",
    "cv": "CV",
    "mae": "MAE",
    "f1": "F1",
    "bleu": "BLEU",
    "chrf": "chrF",
    "gt": "GT",
}
_DIRECTION_WORDS = {"minimize": "lower is better", "maximize": "higher is better"}


def metric_unit(name: str, unit: str | None = None) -> str:
    """``unit`` when given, else :func:`tuner.spec.metrics.unit_of`'s (catalogue, suffix; ``""``: none)."""
    return unit or unit_of(name)


def metric_words(name: str, unit: str | None = None) -> str:
    """The name without its unit suffix, in words: ``peak_rss_gb`` -> ``peak RSS``."""
    if name in _WHOLE_NAMES:
        return _WHOLE_NAMES[name]
    suffix = UNIT_SUFFIXES.get(metric_unit(name, unit), "")
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
