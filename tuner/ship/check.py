"""``tuner check``: re-measure an exported setting against its baseline — a CI gate.

From a ``tuner.config/v1`` file (its ``check`` block holds the study's spec,
the device and the reference and baseline settings) this runs, in real worker
processes on this machine: the reference once (when the spec has quality
metrics), then ``rounds`` rounds alternating baseline and chosen setting
(ABBA order, so a drift in machine load hits both alike).

Speed: the measured speed-up is median(baseline p50) / median(chosen p50) on
the config's speed metric. Its relative spread ``s`` combines each side's
spread — the largest of the exported CV, the median CV within this run's
repeats and the CV between rounds — as ``sqrt(s_baseline² + s_chosen²)``, and
never less than 5 % (the noise floor of wall-clock timing on a shared machine).
A regression is a speed-up below ``expected × (1 − 3 s)`` (expected: the
speed-up in the config), or below ``--min-speedup`` when given.

Quality: for each quality objective, the drop against the baseline (how much
worse the chosen setting is, in the metric's unit). A regression is a drop
above ``--max-quality-drop`` when given, else a drop larger than the exported
one by more than 1 % of it (+1e-6): quality metrics are deterministic for a
fixed seed. Any run that is not ``OK`` fails the check.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tuner.results import Outcome, TrialResult
from tuner.ship.config_schema import ConfigV1
from tuner.spec.metrics import QUALITY_METRIC_NAMES

SPREAD_SIGMAS = 3.0
MIN_SPREAD = 0.05  # wall-clock timing on a shared machine is never trusted below 5 %
QUALITY_RELATIVE_TOLERANCE = 0.01
QUALITY_ABSOLUTE_TOLERANCE = 1e-6


class CheckError(RuntimeError):
    """The check cannot run (no baseline in the config, a setting the spec refuses...)."""


@dataclass
class SideMeasurement:
    """One setting's runs: p50 latency per round (seconds), within-run CVs, last quality values."""

    label: str
    p50_s: list[float] = field(default_factory=list)
    cvs: list[float] = field(default_factory=list)
    quality: dict[str, float] = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return statistics.median(self.p50_s)

    def spread(self, exported_cv: float | None) -> float:
        """Relative spread: max(exported CV, median within-run CV, CV between rounds)."""
        between = (statistics.stdev(self.p50_s) / statistics.mean(self.p50_s)
                   if len(self.p50_s) >= 2 and statistics.mean(self.p50_s) > 0 else 0.0)
        within = statistics.median(self.cvs) if self.cvs else 0.0
        return max(exported_cv or 0.0, within, between)


@dataclass
class CheckReport:
    """Figures and verdict of one check."""

    speed_metric: str
    baseline: SideMeasurement
    chosen: SideMeasurement
    speedup: float
    expected_speedup: float | None
    spread: float
    floor: float | None
    quality_drops: dict[str, float]
    failures: list[str]
    workdir: str

    @property
    def passed(self) -> bool:
        return not self.failures


def _settings(spec: Any, params: dict[str, Any], what: str) -> dict[str, Any]:
    from tuner.spec.space import resolve

    candidate, problem = resolve(spec, params)
    if candidate is None:
        raise CheckError(f"the {what} setting is refused by the spec: {problem}")
    return dict(candidate.settings)


