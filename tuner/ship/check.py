"""``tuner check``: re-measure an exported setting against its baseline — a CI gate.

From a ``tuner.config/v1`` file (its ``check`` block holds the study's spec, the device and
the reference and baseline settings) this runs, in real worker processes on this machine:
the reference once (when the spec has quality metrics), then rounds alternating baseline
and chosen setting (ABBA order, so a drift in machine load hits both alike). Each run
yields one median latency (seconds) per side and round.

Speed — a sequential statistical test (:mod:`tuner.ship.stats`), never a point compared
with a point. The floor is ``expected × (1 − margin)`` (expected: the exported speed-up)
with ``margin = clamp(2 × u, MIN_MARGIN, MAX_MARGIN)``, ``u`` the relative standard error
of the exported speed-up (``sqrt(π/2) × sqrt(cv_b²/n_b + cv_c²/n_c)`` from the exported CVs
and repeats). So the floor is never below ``0.8 × expected`` however noisy the export was;
``--min-speedup`` is a second floor. After ``rounds`` rounds (at least), and after each
further round up to ``max_rounds``, the Mann–Whitney test of the per-round medians is run
against each floor at one-sided level :data:`ALPHA`: below a floor with 97.5 % confidence
fails, above every floor passes, otherwise one more round. At ``max_rounds`` an undecided
floor is decided on the Hodges–Lehmann estimate, and the report says so. The reported
speed-up is that estimate, with its 95 % confidence interval.

Quality: for each quality objective, the drop against the baseline (how much worse the
chosen setting is, in the metric's unit), judged against ``--max-quality-drop`` or the
exported drop (:func:`tuner.ship.check_sides.quality_drops`). Any run that is not ``OK`` fails.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import TunerError
from tuner.results import Outcome, TrialResult
from tuner.ship.check_sides import SideMeasurement, quality_drops
from tuner.ship.config_schema import ConfigV1, Spread
from tuner.ship.stats import ShiftTest, shift_test
from tuner.spec.metrics import QUALITY_METRIC_NAMES, base_metric

if TYPE_CHECKING:
    from tuner.runner.base import TrialRequest

ALPHA = 0.025  # one-sided: a 95 % two-sided confidence interval of the speed-up
MIN_MARGIN = 0.12  # halfway (geometrically) between no change and a 1.3x slowdown: 1 - 1/sqrt(1.3)
MAX_MARGIN = 0.20  # however noisy the export, the floor stays at >= 0.8 x expected: a 1.25x slowdown fails
EXPORT_SIGMAS = 2.0
DEFAULT_ROUNDS = 4  # the fewest rounds at which the exact test can decide at ALPHA (1/70 <= 0.025)
DEFAULT_MAX_ROUNDS = 16
_MEDIAN_SE = math.sqrt(math.pi / 2)  # standard error of a median / of a mean, for normal samples


class CheckError(TunerError, RuntimeError):
    """The check cannot run (no baseline in the config, a setting the spec refuses...)."""


@dataclass(frozen=True)
class SpeedFloor:
    """One floor of the speed-up: its value, where it comes from, and the final test against it."""

    name: str  # "exported" or "min-speedup"
    value: float
    test: ShiftTest
    decided_by_test: bool

    @property
    def failed(self) -> bool:
        return self.test.regression if self.decided_by_test else self.test.estimate < self.value


@dataclass
class CheckReport:
    """Figures and verdict of one check (speed-ups are baseline / chosen, dimensionless)."""

    speed_metric: str
    baseline: SideMeasurement
    chosen: SideMeasurement
    speedup: float
    ci: tuple[float, float]
    expected_speedup: float | None
    margin: float
    floors: list[SpeedFloor]
    rounds: int
    quality_drops: dict[str, float]
    failures: list[str]
    notes: list[str]
    workdir: str

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def floor(self) -> float | None:
        """The exported floor (``expected × (1 − margin)``), None without an exported speed-up."""
        return next((f.value for f in self.floors if f.name == "exported"), None)


def margin_of(baseline: Spread, chosen: Spread) -> float:
    """The relative margin below the exported speed-up (see module docs); in [MIN_MARGIN, MAX_MARGIN]."""

    def part(spread: Spread) -> float:
        return (spread.latency_cv or 0.0) ** 2 / max(1, spread.repeats or 1)

    uncertainty = _MEDIAN_SE * math.sqrt(part(baseline) + part(chosen))
    return min(MAX_MARGIN, max(MIN_MARGIN, EXPORT_SIGMAS * uncertainty))


def _settings(spec: Any, params: dict[str, Any], what: str) -> dict[str, Any]:
    from tuner.spec.space import resolve

    candidate, problem = resolve(spec, params)
    if candidate is None:
        raise CheckError(f"the {what} setting is refused by the spec: {problem}")
    return dict(candidate.settings)


def run_check(
    config: ConfigV1,
    home: Path,
    rounds: int = DEFAULT_ROUNDS,
    min_speedup: float | None = None,
    max_quality_drop: float | None = None,
    progress: Callable[[str], None] = lambda _: None,
    max_rounds: int | None = None,
) -> CheckReport:
    """Run the check (see module docs) with trial files under ``home/checks/``.

    ``rounds``: rounds always run; ``max_rounds`` (default ``max(rounds, 16)``): the most run
    while the test is undecided. Raises :class:`CheckError` when the check cannot run.
    """
    from tuner.evaluators.registry import warm_ups
    from tuner.runner.base import plan_slots
    from tuner.runner.choice import make_runner
    from tuner.spec.loading import parse_spec

    if config.baseline is None or config.check.baseline is None:
        raise CheckError("the config has no measured baseline: nothing to compare against")
    limit = max(rounds, DEFAULT_MAX_ROUNDS) if max_rounds is None else max_rounds
    if rounds < 1 or limit < rounds:
        raise CheckError(f"rounds must be >= 1 and max rounds >= rounds (got {rounds} and {limit})")
    spec = parse_spec(config.check.spec_yaml, source="config check.spec_yaml")
    chosen_settings = _settings(spec, dict(config.params), "exported")
    baseline_settings = _settings(spec, dict(config.check.baseline), "baseline")
    quality_metrics = sorted(spec.measured_metrics & QUALITY_METRIC_NAMES)
    quality_figures = sorted(
        {name for name in spec.used_metrics if base_metric(name) in QUALITY_METRIC_NAMES} | set(quality_metrics)
    )  # with the figures over inputs (psnr_db:worst) the spec names
    speed_metric = config.baseline.comparison.speed_metric
    workdir = _fresh_dir(_check_dir(home, config.provenance.study, config.provenance.trial))
    device = config.check.device
    slot = plan_slots(
        1, device, _gpus(device), threads=spec.workload.torch_threads, gpus_per_slot=spec.workload.gpus_per_trial
    )[0]
    expected = config.baseline.comparison.speedup
    margin = margin_of(config.baseline.spread, config.spread)
    floors = {
        name: value
        for name, value in (("exported", expected * (1 - margin) if expected else None), ("min-speedup", min_speedup))
        if value is not None and value > 0
    }
    reference_settings = (
        _settings(spec, dict(config.check.reference), "reference") if config.check.reference is not None else None
    )
    request = _request_maker(
        f"check-{config.provenance.study}", spec, device, workdir, quality_metrics, reference_settings
    )
    runner = make_runner(spec, warm_ups(spec.measured_metrics))  # the same kind of worker as the study's
    sides = {"baseline": SideMeasurement("baseline"), "chosen": SideMeasurement("chosen")}
    tests: dict[str, ShiftTest] = {}
    try:
        reference_output = None
        if quality_metrics and reference_settings is not None:
            progress("reference")
            result = runner.run(request("reference", reference_settings, None, as_reference=True), slot)
            _require_ok(result, "reference")
            reference_output = result.output_path
        for index in range(limit):
            order = ("baseline", "chosen") if index % 2 == 0 else ("chosen", "baseline")
            for label in order:
                progress(f"round {index + 1} (at least {rounds}, at most {limit}): {label}")
                settings = baseline_settings if label == "baseline" else chosen_settings
                result = runner.run(request(label, settings, reference_output), slot)
                _require_ok(result, label)
                _record(sides[label], result, speed_metric, quality_figures)
            if index + 1 < rounds:
                continue
            tests = {
                name: shift_test(sides["baseline"].p50_s, sides["chosen"].p50_s, value, ALPHA)
                for name, value in floors.items()
            }
            if all(t.regression or t.confirmed for t in tests.values()):
                break
            progress(
                f"after {index + 1} rounds: "
                + "; ".join(
                    f"{_interval(t)} against the {name} floor {t.floor:.3g}x: undecided" for name, t in tests.items()
                )
            )
    finally:
        runner.close()
    report = _report(speed_metric, sides["baseline"], sides["chosen"], tests, expected, margin, workdir)
    report.quality_drops = quality_drops(
        config, sides["baseline"], sides["chosen"], quality_figures, max_quality_drop, report.failures
    )
    return report


def _report(
    speed_metric: str,
    base: SideMeasurement,
    chosen: SideMeasurement,
    tests: dict[str, ShiftTest],
    expected: float | None,
    margin: float,
    workdir: Path,
) -> CheckReport:
    """The speed half of the report: the overall speed-up and each floor's verdict (failures, notes)."""
    overall = shift_test(base.p50_s, chosen.p50_s, 1.0, ALPHA)
    report = CheckReport(
        speed_metric,
        base,
        chosen,
        overall.estimate,
        (overall.low, overall.high),
        expected,
        margin,
        [],
        len(base.p50_s),
        {},
        [],
        [],
        str(workdir),
    )
    for name, test in tests.items():
        speed_floor = SpeedFloor(name, test.floor, test, test.regression or test.confirmed)
        report.floors.append(speed_floor)
        if not speed_floor.decided_by_test:
            report.notes.append(
                f"undecided at 95 % after {report.rounds} rounds ({_interval(test)} against the "
                f"{name} floor {test.floor:.3g}x): decided on the estimate"
            )
        if speed_floor.failed:
            report.failures.append(_speed_failure(speed_floor, expected, margin))
    return report


