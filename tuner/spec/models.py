"""The study spec's models: what a YAML spec validates into (:class:`StudySpec`).

A spec names the workload, its inputs, the parameters to search (int / float /
log / step / categorical / bool), derived values, rules, objectives,
constraints, the reference and baseline settings, measurement settings, the
sampler, the budget and the export rule (:mod:`tuner.spec.export_rule`). Files and YAML text enter through
:mod:`tuner.spec.loading`, which turns every problem into one
:class:`SpecError` naming the file, line, key and problem.

The JSON Schema for editors is :func:`spec_json_schema` (written to
``search_spaces/schema.json`` by ``tuner schema``).
"""

from __future__ import annotations

import hashlib
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.errors import SpecError as SpecError  # re-exported: tuner.spec.models.SpecError
from tuner.spec.export_rule import ExportRule, ExportSpec, check_export_rule, parse_policy, rule_of
from tuner.spec.expressions import ExpressionError, compile_expression
from tuner.spec.measure.measurement import BudgetSpec, MeasurementSpec
from tuner.spec.measure.price import CostSpec
from tuner.spec.metrics import base_metric, known_metric
from tuner.spec.names import check_expression_cost, check_expression_names
from tuner.spec.quality.cases import CasesSpec, check_cases, input_keys
from tuner.spec.quality.reference_shape import ReferenceShapeSpec, check_reference_shape
from tuner.spec.search.sampler import DEFAULT_SAMPLER as DEFAULT_SAMPLER  # re-exported
from tuner.spec.search.sampler import SamplerName as SamplerName
from tuner.spec.search.sampler import SamplerSpec
from tuner.spec.space import check_setting
from tuner.spec.workload import WorkloadSpec, check_adapter_names