def run_check(config: ConfigV1, home: Path, rounds: int = 3, min_speedup: float | None = None,
              max_quality_drop: float | None = None,
              progress: Callable[[str], None] = lambda _: None) -> CheckReport:
    """Run the check (see module docs) with trial files under ``home/checks/``."""
    from evaluators.registry import warm_ups
    from tuner.runner.base import TrialRequest, plan_slots
    from tuner.runner.choice import make_runner
    from tuner.spec.loading import parse_spec

    if config.baseline is None or config.check.baseline is None:
        raise CheckError("the config has no measured baseline: nothing to compare against")
    if rounds < 1:
        raise CheckError("rounds must be >= 1")
    spec = parse_spec(config.check.spec_yaml, source="config check.spec_yaml")
    chosen_settings = _settings(spec, dict(config.params), "exported")
    baseline_settings = _settings(spec, dict(config.check.baseline), "baseline")
    quality_metrics = sorted(spec.used_metrics & QUALITY_METRIC_NAMES)
    speed_metric = config.baseline.comparison.speed_metric
    workdir = home / "checks" / f"{config.provenance.study}-trial{config.provenance.trial}-{time.strftime('%Y%m%d-%H%M%S')}"
    device = config.check.device
    slot = plan_slots(1, device, _gpus(device), threads=spec.workload.torch_threads,
                      gpus_per_slot=spec.workload.gpus_per_trial)[0]
    runner = make_runner(spec, warm_ups(spec.used_metrics))  # the same kind of worker as the study's
    counter = iter(range(10**6))

    def request(label: str, settings: dict[str, Any], reference_output: str | None,
                as_reference: bool = False) -> TrialRequest:
        number = next(counter)
        return TrialRequest(
            study_name=f"check-{config.provenance.study}", trial_number=number,
            workload_class=spec.workload.target, workload_options=spec.workload.options,
            settings=settings, inputs=dict(spec.inputs), seed=spec.seed, device=device,
            measurement=spec.measurement.model_dump(), timeout_s=spec.workload.timeout_s,
            workdir=str(workdir / f"{number:03d}_{label}"), quality_metrics=quality_metrics,
            reference_output=reference_output, compare_with_self=as_reference,
            save_output=str(workdir / "reference_output.npz") if as_reference else None,
            reference_settings=reference_settings)

    reference_settings = (_settings(spec, dict(config.check.reference), "reference")
                          if config.check.reference is not None else None)
    sides = {"baseline": SideMeasurement("baseline"), "chosen": SideMeasurement("chosen")}
    failures: list[str] = []
    try:
        reference_output = None
        if quality_metrics and reference_settings is not None:
            progress("reference")
            result = runner.run(request("reference", reference_settings, None, as_reference=True), slot)
            _require_ok(result, "reference")
            reference_output = result.output_path
        for index in range(rounds):
            order = ("baseline", "chosen") if index % 2 == 0 else ("chosen", "baseline")
            for label in order:
                progress(f"round {index + 1}/{rounds}: {label}")
                settings = baseline_settings if label == "baseline" else chosen_settings
                result = runner.run(request(label, settings, reference_output), slot)
                _require_ok(result, label)
                _record(sides[label], result, speed_metric, quality_metrics)
    finally:
        runner.close()
    base, chosen = sides["baseline"], sides["chosen"]
    speedup = base.median_s / chosen.median_s if chosen.median_s > 0 else float("inf")
    spread = max(MIN_SPREAD, (base.spread(config.baseline.spread.latency_cv) ** 2
                              + chosen.spread(config.spread.latency_cv) ** 2) ** 0.5)
    expected = config.baseline.comparison.speedup
    floor = expected * (1 - SPREAD_SIGMAS * spread) if expected is not None else None
    if floor is not None and speedup < floor:
        failures.append(f"speed-up {speedup:.3g}x is below the exported {expected:.3g}x beyond the spread "
                        f"(floor {floor:.3g}x = exported x (1 - {SPREAD_SIGMAS:g} x {spread:.3g}))")
    if min_speedup is not None and speedup < min_speedup:
        failures.append(f"speed-up {speedup:.3g}x is below --min-speedup {min_speedup:g}x")
    drops = _quality(config, base, chosen, max_quality_drop, failures)
    return CheckReport(speed_metric, base, chosen, speedup, expected, spread, floor, drops, failures, str(workdir))


def _gpus(device: str) -> list[int]:
    from tuner.gpu import visible_gpu_indices

    return visible_gpu_indices() if device == "cuda" else []


def _require_ok(result: TrialResult, label: str) -> None:
    if result.outcome is not Outcome.OK:
        raise CheckError(f"the {label} run ended {result.outcome.value}: {result.reason or ''}".strip())


def _record(side: SideMeasurement, result: TrialResult, speed_metric: str, quality: list[str]) -> None:
    value = result.metric_value(speed_metric)
    if value is None:
        raise CheckError(f"the {side.label} run did not measure {speed_metric}")
    side.p50_s.append(value)
    cv = result.metric_value("latency_cv")
    if cv is not None:
        side.cvs.append(cv)
    for name in quality:
        measured = result.metric_value(name)
        if measured is not None:
            side.quality[name] = measured


def _quality(config: ConfigV1, base: SideMeasurement, chosen: SideMeasurement, max_drop: float | None,
             failures: list[str]) -> dict[str, float]:
    assert config.baseline is not None
    drops: dict[str, float] = {}
    for name, entry in config.baseline.comparison.quality_delta.items():
        mine, theirs = chosen.quality.get(name), base.quality.get(name)
        if mine is None or theirs is None:
            continue
        sign = -1.0 if entry.direction == "maximize" else 1.0
        drop = sign * (mine - theirs)
        drops[name] = drop
        if max_drop is not None:
            if drop > max_drop:
                failures.append(f"{name}: quality drop {drop:.4g} against the baseline is above "
                                f"--max-quality-drop {max_drop:g}")
        elif entry.delta is not None:
            exported = sign * entry.delta
            allowed = exported + QUALITY_ABSOLUTE_TOLERANCE + QUALITY_RELATIVE_TOLERANCE * abs(exported)
            if drop > allowed:
                failures.append(f"{name}: quality drop {drop:.4g} against the baseline is above the exported "
                                f"{exported:.4g} (+1 %)")
    return drops