def _request_maker(
    study_name: str,
    spec: Any,
    device: str,
    workdir: Path,
    quality_metrics: list[str],
    reference_settings: dict[str, Any] | None,
) -> Callable[..., TrialRequest]:
    """``request(label, settings, reference_output, as_reference=False)``: the check's next trial
    request, numbered in order, in ``workdir/<number>_<label>``; the reference run saves its output."""
    from tuner.runner.base import TrialRequest
    from tuner.spec.quality.cases import request_input_fields

    counter = iter(range(10**6))
    input_fields = request_input_fields(spec, spec.used_metrics)

    def request(
        label: str, settings: dict[str, Any], reference_output: str | None, as_reference: bool = False
    ) -> TrialRequest:
        number = next(counter)
        return TrialRequest(
            study_name=study_name,
            trial_number=number,
            workload_class=spec.workload.target,
            workload_options=spec.workload.options,
            settings=settings,
            **input_fields,
            seed=spec.seed,
            device=device,
            measurement=spec.measurement.model_dump(),
            timeout_s=spec.workload.timeout_s * max(1, len(input_fields["input_sets"])),
            workdir=str(workdir / f"{number:03d}_{label}"),
            quality_metrics=quality_metrics,
            reference_output=reference_output,
            compare_with_self=as_reference,
            save_output=str(workdir / "reference_output.npz") if as_reference else None,
            reference_settings=reference_settings,
            cost=spec.cost.model_dump() if spec.cost is not None else {},
        )

    return request


