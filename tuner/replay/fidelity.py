"""Multi-fidelity screening, judged on two measured tables: a cheap proxy and the full measurement.

The proxy is the same space measured on cheaper inputs (``avatar_dit_proxy``: 1 s of audio
instead of 3 s). Two questions decide whether screening candidates on it is safe:

* **rank agreement** — :func:`kendall_tau` (tau-b, ties counted) between the proxy's and the
  full measurement's value of each objective, over every setting both tables measured OK;
* **saving and front loss** — :func:`screening_replay` walks the settings in a seeded random
  order (the stream of proposals a sampler would make, sampler-agnostic) twice: measuring
  each in full, and screening — each setting first costs its proxy run and is measured in
  full only when its proxy point is feasible and on the front of the proxy points seen so far.
  Cost is model time: the recorded ``latency_p50_s`` of each run made (seconds; equal call
  counts assumed for proxy and full runs). The result: the cost to reach a share of the
  exhaustive front's hypervolume with and without screening, and the share screening ends
  with after the whole space (what it throws away).

Both tables must hold the same space; the full table's :class:`~.methods.Target` gives the
normaliser and the exhaustive front.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tuner.replay.hypervolume import nondominated
from tuner.replay.methods import Target
from tuner.replay.table import MeasuredTable, feasible_values
from tuner.results import Outcome

LATENCY = "latency_p50_s"


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of two equally long samples (ties in either count as neither concordant nor
    discordant, and shrink the denominator); nan when either sample is constant."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"samples differ in length: {x.size} and {y.size}")
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    upper = np.triu_indices(x.size, k=1)
    sx, sy = dx[upper], dy[upper]
    denominator = float(np.sqrt(np.count_nonzero(sx) * np.count_nonzero(sy)))
    return float(np.sum(sx * sy)) / denominator if denominator else float("nan")


def rank_agreement(full: MeasuredTable, proxy: MeasuredTable) -> dict[str, float]:
    """Kendall tau per objective metric between ``proxy`` and ``full`` (settings OK in both)."""
    names = [o.metric for o in full.spec.objectives]
    both = [
        (full.rows[key], proxy.rows[key])
        for key in full.rows
        if key in proxy.rows and full.rows[key].outcome is Outcome.OK and proxy.rows[key].outcome is Outcome.OK
    ]
    agreement: dict[str, float] = {}
    for name in names:
        pairs = [(f.values.get(name), p.values.get(name)) for f, p in both]
        known = [(f, p) for f, p in pairs if f is not None and p is not None]
        agreement[name] = kendall_tau([f for f, _ in known], [p for _, p in known])
    return agreement


@dataclass(frozen=True)
class ScreeningRun:
    """One seeded order walked with and without screening (costs in seconds of model time)."""

    seed: int
    full_cost_to: dict[float, float | None]  # share of the front's hypervolume -> cost to reach it
    screened_cost_to: dict[float, float | None]
    full_total_s: float
    screened_total_s: float
    screened_final_share: float  # hypervolume share after the whole space, with screening
    promoted: int
    settings: int


def screening_replay(
    target: Target, proxy: MeasuredTable, seed: int, shares: Sequence[float] = (0.90, 0.95, 0.99)
) -> ScreeningRun:
    """Walk the full table's settings in an order seeded by ``seed``, with and without screening."""
    full = target.table
    full_points = feasible_values(full)
    proxy_points = feasible_values(proxy)
    directions = [o.direction for o in full.spec.objectives]
    keys = sorted(full.rows)
    random.Random(seed).shuffle(keys)

    def cost(table: MeasuredTable, key: str) -> float:
        row = table.rows.get(key)
        value = row.values.get(LATENCY) if row is not None else None
        return float(value) if value is not None else 0.0

    def walk(screen: bool) -> tuple[dict[float, float | None], float, float, int]:
        spent, promoted = 0.0, 0
        measured: list[tuple[float, ...]] = []
        seen_proxy: dict[str, tuple[float, ...]] = {}
        reached: dict[float, float | None] = dict.fromkeys(shares)
        for key in keys:
            if screen:
                spent += cost(proxy, key)
                if key not in proxy_points:
                    continue
                seen_proxy[key] = proxy_points[key]
                if key not in nondominated(seen_proxy, directions):
                    continue
                promoted += 1
            spent += cost(full, key)
            if key in full_points:
                measured.append(full_points[key])
            share = target.normalizer.hypervolume(measured) / target.front_hypervolume
            for goal in shares:
                if reached[goal] is None and share >= goal - 1e-12:
                    reached[goal] = spent
        final = target.normalizer.hypervolume(measured) / target.front_hypervolume
        return reached, spent, final, promoted

    full_reached, full_total, _, _ = walk(screen=False)
    screened_reached, screened_total, final, promoted = walk(screen=True)
    return ScreeningRun(seed, full_reached, screened_reached, full_total, screened_total, final, promoted, len(keys))
