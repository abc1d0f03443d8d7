"""Metrics by name: which part of the worker produces each one.

A spec uses a metric simply by naming it in an objective or a constraint; the
names, units and directions are the spec's catalogue
(:mod:`tuner.spec.metrics`). Quality metrics come from evaluator *families*
(:data:`FAMILIES`): each family is one function, imported lazily (the
coordinator never imports torch or OpenCV), that computes all of its metrics
in one pass. A trial runs only the
families whose metrics its spec uses, and the time each family takes is
reported as ``eval_<family>_s`` — never charged to the candidate's latency.

Without a reference output, every metric that compares with it is unavailable
(with the reason); those a family computes from the trial's own output (the
temporal ``flicker_mae`` / ``flicker_score`` / ``warping_error`` / ``seam_score``,
the lip-sync proxy) are still computed. A metric whose optional modules are not installed
(:func:`tuner.spec.extras.quality_modules`), or whose family fails on importing one, is
unavailable with a reason naming the extra that installs it.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tuner.evaluators.base import EvalContext, QualityFunction
from tuner.results import Direction, Metric
from tuner.spec.extras import missing_module, missing_modules, quality_modules, unavailable_reason
from tuner.spec.metrics import MEASURED_METRICS, QUALITY_FAMILIES, known_metric  # noqa: F401 - re-exported


@dataclass(frozen=True)
class Family:
    """One evaluator function (``module:function``) and the metrics it returns."""

    name: str
    function_path: str
    metrics: dict[str, tuple[str, Direction]]
    needs_reference: bool = True
    warm_up: str | None = None
    reference_free: frozenset[str] = frozenset()

    def needs_reference_for(self, name: str) -> bool:
        """Whether metric ``name`` compares with the reference output (else it is the output's own)."""
        return self.needs_reference and name not in self.reference_free

    def load(self) -> QualityFunction:
        module, _, function = self.function_path.partition(":")
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


# family name -> (the function computing it, its warm-up); names and units come from the spec's catalogue
_FUNCTIONS: dict[str, tuple[str, str | None]] = {
    "video": ("tuner.evaluators.video:video_fidelity_metrics", "tuner.evaluators.video:warm_up"),
    "perceptual": ("tuner.evaluators.perceptual:perceptual_metrics", "tuner.evaluators.perceptual:warm_up"),
    "flicker": ("tuner.evaluators.temporal:flicker_metrics", None),
    "warping": ("tuner.evaluators.temporal:warping_metrics", None),
    "seam": ("tuner.evaluators.temporal:seam_metrics", None),
    "lipsync": ("tuner.evaluators.lipsync:lipsync_metrics", None),
    "text": ("tuner.evaluators.text:text_metrics", None),
}

FAMILIES: tuple[Family, ...] = tuple(
    Family(f.name, _FUNCTIONS[f.name][0], f.metrics, f.needs_reference, _FUNCTIONS[f.name][1], f.reference_free)
    for f in QUALITY_FAMILIES
)

QUALITY_METRICS: dict[str, tuple[str, Direction, Family]] = {
    name: (unit, direction, family) for family in FAMILIES for name, (unit, direction) in family.metrics.items()
}


def warm_ups(names: Iterable[str]) -> list[str]:
    """``module:function`` warm-ups of the families that compute any of ``names``."""
    wanted = set(names)
    return [f.warm_up for f in FAMILIES if f.warm_up and wanted & set(f.metrics)]


def evaluate_quality(names: Iterable[str], output: Any, reference: Any | None, context: EvalContext) -> list[Metric]:
    """Compute the named quality metrics of ``output`` (against ``reference``).

    Returns the requested metrics plus ``eval_<family>_s`` (seconds) for each
    family that ran. A family that raises reports its metrics unavailable
    with the error as the reason; a metric whose optional modules are missing
    is unavailable naming the extra, and its family runs only for the others.
    """
    wanted = set(names)
    metrics: list[Metric] = []
    for family in FAMILIES:
        requested = sorted(wanted & set(family.metrics))
        if not requested:
            continue
        if reference is None:
            reason = context.reference_missing or "no reference output in this study"
            metrics.extend(
                Metric.unavailable(n, *family.metrics[n], reason) for n in requested if family.needs_reference_for(n)
            )
            requested = [n for n in requested if not family.needs_reference_for(n)]  # the output's own figures
            if not requested:
                continue
        without_modules = _not_installed(family, requested)
        metrics.extend(Metric.unavailable(n, *family.metrics[n], without_modules[n]) for n in without_modules)
        requested = [n for n in requested if n not in without_modules]
        if not requested:
            continue
        started = time.perf_counter()
        try:
            produced = {m.name: m for m in family.load()(output, reference, context)}
        except Exception as error:  # noqa: BLE001 - an evaluator failure is an unavailable metric
            produced = {}
            module = missing_module(error)
            failure = (
                unavailable_reason(f"{family.name} evaluator", module)
                if module is not None
                else f"{family.name} evaluator failed: {type(error).__name__}: {error}"
            )
        else:
            failure = f"the {family.name} evaluator did not report it"
        for name in requested:
            metrics.append(produced.get(name) or Metric.unavailable(name, *family.metrics[name], failure))
        metrics.append(Metric(f"eval_{family.name}_s", time.perf_counter() - started, "s", "minimize"))
    return metrics


def _not_installed(family: Family, requested: list[str]) -> dict[str, str]:
    """Requested metric -> why it is unavailable, for those whose optional modules are not installed."""
    reasons: dict[str, str] = {}
    for name in requested:
        absent = missing_modules(quality_modules(name, family.name))
        if absent:
            reasons[name] = unavailable_reason(f"{family.name} evaluator", absent[0])
    return reasons