def _interval(test: ShiftTest) -> str:
    high = f"{test.high:.3g}x" if math.isfinite(test.high) else "inf"
    return f"speed-up {test.estimate:.3g}x (95 % CI {test.low:.3g}x–{high})"


def _speed_failure(floor: SpeedFloor, expected: float | None, margin: float) -> str:
    test = floor.test
    how = (
        f"below it with 97.5 % confidence (Mann-Whitney p = {test.p_below:.2g}, {test.rounds} rounds)"
        if floor.decided_by_test
        else f"undecided after {test.rounds} rounds; the estimate is below it"
    )
    if floor.name == "min-speedup":
        return f"{_interval(test)} is below --min-speedup {test.floor:g}x: {how}"
    return (
        f"{_interval(test)} is below the exported {expected:.3g}x beyond the margin (floor {test.floor:.3g}x = "
        f"exported x (1 - {margin:.3g})): {how}"
    )


def _check_dir(home: Path, study: str, trial: int) -> Path:
    """``home/checks/<study>-trial<n>-<time>``: the study name comes from the config file, so
    characters other than letters, digits, ``_``, ``-``, ``.`` become ``_``, leading dots go,
    it is cut to 100 characters, and the path must lie inside ``home/checks`` (CheckError)."""
    safe = re.sub(r"[^A-Za-z0-9_.\-]+", "_", study).lstrip(".")[:100] or "study"
    checks = home / "checks"
    path = checks / f"{safe}-trial{int(trial)}-{time.strftime('%Y%m%d-%H%M%S')}"
    if checks.resolve() not in path.resolve().parents:
        raise CheckError(f"the check directory {path} would lie outside {checks}")
    return path


def _fresh_dir(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... : a directory no earlier check (same second) used."""
    candidate, suffix = path, 1
    while candidate.exists():
        suffix += 1
        candidate = path.with_name(f"{path.name}-{suffix}")
    candidate.mkdir(parents=True)
    return candidate


def _gpus(device: str) -> list[int]:
    from tuner.gpu import visible_gpu_indices

    return visible_gpu_indices() if device == "cuda" else []


def _require_ok(result: TrialResult, label: str) -> None:
    if result.outcome is not Outcome.OK:
        raise CheckError(f"the {label} run ended {result.outcome.value}: {result.reason or ''}".strip())


def _record(side: SideMeasurement, result: TrialResult, speed_metric: str, quality: list[str]) -> None:
    """Add one run's figures to ``side``; a quality metric the run did not measure is remembered with why."""
    value = result.metric_value(speed_metric)
    if value is None or value <= 0:
        raise CheckError(f"the {side.label} run did not measure {speed_metric}")
    side.p50_s.append(value)
    cv = result.metric_value("latency_cv")
    if cv is not None:
        side.cvs.append(cv)
    for name in quality:
        measured = result.metric_value(name)
        if measured is not None:
            side.quality[name] = measured
        elif name not in side.missing:
            metric = result.metrics.get(name)
            side.missing[name] = metric.reason if metric is not None and metric.reason else "not reported by the run"
