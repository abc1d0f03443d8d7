"""Pareto fronts over trials read from the storage.

Only *feasible, measured* trials take part: state COMPLETE, every constraint
a number <= 0 and none that could not be evaluated (:func:`constraints_hold`),
and values that are real measurements (not OOM / TIMEOUT placeholders, not
copies of another trial). :func:`feasible_measurement` is that test; the front,
the ranks, the export (:func:`tuner.storage.records.record_feasible`) and the views
all apply it. Ranks come from non-dominated sorting (rank 0 is the front).
A stored trial's attributes are read through :mod:`tuner.storage.attributes` (the storage gateway;
``named_constraints`` is its, kept importable from here).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.storage.attributes import duplicate_of, is_placeholder, named_constraints, unavailable_constraints_of

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


@dataclass(frozen=True)
class Point:
    """A trial's number and objective values."""

    number: int
    values: tuple[float, ...]


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """True when ``a`` is no worse than ``b`` everywhere and better somewhere."""
    better = False
    for x, y, direction in zip(a, b, directions):
        if direction == "maximize":
            x, y = -x, -y
        if x > y:
            return False
        if x < y:
            better = True
    return better


def pareto_ranks(points: Sequence[Point], directions: Sequence[str]) -> dict[int, int]:
    """Trial number -> non-domination rank (0 = on the front). O(n^2) per rank."""
    remaining = list(points)
    ranks: dict[int, int] = {}
    rank = 0
    while remaining:
        front = [
            p for p in remaining if not any(dominates(q.values, p.values, directions) for q in remaining if q is not p)
        ]
        for p in front:
            ranks[p.number] = rank
        front_ids = {id(p) for p in front}
        remaining = [p for p in remaining if id(p) not in front_ids]
        rank += 1
    return ranks


def constraints_hold(constraints: Mapping[str, float], unavailable: Mapping[str, Any] | None = None) -> bool:
    """True when every constraint value is a finite number <= 0 and none is listed in ``unavailable``.

    The one test of a trial's constraints. A constraint that could not be evaluated is
    infeasible: told as a positive violation since issue 24, and listed in ``unavailable``
    (the ``unavailable_constraints`` attribute), which also catches trials recorded before,
    when it was told as 0. A NaN or infinite value (never written by tuner) is infeasible too.
    """
    return not unavailable and all(math.isfinite(value) and value <= 0 for value in constraints.values())


def feasible_measurement(
    complete: bool,
    values: Sequence[float] | None,
    placeholder: bool,
    duplicate_of: int | None,
    constraints: Mapping[str, float],
    unavailable: Mapping[str, Any] | None,
) -> bool:
    """COMPLETE, real values (no placeholder), not a copy, and :func:`constraints_hold`.

    What "feasible, measured" means everywhere: :func:`is_measured_feasible` (a frozen trial)
    and :func:`tuner.storage.records.record_feasible` (a stored record) are this test.
    """
    return (
        complete
        and values is not None
        and not placeholder
        and duplicate_of is None
        and constraints_hold(constraints, unavailable)
    )


def is_measured_feasible(trial: FrozenTrial) -> bool:
    """:func:`feasible_measurement` of a frozen trial (its constraints by :func:`named_constraints`)."""
    from optuna.trial import TrialState

    return feasible_measurement(
        trial.state == TrialState.COMPLETE,
        trial.values,
        is_placeholder(trial),
        duplicate_of(trial),
        named_constraints(trial),
        unavailable_constraints_of(trial),
    )


def front_trials(trials: Sequence[FrozenTrial], directions: Sequence[str]) -> list[FrozenTrial]:
    """The feasible, measured trials on the Pareto front, ordered by trial number."""
    candidates = [t for t in trials if is_measured_feasible(t)]
    ranks = pareto_ranks([Point(t.number, tuple(t.values)) for t in candidates], directions)
    return sorted((t for t in candidates if ranks[t.number] == 0), key=lambda t: t.number)


def minimised(values: Sequence[float], directions: Sequence[str]) -> tuple[float, ...]:
    """``values`` turned so that smaller is better in every coordinate."""
    return tuple(-v if d == "maximize" else v for v, d in zip(values, directions))


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """Volume dominated by ``points`` and bounded by ``reference``, all *minimised*.

    Points not strictly better than ``reference`` in every coordinate add
    nothing. Exact: a sweep in 2-D, slicing on the first coordinate above
    (fine for fronts of a few hundred points). Units: the product of the
    objectives' units.
    """
    inside = [tuple(p) for p in points if all(x < r for x, r in zip(p, reference))]
    if not inside:
        return 0.0
    if len(reference) == 1:
        return float(reference[0] - min(p[0] for p in inside))
    if len(reference) == 2:
        volume, best_y = 0.0, float(reference[1])
        for x, y in sorted(inside):
            if y < best_y:
                volume += (reference[0] - x) * (best_y - y)
                best_y = y
        return volume
    volume = 0.0
    ordered = sorted(inside, key=lambda p: p[0])
    for index, point in enumerate(ordered):
        upper = ordered[index + 1][0] if index + 1 < len(ordered) else reference[0]
        if upper > point[0]:
            volume += (upper - point[0]) * hypervolume([p[1:] for p in ordered[: index + 1]], reference[1:])
    return volume


def hypervolume_reference(points: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Reference point for minimised ``points``: the worst value + 10 % of the range (1 when flat)."""
    worst = [max(column) for column in zip(*points)]
    best = [min(column) for column in zip(*points)]
    return tuple(w + (0.1 * (w - b) if w > b else max(abs(w) * 0.1, 1e-12)) for w, b in zip(worst, best))


def hypervolume_history(ordered: Sequence[Point], directions: Sequence[str]) -> list[tuple[int, float]]:
    """(trial number, hypervolume of the feasible points seen so far) in the given order.

    One reference point for the whole history (:func:`hypervolume_reference` of
    every point), so values are comparable along it.
    """
    turned = [minimised(p.values, directions) for p in ordered]
    if not turned:
        return []
    reference = hypervolume_reference(turned)
    history: list[tuple[int, float]] = []
    for count, point in enumerate(ordered, start=1):
        history.append((point.number, hypervolume(turned[:count], reference)))
    return history


def knee_point(front: Sequence[Point], directions: Sequence[str]) -> Point | None:
    """The front point closest to the ideal point after scaling each objective to [0, 1].

    0 is the best value on the front and 1 the worst; with two objectives this
    is the balanced compromise where neither objective is far from its best.
    Ties: lowest trial number. ``None`` for an empty front.
    """
    if not front:
        return None
    turned = [minimised(p.values, directions) for p in front]
    lows = [min(c) for c in zip(*turned)]
    highs = [max(c) for c in zip(*turned)]
    spans = [h - lo if h > lo else 1.0 for lo, h in zip(lows, highs)]

    def distance(index: int) -> float:
        return sum(((v - lo) / s) ** 2 for v, lo, s in zip(turned[index], lows, spans)) ** 0.5

    best = min(range(len(front)), key=lambda i: (distance(i), front[i].number))
    return front[best]
