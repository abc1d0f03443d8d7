"""A mode switch whose cost scales with the size knobs: interaction columns a cost model takes in only where they
predict the held-out runs better.

A cost model (:class:`tuner.search.prediction.LogRidge`) is a line through log(cost) over the setting's features, so
each knob multiplies the cost by its own factor. A knob of words -- a cache method, a scheduler, a precision --
may instead change how the cost grows with the numbers: a step cache skips a share of the steps that depends on
the step count and its threshold, so its factor is not one number. :func:`interaction_groups` gives, per
categorical of words, the products of each of its one-hot columns with each numeric cost column (a number's
log, a numeric categorical's log value): one *group*. :func:`chosen_mask` keeps a group in the line only when it
lowers the line's leave-one-out error (closed form, the ridge penalty chosen as the line's own) by more than
:data:`MARGIN` of it, the groups tried in the space's order: a study whose knobs multiply keeps the plain line,
and a group that would only fit a few runs' noise stays out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tuner.search.setting_features import numeric_choices

if TYPE_CHECKING:
    import numpy as np
    from optuna.distributions import BaseDistribution

MARGIN = 0.2
"""Share of the line's leave-one-out mean squared error (log units) a group must take off to be kept."""
MIN_RUNS = 6
"""Fewest measured runs before a group is tried (with fewer, the plain line)."""

Pairs = list[tuple[int, int]]
"""(one-hot column, numeric column) pairs, indices into a cost row (the :func:`tuner.search.setting_features`
row's :func:`~tuner.search.setting_features.cost_columns`)."""


def interaction_groups(space: Mapping[str, BaseDistribution], cost: Sequence[int]) -> list[Pairs]:
    """Per categorical of words in ``space`` with two or more choices, its one-hot columns paired with every
    numeric column, as positions in the cost row of the full row's columns ``cost``
    (:func:`tuner.search.setting_features.cost_columns`); none without numbers."""
    from optuna.distributions import CategoricalDistribution

    words: list[list[int]] = []
    numbers: list[int] = []
    column = 0
    for distribution in space.values():
        if isinstance(distribution, CategoricalDistribution):
            choices = list(distribution.choices)
            onehots = list(range(column, column + len(choices) - 1))
            column += len(choices) - 1
            if numeric_choices(choices):
                numbers.append(column)  # the numeric categorical's log value, after its one-hots
                column += 1
            elif onehots:
                words.append(onehots)
        elif float(distribution.high) > float(distribution.low):  # type: ignore[attr-defined]
            numbers.append(column)
            column += 1
    at = {index: position for position, index in enumerate(cost)}  # a full row's column -> the cost row's
    numbers = [at[index] for index in numbers if index in at]
    groups = [[at[index] for index in group if index in at] for group in words]
    return [[(onehot, number) for onehot in group for number in numbers] for group in groups if group and numbers]


def extended(rows: np.ndarray, groups: Sequence[Pairs]) -> np.ndarray:
    """``rows`` (cost rows) with their interaction columns after them, group after group."""
    import numpy as np

    pairs = [pair for group in groups for pair in group]
    if not pairs:
        return rows
    return np.hstack([rows, np.stack([rows[:, onehot] * rows[:, number] for onehot, number in pairs], axis=1)])


def group_spans(start: int, groups: Sequence[Pairs]) -> list[tuple[int, int]]:
    """Each group's ``[start, stop)`` columns in an :func:`extended` row of ``start`` cost columns."""
    spans = []
    for group in groups:
        spans.append((start, start + len(group)))
        start += len(group)
    return spans


def line_error(rows: np.ndarray, logs: np.ndarray, ridges: Sequence[float]) -> float:
    """The smallest over ``ridges`` of the ridge line's leave-one-out mean squared error (closed form)."""
    import numpy as np

    centred = rows - rows.mean(axis=0)
    target = logs - logs.mean()
    best = float("inf")
    for ridge in ridges:
        inverse = np.linalg.inv(centred.T @ centred + ridge * np.eye(rows.shape[1]))
        residual = target - centred @ (inverse @ centred.T @ target)
        leverage = np.einsum("ij,jk,ik->i", centred, inverse, centred) + 1.0 / len(logs)
        best = min(best, float(np.mean((residual / np.clip(1.0 - leverage, 1e-6, None)) ** 2)))
    return best


def chosen_mask(rows: np.ndarray, logs: np.ndarray, spans: Sequence[tuple[int, int]], ridges: Sequence[float]) -> Any:
    """A 0/1 weight per column of ``rows`` (measured runs only): 1 for the plain columns and for each group in
    ``spans`` that took more than :data:`MARGIN` off the line's leave-one-out error (see the module docstring)."""
    import numpy as np

    mask = np.ones(rows.shape[1])
    for start, stop in spans:
        mask[start:stop] = 0.0
    if not spans or len(logs) < MIN_RUNS:
        return mask
    current = line_error(rows * mask, logs, ridges)
    for start, stop in spans:
        trial = mask.copy()
        trial[start:stop] = 1.0
        error = line_error(rows * trial, logs, ridges)
        if error < (1.0 - MARGIN) * current:
            mask, current = trial, error
    return mask
