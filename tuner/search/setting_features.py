"""A setting as a model's feature row: what :mod:`tuner.search.prediction`, the proposer and the trial cost fit on.

Each parameter in the space's order: a number's log over its range (so steps x frames x passes -- a call's
multiplicative cost structure -- is a sum in a log model; a linear position where the range starts at 0 or below);
a categorical's choices one-hot after the first, and when its choices are positive numbers their log value besides,
which alone stands for it in a cost model (:func:`cost_columns`); then one column for runs of another GPU type (a
warm start's). Every column runs over [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

__all__ = ["cost_columns", "numeric_choices", "setting_features"]


def setting_features(params: Mapping[str, Any], space: Mapping[str, BaseDistribution], prior: bool) -> list[float]:
    """One setting's feature row (see the module docstring), in ``space`` order, then the prior column."""
    return [value for value, _ in _encoded(params, space, prior)]


def cost_columns(space: Mapping[str, BaseDistribution]) -> list[int]:
    """The columns of :func:`setting_features` a cost model (latency, memory: log scale) is fitted on: all but the
    one-hot columns of a categorical of numbers, which enters as its log value alone (steps from 4, 6, 8, 12 is
    one number to a cost, not four unrelated choices: fewer coefficients to learn from a study's first runs; what
    bends away from the line is the Gaussian process's). A quality model keeps every column: a quality may jump
    between two choices of a number (a scheduler's order, a cache's step pattern)."""
    return [index for index, (_, choice_of_number) in enumerate(_encoded({}, space, False)) if not choice_of_number]


def _encoded(params: Mapping[str, Any], space: Mapping[str, BaseDistribution], prior: bool) -> list[tuple[float, bool]]:
    """:func:`setting_features`' columns, each with whether it is a one-hot column of a categorical of numbers."""
    from optuna.distributions import CategoricalDistribution

    row: list[tuple[float, bool]] = []
    for name, distribution in space.items():
        value = params.get(name)
        if isinstance(distribution, CategoricalDistribution):
            choices = list(distribution.choices)
            is_number = numeric_choices(choices)
            row.extend((1.0 if value == choice else 0.0, is_number) for choice in choices[1:])
            if is_number:
                row.append((_scaled_log(value, min(choices), max(choices)), False))
            continue
        low, high = float(distribution.low), float(distribution.high)  # type: ignore[attr-defined]
        if high <= low:
            continue
        number = float(value) if isinstance(value, (int, float)) else low
        row.append((_scaled_log(number, low, high) if low > 0 else (number - low) / (high - low), False))
    row.append((1.0 if prior else 0.0, False))
    return row


def numeric_choices(choices: list[Any]) -> bool:
    """Whether a categorical's choices are positive numbers of more than one value (its log value is a column)."""
    numbers = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    return len(numbers) == len(choices) and min(numbers) > 0 and max(numbers) > min(numbers)


def _scaled_log(value: Any, low: float, high: float) -> float:
    number = float(value) if isinstance(value, (int, float)) and value > 0 else low
    return (math.log(number) - math.log(low)) / (math.log(high) - math.log(low))
