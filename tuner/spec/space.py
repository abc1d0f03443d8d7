"""The search space: spec parameters as Optuna distributions, derived values, rules.

``suggest`` draws a raw setting from an Optuna trial; :func:`resolve` adds the
derived values and checks the rules, giving a :class:`~tuner.spec.candidate.Candidate`
or the reason it must never run. All expressions go through
:mod:`tuner.spec.expressions` (never ``eval``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tuner.spec.candidate import Candidate
from tuner.spec.expressions import ExpressionError, compile_expression

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

    from tuner.spec.models import StudySpec


def distributions(spec: StudySpec) -> dict[str, BaseDistribution]:
    """One Optuna distribution per spec parameter, in spec order."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    result: dict[str, BaseDistribution] = {}
    for name, p in spec.parameters.items():
        if p.type == "int":
            result[name] = IntDistribution(p.low, p.high, step=p.step, log=p.log)
        elif p.type == "float":
            result[name] = FloatDistribution(p.low, p.high, step=p.step, log=p.log)
        elif p.type == "categorical":
            result[name] = CategoricalDistribution(list(p.choices))
        else:
            result[name] = CategoricalDistribution([False, True])
    return result


def grid(spec: StudySpec) -> dict[str, list[Any]]:
    """Every value of every parameter, for the grid sampler. Floats need a step."""
    values: dict[str, list[Any]] = {}
    for name, p in spec.parameters.items():
        if p.type == "int":
            values[name] = list(range(p.low, p.high + 1, p.step))
        elif p.type == "float":
            if p.step is None:
                raise ValueError(f"parameters.{name}: the grid sampler needs a step for float parameters")
            count = int(round((p.high - p.low) / p.step)) + 1
            values[name] = [round(p.low + i * p.step, 12) for i in range(count)]
        elif p.type == "categorical":
            values[name] = list(p.choices)
        else:
            values[name] = [False, True]
    return values


def suggest(trial: optuna.Trial, spec: StudySpec) -> dict[str, Any]:
    """Draw every spec parameter from ``trial`` (enqueued values are honoured), through Optuna's public
    ``suggest_*`` calls on the distributions of :func:`distributions`."""
    from optuna.distributions import FloatDistribution, IntDistribution

    params: dict[str, Any] = {}
    for name, distribution in distributions(spec).items():
        if isinstance(distribution, IntDistribution):
            params[name] = trial.suggest_int(
                name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
            )
        elif isinstance(distribution, FloatDistribution):
            params[name] = trial.suggest_float(
                name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
            )
        else:
            params[name] = trial.suggest_categorical(name, distribution.choices)
    return params


def scalar_inputs(spec: StudySpec) -> dict[str, Any]:
    """Inputs usable in expressions: the spec's scalar (number / string / bool) inputs."""
    return {k: v for k, v in spec.inputs.items() if isinstance(v, (int, float, str, bool))}


def derive(spec: StudySpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """Derived values, evaluated in spec order; each may use params, inputs and earlier ones."""
    scope: dict[str, Any] = {**scalar_inputs(spec), **params}
    derived: dict[str, Any] = {}
    for name, source in spec.derived.items():
        value = compile_expression(source).evaluate(scope)
        derived[name] = value
        scope[name] = value
    return derived


def broken_rule(spec: StudySpec, params: Mapping[str, Any], derived: Mapping[str, Any]) -> str | None:
    """The first rule ``params`` break, as a message; ``None`` when all hold."""
    scope = {**scalar_inputs(spec), **params, **derived}
    for rule in spec.rules:
        try:
            holds = bool(compile_expression(rule.expr).evaluate(scope))
        except ExpressionError as error:
            return f"rule '{rule.expr}' could not be evaluated: {error}"
        if not holds:
            return rule.message or f"rule '{rule.expr}' is false"
    return None


def resolve(spec: StudySpec, params: Mapping[str, Any]) -> tuple[Candidate | None, str | None]:
    """``(candidate, None)`` for a runnable setting, ``(None, reason)`` otherwise."""
    try:
        derived = derive(spec, params)
    except ExpressionError as error:
        return None, f"derived value failed: {error}"
    problem = broken_rule(spec, params, derived)
    if problem is not None:
        return None, problem
    return Candidate.create(params, derived), None


def check_setting(spec: StudySpec, setting: Mapping[str, Any]) -> str | None:
    """Why a full setting (baseline / reference) is unusable, or ``None`` when fine."""
    missing = [name for name in spec.parameters if name not in setting]
    if missing:
        return f"missing parameter(s) {missing}"
    unknown = [name for name in setting if name not in spec.parameters]
    if unknown:
        return f"unknown parameter(s) {unknown}"
    for name, value in setting.items():
        if not spec.parameters[name].contains(value):
            return f"{name}={value!r} is outside the parameter's range or choices"
    _, reason = resolve(spec, setting)
    return reason
