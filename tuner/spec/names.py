"""What a spec's expressions may name, and a trial evaluation of them before anything runs.

:func:`check_expression_names` refuses an expression naming something that is
not in its scope (a misspelt parameter would make every candidate INVALID and
"exhaust" the space), and a derived value using one defined after it (derived
values are evaluated in spec order, so a cycle can never be evaluated).

:func:`check_expression_cost` evaluates the derived values and rules on a few
settings of the space (the reference, the baseline, the all-low and all-high
corners) so that a pathological expression (an integer of a million digits, a
string of a billion characters) is refused by ``tuner validate`` instead of
hanging a worker. Ordinary failures on a corner (a rule that is false, a
division by zero) are what rules are for and are not refused.

Both raise :class:`ValueError` with a message that starts with the key path
(``rules.0.expr: ...``), so the loader can point at the line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tuner.spec.expressions import ExpressionError, ExpressionLimitError, compile_expression

if TYPE_CHECKING:
    from tuner.spec.models import StudySpec

HOST_FACTS = ("gpu_memory_gb", "host_memory_gb")  # names a constraint bound may use (GB)


def _scalar_inputs(spec: StudySpec) -> list[str]:
    return [k for k, v in spec.inputs.items() if isinstance(v, (int, float, str, bool))]


def _unknown(key: str, source: str, names: frozenset[str], known: set[str], later: set[str]) -> None:
    for name in sorted(names):
        if name in known:
            continue
        if name in later:
            raise ValueError(
                f"{key}: '{source}' uses '{name}', which is defined after it (derived values are "
                "evaluated in spec order; move it above, and a cycle can never be evaluated)"
            )
        hint = "" if len(known) > 30 else f" (known: {', '.join(sorted(known)) or 'none'})"
        raise ValueError(
            f"{key}: '{source}' names '{name}', which is not a parameter, derived value or scalar input{hint}"
        )


def check_expression_names(spec: StudySpec) -> None:
    """Every name in a derived value, rule and constraint bound must exist where it is evaluated."""
    known = set(spec.parameters) | set(_scalar_inputs(spec))
    derived = list(spec.derived.items())
    for index, (name, source) in enumerate(derived):
        later = {n for n, _ in derived[index:]}
        _unknown(f"derived.{name}", source, compile_expression(source).names, known, later)
        known.add(name)
    for index, rule in enumerate(spec.rules):
        _unknown(f"rules.{index}.expr", rule.expr, compile_expression(rule.expr).names, known, set())
    for index, constraint in enumerate(spec.constraints):
        for side in ("max", "min"):
            bound = getattr(constraint, side)
            if isinstance(bound, str):
                for name in sorted(compile_expression(bound).names - set(HOST_FACTS)):
                    raise ValueError(
                        f"constraints.{index}.{side}: '{bound}' names '{name}'; a bound may use "
                        f"numbers and {', '.join(HOST_FACTS)} (GB)"
                    )


def trial_settings(spec: StudySpec) -> list[dict[str, Any]]:
    """The settings evaluated at validate: reference, baseline, all-low and all-high corners."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    for name, parameter in spec.parameters.items():
        if parameter.type in ("int", "float"):
            low[name], high[name] = parameter.low, parameter.high  # type: ignore[union-attr]
        elif parameter.type == "categorical":
            low[name], high[name] = parameter.choices[0], parameter.choices[-1]  # type: ignore[union-attr]
        else:
            low[name], high[name] = False, True
    return [dict(s) for s in (spec.reference, spec.baseline) if s is not None] + [low, high]


def check_expression_cost(spec: StudySpec) -> None:
    """Evaluate derived values and rules on :func:`trial_settings`; refuse any over the limits."""
    inputs = {k: spec.inputs[k] for k in _scalar_inputs(spec)}
    for setting in trial_settings(spec):
        scope: dict[str, Any] = {**inputs, **setting}
        complete = True
        for name, source in spec.derived.items():
            value = _evaluate(f"derived.{name}", source, scope)
            if value is _FAILED:
                complete = False  # later values may depend on it; the run records it as INVALID
                break
            scope[name] = value
        if not complete:
            continue
        for index, rule in enumerate(spec.rules):
            _evaluate(f"rules.{index}.expr", rule.expr, scope)


_FAILED = object()


def _evaluate(key: str, source: str, scope: Mapping[str, Any]) -> Any:
    try:
        return compile_expression(source).evaluate(scope)
    except ExpressionLimitError as error:
        raise ValueError(f"{key}: {error}") from None
    except ExpressionError:
        return _FAILED
