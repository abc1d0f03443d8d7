"""From a trial's result to what the sampler is told: objective values and constraints.

* ``OK``: the objective metrics' values; graded constraint violations
  (``(value - max) / |max|`` or ``(min - value) / |min|``; > 0 infeasible).
  A constraint that cannot be evaluated — its metric missing, unavailable, NaN or
  infinite, its bound NaN, its violation not a number — is *infeasible*: violation
  :data:`UNAVAILABLE_CONSTRAINT_VIOLATION`, a reason naming the metric and its value
  (``constraint peak_vram_device_gb unavailable (nan): NVML could not see the process``),
  and the trial attribute ``unavailable_constraints`` (key -> that reason). A setting
  whose memory could not be measured is never on the front, never exported.
* ``OOM`` / ``TIMEOUT``: an infeasible point — finite placeholder values, worse
  than anything measured so far, and the ``outcome`` constraint set to 1 — so
  samplers learn where the wall is. Placeholders are flagged on the trial and
  never shown as measurements.
* ``CRASH`` / ``INVALID``, or an objective metric that is unavailable: the trial
  is told FAIL with the reason.

Constraint bounds may be expressions of ``gpu_memory_gb`` / ``host_memory_gb``.
A bound that cannot be evaluated on this host (no GPU) disables its constraint
for the study, with the reason recorded — it is never guessed.

How it is stored: each constraint in Optuna 5's per-key form (``trial.set_constraint``,
system attribute ``constraints:<key>``), and the study's metric names
(:func:`ensure_metric_names`) are the objectives' metric names. The legacy list
optuna-dashboard 0.21 reads (system attribute ``constraints``, values in
:func:`constraint_order`) is written only in the dashboard's view
(:mod:`tuner.tracking.dashboard`), never in the study: Optuna's ``FrozenTrial.constraints``
merges both forms, so the samplers would see every constraint twice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tuner.pareto import constraints_hold
from tuner.results import Metric, Outcome, TrialResult
from tuner.spec.expressions import ExpressionError, compile_expression
from tuner.storage.attributes import CONSTRAINT_ORDER, LEGACY_CONSTRAINTS

if TYPE_CHECKING:
    import optuna

    from tuner.spec.models import StudySpec

OUTCOME_CONSTRAINT = "outcome"
NO_MEASUREMENT_PLACEHOLDER = 1e6
LEGACY_CONSTRAINTS_ATTR = (
    LEGACY_CONSTRAINTS  # trial system attribute (dashboard view only): optuna-dashboard 0.21's list
)
CONSTRAINT_ORDER_ATTR = CONSTRAINT_ORDER  # view study user attribute: the keys of that list, in order
UNAVAILABLE_CONSTRAINT_VIOLATION = 1.0
"""The violation told for a constraint that cannot be evaluated: positive, so every sampler and every view
takes the trial as infeasible; 1, as the ``outcome`` wall of an OOM (a miss by 100 % of the bound on the
graded scale), so an unknown is not told as nearly feasible, nor as worse than a measured miss of 2x."""


@dataclass(frozen=True)
class ActiveConstraint:
    """A spec constraint with its bounds evaluated for this host."""

    key: str
    metric: str
    max_value: float | None
    min_value: float | None

    def violation(self, value: float) -> float:
        """How far ``value`` is past the bounds, relative to the bound (0 when inside); NaN when that
        cannot be computed (past an infinite bound), never hidden as 0."""
        misses = [0.0]
        if self.max_value is not None and value > self.max_value:
            misses.append((value - self.max_value) / max(abs(self.max_value), 1e-12))
        if self.min_value is not None and value < self.min_value:
            misses.append((self.min_value - value) / max(abs(self.min_value), 1e-12))
        return math.nan if any(math.isnan(miss) for miss in misses) else max(misses)

    def unevaluable(self, metric: Metric | None) -> str | None:
        """Why this constraint cannot be evaluated on ``metric`` (one line naming the metric and its
        value), or None when :meth:`violation` of its value is a finite number."""
        head = f"constraint {self.metric} unavailable"
        if metric is None:
            return f"{head} (not reported)"
        value = metric.value
        if value is None or not math.isfinite(value):
            shown = "no value" if value is None else f"{value:g}"
            return f"{head} ({shown}): {metric.reason}" if metric.reason else f"{head} ({shown})"
        for side, bound in (("max", self.max_value), ("min", self.min_value)):
            if bound is not None and math.isnan(bound):
                return f"{head} ({value:g}): its {side} bound is nan on this host"
        grade = self.violation(value)
        if not math.isfinite(grade):
            return f"{head} ({value:g}): its violation against {self.key} is {grade:g}"
        return None


@dataclass(frozen=True)
class ConstraintPlan:
    """The constraints in force for a study, and those disabled with reasons."""

    active: tuple[ActiveConstraint, ...]
    disabled: Mapping[str, str] = field(default_factory=dict)


def plan_constraints(spec: StudySpec, host: Mapping[str, float | None]) -> ConstraintPlan:
    """Evaluate constraint bounds with ``host`` facts (``gpu_memory_gb``, ``host_memory_gb``)."""
    scope = {k: v for k, v in host.items() if v is not None}
    active: list[ActiveConstraint] = []
    disabled: dict[str, str] = {}
    for constraint in spec.constraints:
        bounds: dict[str, float | None] = {}
        problem = None
        for side in ("max", "min"):
            raw = getattr(constraint, side)
            if isinstance(raw, str):
                try:
                    bounds[side] = float(compile_expression(raw).evaluate(scope))
                except ExpressionError as error:
                    lacking = sorted(compile_expression(raw).names - scope.keys())
                    problem = (
                        f"bound '{raw}' needs {', '.join(lacking)}, which this host does not have"
                        if lacking
                        else f"bound '{raw}' cannot be evaluated: {error}"
                    )
            else:
                bounds[side] = None if raw is None else float(raw)
        parts = [
            f"{constraint.metric}<={bounds['max']:g}" if bounds.get("max") is not None else "",
            f"{constraint.metric}>={bounds['min']:g}" if bounds.get("min") is not None else "",
        ]
        key = ",".join(p for p in parts if p) or constraint.metric
        if problem:
            disabled[constraint.metric] = problem
            continue
        active.append(ActiveConstraint(key, constraint.metric, bounds.get("max"), bounds.get("min")))
    return ConstraintPlan(tuple(active), disabled)


@dataclass(frozen=True)
class Verdict:
    """What to tell Optuna. ``values`` is None for a FAIL; ``reason`` says why."""

    values: list[float] | None
    constraints: dict[str, float]
    placeholder: bool = False
    reason: str | None = None
    unavailable_constraints: dict[str, str] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        """Measured values, every constraint a number <= 0 and none unavailable
        (:func:`tuner.pareto.constraints_hold`, the test the front and the export apply)."""
        return (
            self.values is not None
            and not self.placeholder
            and constraints_hold(self.constraints, self.unavailable_constraints)
        )


def placeholder_value(direction: str, measured: Sequence[float]) -> float:
    """A finite value worse than every measured one (for OOM / TIMEOUT points)."""
    if not measured:
        return NO_MEASUREMENT_PLACEHOLDER if direction == "minimize" else -NO_MEASUREMENT_PLACEHOLDER
    low, high = min(measured), max(measured)
    margin = max(high - low, abs(high if direction == "minimize" else low) * 0.5, 1e-9)
    return high + margin if direction == "minimize" else low - margin


def wall(
    spec: StudySpec, plan: ConstraintPlan, measured_values: Sequence[Sequence[float]], reason: str | None
) -> Verdict:
    """An infeasible point: placeholder values worse than ``measured_values``, the ``outcome``
    constraint at 1 (OOM, TIMEOUT, and a setting a rule refuses, which is never run)."""
    walls = [placeholder_value(o.direction, [v[i] for v in measured_values]) for i, o in enumerate(spec.objectives)]
    at_wall = {OUTCOME_CONSTRAINT: 1.0, **{c.key: 0.0 for c in plan.active}}
    return Verdict(walls, at_wall, placeholder=True, reason=reason)


def judge(
    spec: StudySpec, plan: ConstraintPlan, result: TrialResult, measured_values: Sequence[Sequence[float]]
) -> Verdict:
    """Turn ``result`` into a :class:`Verdict`; ``measured_values`` are earlier OK values.

    A constraint that cannot be evaluated (:meth:`ActiveConstraint.unevaluable`) is told as
    :data:`UNAVAILABLE_CONSTRAINT_VIOLATION`; the verdict's ``reason`` then names every such
    constraint (``; ``-separated) and ``unavailable_constraints`` maps each key to its line.
    """
    if result.outcome.is_infeasible_point:
        return wall(spec, plan, measured_values, result.reason)
    if result.outcome is not Outcome.OK:
        return Verdict(None, {}, reason=result.reason)
    values: list[float] = []
    for objective in spec.objectives:
        metric = result.metrics.get(objective.metric)
        if metric is None or not metric.available or metric.value is None:
            why = metric.reason if metric is not None else "the worker did not report it"
            return Verdict(None, {}, reason=f"objective {objective.metric} unavailable: {why}")
        values.append(float(metric.value))
    constraints = {OUTCOME_CONSTRAINT: 0.0}
    unavailable: dict[str, str] = {}
    for constraint in plan.active:
        metric = result.metrics.get(constraint.metric)
        why = constraint.unevaluable(metric)
        if why is None and metric is not None and metric.value is not None:
            constraints[constraint.key] = constraint.violation(float(metric.value))
        else:
            unavailable[constraint.key] = why or f"constraint {constraint.metric} unavailable"
            constraints[constraint.key] = UNAVAILABLE_CONSTRAINT_VIOLATION
    reason = "; ".join(unavailable.values()) or None
    return Verdict(values, constraints, reason=reason, unavailable_constraints=unavailable)


def constraint_order(constraints: Mapping[str, float]) -> list[str]:
    """The keys of ``constraints`` in the order of the legacy list: sorted (``outcome`` among them)."""
    return sorted(constraints)


def ensure_metric_names(study: optuna.Study, spec: StudySpec) -> None:
    """Name the study's objectives after the spec's objective metrics (``study.set_metric_names``);
    nothing is written when they already are (idempotent: safe on every open)."""
    import warnings

    import optuna

    names = list(spec.objective_names)
    if study.metric_names != names:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)