RECORD_ENV_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_*?]*")
"""An entry of ``record_env``: an environment variable name, or a simple glob of one (``*`` any run of
characters, ``?`` one), starting with a letter or ``_`` (so never ``*`` alone: the whole environment)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


MemoryTrend = Literal["increases", "decreases", "none"]


class _Parameter(_Strict):
    """What every parameter may say: ``memory``, how a setting's peak memory moves as the value grows
    (for a bool, from false to true; for strings, along the listed choices) — ``increases``,
    ``decreases`` or ``none`` (no effect). Only the memory model reads it
    (:mod:`tuner.search.feasibility`); unset, numbers and ``W*H`` resolutions increase, the rest
    must be equal."""

    memory: MemoryTrend | None = None


class IntParameter(_Parameter):
    """An integer in [low, high]; ``step`` spaces the grid; ``log`` samples log-uniformly."""

    type: Literal["int"]
    low: int
    high: int
    step: int = 1
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> IntParameter:
        if self.low > self.high:
            raise ValueError(f"low must be <= high ({self.low} > {self.high})")
        if self.step < 1:
            raise ValueError(f"step must be >= 1 (got {self.step})")
        if self.log and (self.low < 1 or self.step != 1):
            raise ValueError("log needs low >= 1 and step == 1")
        if (self.high - self.low) % self.step:
            raise ValueError(f"high - low ({self.high - self.low}) must be a multiple of step {self.step}")
        return self

    def contains(self, value: Any) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and self.low <= value <= self.high
            and (value - self.low) % self.step == 0
        )


class FloatParameter(_Parameter):
    """A float in [low, high]; optional ``step`` (dividing ``high - low``) or ``log`` (not both)."""

    type: Literal["float"]
    low: float
    high: float
    step: float | None = Field(default=None, allow_inf_nan=False)
    log: bool = False

    @model_validator(mode="after")
    def _check(self) -> FloatParameter:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite")
        if self.low > self.high:
            raise ValueError(f"low must be <= high ({self.low} > {self.high})")
        if self.log and self.low <= 0:
            raise ValueError("log needs low > 0")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined")
        if self.step is not None and self.step <= 0:
            raise ValueError("step must be > 0")
        # a step that does not divide the range: Optuna would narrow it to the last step below high
        # (a warning nobody reads), and the study would never try the high the spec promises
        narrowed = None if self.step is None else _narrowed_high(self.low, self.high, self.step)
        if narrowed is not None:
            span = float(_decimal(self.high) - _decimal(self.low))
            raise ValueError(
                f"high - low ({span!r}) must be a multiple of step {self.step!r}: Optuna would narrow "
                f"the range to [{self.low!r}, {narrowed!r}] (use high: {narrowed!r}, or a step that "
                "divides the range)"
            )
        return self

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and self.low <= float(value) <= self.high


def _decimal(value: float) -> Decimal:
    """``value`` as the decimal a spec writes (its shortest repr: 0.1 is exactly 0.1)."""
    return Decimal(repr(float(value)))


def _narrowed_high(low: float, high: float, step: float) -> float | None:
    """The ``high`` Optuna's ``FloatDistribution`` would narrow ``[low, high]`` to when ``step`` does
    not divide the range, else None. Same rule as Optuna's: decimal arithmetic on the values as
    written, so a step that divides on paper (0.8 / 0.1) is never refused for binary rounding."""
    span, unit = _decimal(high) - _decimal(low), _decimal(step)
    try:
        if span % unit == 0:
            return None
    except InvalidOperation:  # more steps than decimal precision holds (> 1e27)
        raise ValueError(f"step {step!r} is too small for the range [{low!r}, {high!r}]") from None
    return float((span // unit) * unit + _decimal(low))


Choice = bool | int | float | str | None


class CategoricalParameter(_Parameter):
    """One of ``choices`` (strings, numbers, booleans)."""

    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1)

    @field_validator("choices")
    @classmethod
    def _unique(cls, choices: list[Choice]) -> list[Choice]:
        """Choices must differ as values: Optuna stores the index of the first equal choice, so
        ``[1, true]`` (1 == True) or ``[1, 1.0]`` would run one value and record the other."""
        for index, choice in enumerate(choices):
            for earlier in choices[:index]:
                if earlier == choice:
                    shown = ", ".join(_yaml_text(c) for c in (earlier, choice))
                    same = "repeats a value" if type(earlier) is type(choice) else "holds equal values"
                    raise ValueError(
                        f"choices {same} ({shown}; {_yaml_text(earlier)} == {_yaml_text(choice)} "
                        "for Optuna, which would record one and run the other): make them distinct, "
                        "e.g. quote them as strings"
                    )
        return choices

    def contains(self, value: Any) -> bool:
        return any(type(value) is type(c) and value == c for c in self.choices)


def _yaml_text(value: Choice) -> str:
    """A choice as the YAML spelling a user wrote (``true``, ``null``, ``1.0``, ``'x'``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else repr(value)


class BoolParameter(_Parameter):
    """True or False."""

    type: Literal["bool"]

    def contains(self, value: Any) -> bool:
        return isinstance(value, bool)


Parameter = Annotated[
    IntParameter | FloatParameter | CategoricalParameter | BoolParameter,
    Field(discriminator="type"),
]


class Rule(_Strict):
    """A boolean expression every candidate must satisfy; otherwise it is never run."""

    expr: str
    message: str | None = None

    @field_validator("expr")
    @classmethod
    def _compiles(cls, expr: str) -> str:
        compile_expression(expr)
        return expr


class Objective(_Strict):
    """A metric to optimise, by name (e.g. ``latency_p50_s``) and direction."""

    metric: str
    direction: Literal["minimize", "maximize"]


class Constraint(_Strict):
    """``metric <= max`` and/or ``metric >= min``; bounds are numbers or expressions.

    Expressions may use ``gpu_memory_gb`` and ``host_memory_gb`` (GB, 1e9 bytes).
    The violation told to the sampler is graded: how far past the bound,
    relative to the bound's magnitude (> 0 infeasible).
    """

    metric: str
    max: float | str | None = None
    min: float | str | None = None

    @field_validator("max", "min")
    @classmethod
    def _finite(cls, bound: float | str | None) -> float | str | None:
        if isinstance(bound, float) and not math.isfinite(bound):
            raise ValueError(f"a bound must be a finite number or an expression (got {bound!r})")
        return bound

    @model_validator(mode="after")
    def _check(self) -> Constraint:
        if self.max is None and self.min is None:
            raise ValueError("a constraint needs max and/or min")
        for bound in (self.max, self.min):
            if isinstance(bound, str):
                compile_expression(bound)
        return self


class StudySpec(_Strict):
    """A validated study spec. Build with :func:`load_spec` or :func:`parse_spec`."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    workload: WorkloadSpec
    inputs: dict[str, Any] = Field(default_factory=dict)
    cases: CasesSpec | None = None
    """Several inputs, each measured trial running every one (:mod:`tuner.spec.quality.cases`): a list of input
    mappings (each overriding ``inputs``, ``name`` labelling it) or ``{folder, as, glob}``."""
    cliff_margins: dict[str, float] = Field(default_factory=dict)
    """Metric -> margin (its unit): an input worse than the trial's mean by more is flagged a cliff."""
    parameters: dict[str, Parameter] = Field(min_length=1)
    derived: dict[str, str] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)
    objectives: list[Objective] = Field(min_length=1)
    constraints: list[Constraint] = Field(default_factory=list)
    report: list[str] = Field(default_factory=list)
    reference: dict[str, Any] | None = None
    reference_shape: ReferenceShapeSpec | None = None
    """Which parameters change what is generated (:mod:`tuner.spec.quality.reference_shape`): a reference per shape."""
    baseline: dict[str, Any] | None = None
    measurement: MeasurementSpec = Field(default_factory=MeasurementSpec)
    budget: BudgetSpec
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    export: ExportSpec | None = None
    seed: int = 0
    cost: CostSpec | None = None
    """USD per device-hour (:mod:`tuner.spec.measure.price`): each trial's cost per output from its throughput."""
    record_env: list[str] = Field(default_factory=list)
    """Environment variables each trial records beside the built-in allow-list
    (:mod:`tuner.runner.recorded_env`): names or simple globs (:data:`RECORD_ENV_PATTERN`)."""

    @field_validator("record_env")
    @classmethod
    def _record_env_names(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if not RECORD_ENV_PATTERN.fullmatch(name):
                raise ValueError(
                    f"record_env.{index}: {name!r} is not an environment variable name or a simple glob "
                    "(letters, digits, _ and the wildcards * ?, starting with a letter or _)"
                )
        return names

    @field_validator("rules", mode="before")
    @classmethod
    def _rule_strings(cls, rules: Any) -> Any:
        if isinstance(rules, list):
            return [{"expr": r} if isinstance(r, str) else r for r in rules]
        return rules

    @field_validator("derived")
    @classmethod
    def _derived_compile(cls, derived: dict[str, str]) -> dict[str, str]:
        for name, expr in derived.items():
            if not name.isidentifier():
                raise ValueError(f"derived.{name}: derived name '{name}' is not an identifier")
            try:
                compile_expression(expr)
            except ExpressionError as error:
                raise ValueError(f"derived.{name}: {error}") from None
        return derived

    @model_validator(mode="after")
    def _cross_check(self) -> StudySpec:
        clashes = set(self.parameters) & (set(self.derived) | set(self.inputs))
        if clashes:
            raise ValueError(f"names used both as parameter and derived/input: {sorted(clashes)}")
        problem = check_cases(self, self.parameters, self.derived) or (self.cost.check() if self.cost else None)
        if problem:
            raise ValueError(problem)
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"objectives repeat a metric: {metrics}")
        named = (
            [(f"objectives.{i}.metric", m) for i, m in enumerate(metrics)]
            + [(f"constraints.{i}.metric", c.metric) for i, c in enumerate(self.constraints)]
            + [(f"report.{i}", m) for i, m in enumerate(self.report)]
            + [(f"cliff_margins.{m}", m) for m in self.cliff_margins]
        )
        for key, metric in named:
            if not known_metric(metric) and base_metric(metric) not in self.workload.declared_metrics():
                raise ValueError(f"{key}: unknown metric '{metric}' (see the metric list in docs/specs.md)")
        priced = [
            base_metric(m) for _, m in named if base_metric(m) in ("cost_per_output_usd", "cost_per_1k_outputs_usd")
        ]
        if priced and self.cost is None:
            raise ValueError(
                f"cost: the spec names {priced[0]} but gives no price (cost: {{gpu_hour_usd: ...}}, "
                "or cpu_hour_usd for a CPU study)"
            )
        check_expression_names(self)
        check_expression_cost(self)
        for role in ("reference", "baseline"):
            setting = getattr(self, role)
            if setting is not None:
                problem = check_setting(self, setting)
                if problem:
                    raise ValueError(f"{role}: {problem}")
        problem = check_reference_shape(self)
        if problem:
            raise ValueError(problem)
        check_adapter_names(self)
        check_export_rule(self)
        return self

    @property
    def objective_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    @property
    def input_keys(self) -> set[str]:
        """Every input name a trial may see (the shared ``inputs`` and each case's)."""
        return input_keys(self)

    @property
    def used_metrics(self) -> set[str]:
        """Every metric the spec names: objectives, constraints, ``report`` and the export policy."""
        named = {o.metric for o in self.objectives} | {c.metric for c in self.constraints} | set(self.report)
        if self.export is not None and self.export.policy is not None:
            named |= set(parse_policy(self.export.policy).metrics)
        return named

    @property
    def measured_metrics(self) -> set[str]:
        """The metrics the worker must measure for :attr:`used_metrics` (an aggregate's metric for it)."""
        return {base_metric(name) for name in self.used_metrics}

    @property
    def export_rule(self) -> ExportRule:
        """How the study chooses its export (:func:`tuner.spec.export_rule.rule_of`)."""
        return rule_of(self.export)


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema of the spec format (for editors and ``search_spaces/schema.json``)."""
    schema = StudySpec.model_json_schema(by_alias=True)
    schema["title"] = "tuner study spec"
    return schema


def spec_hash(text: str) -> str:
    """A short content hash of the spec's YAML text (provenance)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
