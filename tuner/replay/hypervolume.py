"""Normalised hypervolume: how much of a table's exhaustive front a study has found, trial by trial.

Each objective is mapped to [0, 1] over the range of the table's *feasible* settings — 0 the best
value, 1 the worst, maximised objectives flipped — so both objectives weigh alike whatever their
units. Latencies (metrics named ``latency_*``) are mapped in log10: they span two orders of
magnitude in these spaces (0.04 s to 10 s), and users judge speed-ups as ratios — 2x faster is
the same gain at 0.1 s as at 4 s — so a linear scale would let the slowest settings own nearly
all the volume. The reference point is :data:`REFERENCE` (1 + :data:`EPSILON`) in every
dimension: the worst feasible value of each objective still adds a sliver, so a front's extreme
points count. The volume itself is the exact 2-D sweep of :func:`tuner.pareto.hypervolume`
(exact in any dimension, fast in two). The exhaustive front's hypervolume is the most any study
on the table can reach, so ``found / front`` is a fraction in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from tuner.pareto import dominates, hypervolume, is_measured_feasible
from tuner.storage.attributes import is_measured

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

EPSILON = 1e-3
REFERENCE = 1.0 + EPSILON
LOG_SCALED_PREFIXES = ("latency_",)
REACH_TOLERANCE = 1e-12
"""How far below a target a fraction may be and still reach it (:func:`trials_to_reach`): a volume is a
float sum of boxes, so a study that found the whole front may sit a rounding error below 1."""
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Normalizer:
    """Maps objective values (in the spec's units and directions) to [0, 1], 0 best (see module docs)."""

    names: tuple[str, ...]
    directions: tuple[str, ...]
    log: tuple[bool, ...]
    low: tuple[float, ...]  # of the (log-)scaled values, over the feasible settings
    high: tuple[float, ...]

    @staticmethod
    def over(values: Iterable[Sequence[float]], names: Sequence[str], directions: Sequence[str]) -> Normalizer:
        """The normaliser spanning ``values`` (the feasible settings' objective values)."""
        log = tuple(name.startswith(LOG_SCALED_PREFIXES) for name in names)
        scaled = [tuple(_scaled(v, lg) for v, lg in zip(point, log)) for point in values]
        if not scaled:
            raise ValueError("no feasible values to normalise over")
        columns = list(zip(*scaled))
        return Normalizer(
            tuple(names), tuple(directions), log, tuple(min(c) for c in columns), tuple(max(c) for c in columns)
        )

    def normalise(self, values: Sequence[float]) -> tuple[float, ...]:
        """``values`` in [0, 1] per objective (outside when beyond the feasible range), 0 best."""
        point = []
        for value, log, low, high, direction in zip(values, self.log, self.low, self.high, self.directions):
            span = high - low
            share = (_scaled(value, log) - low) / span if span > 0 else 0.0
            point.append(1.0 - share if direction == "maximize" else share)
        return tuple(point)

    def hypervolume(self, points: Iterable[Sequence[float]]) -> float:
        """Normalised hypervolume of ``points`` (objective values as measured) up to :data:`REFERENCE`."""
        return hypervolume([self.normalise(p) for p in points], [REFERENCE] * len(self.names))


def _scaled(value: float, log: bool) -> float:
    return math.log10(max(value, 1e-12)) if log else value


def nondominated(points: Mapping[K, Sequence[float]], directions: Sequence[str]) -> list[K]:
    """Keys of the points no other point dominates (equal points are all kept); O(n x front)."""
    sign = [-1.0 if d == "maximize" else 1.0 for d in directions]
    ordered = sorted(points, key=lambda k: tuple(s * v for s, v in zip(sign, points[k])))
    front: list[K] = []
    for key in ordered:  # a point can only be dominated by one sorted before it
        if not any(dominates(points[kept], points[key], directions) for kept in front):
            front.append(key)
    return front


def run_order(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """``trials`` in the order they ended (then by number): the order a study learnt their results. A proposal
    may run after later ones (parked for its shape's reference, set aside for a reload: :mod:`tuner.study.load_order`),
    so the trial number is the order of asking, not of measuring."""
    return sorted(trials, key=lambda t: (t.datetime_complete or datetime.max, t.number))


def hypervolume_curve(trials: Sequence[FrozenTrial], normalizer: Normalizer) -> list[float]:
    """Normalised hypervolume after each trial that ran a workload, in the order they ended (:func:`run_order`).

    Entry ``i`` is the hypervolume of the feasible measured points among the first ``i + 1``
    trials whose user attribute ``measured`` is true (reference and baseline included). Trials
    that ran nothing — rule-rejected (INVALID), copies of a measured setting, skipped — are free:
    they add no entry. Feasible = :func:`tuner.pareto.is_measured_feasible`.
    """
    directions = ["minimize"] * len(normalizer.names)
    front: list[tuple[float, ...]] = []
    volume = 0.0
    curve: list[float] = []
    for trial in run_order(trials):
        if is_measured_feasible(trial) and trial.values is not None:
            point = normalizer.normalise(trial.values)
            if not any(dominates(kept, point, directions) or kept == point for kept in front):
                front = [kept for kept in front if not dominates(point, kept, directions)] + [point]
                volume = hypervolume(front, [REFERENCE] * len(point))
        if is_measured(trial):
            curve.append(volume)
    return curve


def trials_to_reach(fractions: Sequence[float], target: float) -> int | None:
    """The number of measured trials after which a study first reached ``target``; None when it never did.

    ``fractions``: the study's found hypervolume over the exhaustive front's after each measured trial
    (entry ``i`` after trial ``i + 1``, as :func:`hypervolume_curve` divided by the front's volume), a
    unitless fraction in [0, 1]; ``target`` on the same scale (e.g. 0.95). Returns the 1-based count
    ``i + 1`` of the first entry ``>= target - REACH_TOLERANCE`` (reached or passed: higher is better,
    and equal counts); later entries, even lower ones, do not matter. The one definition of "first
    reached": the replay report and the benches map the count to device-seconds themselves
    (``device_s[count - 1]``, the cumulative device-seconds after that trial).
    """
    for index, fraction in enumerate(fractions):
        if fraction >= target - REACH_TOLERANCE:
            return index + 1
    return None
