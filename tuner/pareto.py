"""Pareto fronts over trials read from the storage.

Only *feasible, measured* trials take part: state COMPLETE, every constraint
<= 0, and values that are real measurements (not OOM / TIMEOUT placeholders,
not copies of another trial). Ranks come from non-dominated sorting
(rank 0 is the front).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

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
        front = [p for p in remaining
                 if not any(dominates(q.values, p.values, directions) for q in remaining if q is not p)]
        for p in front:
            ranks[p.number] = rank
        front_ids = {id(p) for p in front}
        remaining = [p for p in remaining if id(p) not in front_ids]
        rank += 1
    return ranks


def is_measured_feasible(trial: "FrozenTrial") -> bool:
    """COMPLETE, real values (no placeholder), not a copy, every constraint <= 0."""
    from optuna.trial import TrialState

    if trial.state != TrialState.COMPLETE or trial.values is None:
        return False
    attrs = trial.user_attrs
    if attrs.get("placeholder_values") or attrs.get("duplicate_of") is not None:
        return False
    return all(value <= 0 for value in trial.constraints.values())


def front_trials(trials: Sequence["FrozenTrial"], directions: Sequence[str]) -> list["FrozenTrial"]:
    """The feasible, measured trials on the Pareto front, ordered by trial number."""
    candidates = [t for t in trials if is_measured_feasible(t)]
    ranks = pareto_ranks([Point(t.number, tuple(t.values)) for t in candidates], directions)
    return sorted((t for t in candidates if ranks[t.number] == 0), key=lambda t: t.number)


def best_on(trials: Sequence["FrozenTrial"], objective_index: int, direction: str) -> "FrozenTrial | None":
    """The feasible measured trial with the best value of one objective (ties: lowest number)."""
    candidates = [t for t in trials if is_measured_feasible(t)]
    if not candidates:
        return None
    sign = 1.0 if direction == "minimize" else -1.0
    return min(candidates, key=lambda t: (sign * t.values[objective_index], t.number))
