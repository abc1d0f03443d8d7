"""What one measured call says of its neighbours along its count knob (issue 38: one measured call tells most of
what its neighbours cost).

A diffusion call repeats one denoising step ``num_inference_steps`` times, an AV-LLM call one decoding step per
new token. A workload that reports its cost structure (:mod:`tuner.evaluators.runtime.structure`) records the
median step of that series (:data:`SERIES_PHASES`' keys: ``denoise_step_s``, ``decode_token_s``) and the seconds
of the whole series: its phase (``denoise_s``) or, where the series has no phase of its own, what the call spends
after its once-per-call phases (:func:`tuner.search.fitting.split_latency.split_parts`). Their ratio is the series' length
when its steps cost alike, so a run whose ratio lies within :data:`MATCH` of a numeric knob's value ran that many
uniform steps. The knob that most runs match (at least :data:`MIN_VOTES`) is the study's count knob -- found
from the runs, named by no one.

A run whose series was uniform then stands for the same setting at the count knob's other values:
``latency + (value' - value) x series seconds / value``, its once-per-call phases unchanged (:meth:`CountNeighbours.
derived`). The predictor (:mod:`tuner.search.prediction`) fits its latency model on these derived runs beside the
measured ones; they never count as runs (``MIN_FIT``, ``fitted_on``) nor among the held-out errors that set a
prediction's interval.

Nothing is derived from a run whose series was not uniform (a cache that skips work on some steps: its pattern
changes with the count; a generation that stopped at an end token before ``max_new_tokens``: its length is not
the knob's), from a warm start's runs of another GPU type, or for any metric but the latency. The count knob's
other values: every choice of a categorical of numbers; of an integer range, its ends and their geometric mean.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.search.fitting.split_latency import split_parts

if TYPE_CHECKING:
    import numpy as np
    from optuna.distributions import BaseDistribution

SERIES_PHASES: dict[str, str | None] = {"denoise_step_s": "denoise_s", "decode_token_s": None}
"""A series' median-step metric (s) -> the phase metric (s) of the whole series; None: the call's time after its
once-per-call phases."""
MATCH = 0.15
"""A run's series seconds / its median step may differ this much (a fraction) from the knob's value and still
count as that many uniform steps."""
MIN_VOTES = 2
"""Fewest runs that must match a knob before it is taken for the count knob."""


@dataclass(frozen=True)
class SeriesRun:
    """One measured run (``key``: the caller's name for it), its latency (s), the seconds of its repeated series, the series seconds / its median step,
    and its ``(once, rest)`` parts (s; None: no once-per-call phases recorded)."""

    key: int
    params: Mapping[str, Any]
    latency_s: float
    series_s: float
    length: float
    parts: tuple[float, float] | None


def series_run(key: int, params: Mapping[str, Any], figures: Mapping[str, Any], latency_s: float) -> SeriesRun | None:
    """The run's series as :class:`SeriesRun`; None when it recorded no series (a workload without structure)."""
    parts = split_parts(latency_s, figures)
    for step_metric, phase_metric in SERIES_PHASES.items():
        step = _positive((figures.get(step_metric) or {}).get("value"))
        if step is None:
            continue
        whole = _positive((figures.get(phase_metric) or {}).get("value")) if phase_metric else None
        if whole is None and parts is not None:
            whole = parts[1]
        if whole is not None:
            return SeriesRun(key, dict(params), latency_s, whole, whole / step, parts)
    return None


def count_values(distribution: BaseDistribution) -> tuple[float, ...] | None:
    """The values a count knob may take that derived runs stand for (see the module docstring); None: the
    parameter cannot be a count (not a positive number)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        choices = list(distribution.choices)
        if len(choices) > 1 and all(isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0 for c in choices):
            return tuple(float(c) for c in choices)
        return None
    if isinstance(distribution, IntDistribution) and distribution.low >= 1 and distribution.high > distribution.low:
        middle = round(math.sqrt(distribution.low * distribution.high))
        return tuple(float(v) for v in sorted({distribution.low, middle, distribution.high}))
    return None


class CountNeighbours:
    """The study's series runs and the runs derived from them (see the module docstring). ``space``: the study's
    distributions; :meth:`add` each own measured OK run once."""

    def __init__(self, space: Mapping[str, BaseDistribution]) -> None:
        self._values = {name: v for name, d in space.items() if (v := count_values(d)) is not None}
        self._runs: list[SeriesRun] = []
        self._votes: Counter[str] = Counter()

    def add(self, key: int, params: Mapping[str, Any], figures: Mapping[str, Any], latency_s: float) -> None:
        """Take in a measured run (``key``: the caller's name for it, handed back with each run derived from it),
        its metrics (``{name: {"value": ...}}``) and its latency (s)."""
        run = series_run(key, params, figures, latency_s)
        if run is None:
            return
        self._runs.append(run)
        for name in self._values:
            if _uniform(run, params.get(name)):
                self._votes[name] += 1

    def knob(self) -> str | None:
        """The count knob: the parameter most runs' series length matches, at least :data:`MIN_VOTES` of them."""
        if not self._votes:
            return None
        name, votes = self._votes.most_common(1)[0]
        return name if votes >= MIN_VOTES else None

    def derived(self) -> list[tuple[int, dict[str, Any], float, tuple[float, float] | None]]:
        """Each derived run: the key of the run it comes from, its setting, its latency (s) and its ``(once,
        rest)`` parts (s; None where the run it comes from recorded no once-per-call phases), in the order the
        runs were added."""
        knob = self.knob()
        if knob is None:
            return []
        out: list[tuple[int, dict[str, Any], float, tuple[float, float] | None]] = []
        for run in self._runs:
            value = run.params.get(knob)
            if not _uniform(run, value):
                continue
            step = run.series_s / float(value)  # type: ignore[arg-type]
            for other in self._values[knob]:
                if other == float(value):  # type: ignore[arg-type]
                    continue
                shift = (other - float(value)) * step  # type: ignore[arg-type]
                latency = run.latency_s + shift
                if latency <= 0:
                    continue
                params = {**run.params, knob: _like(value, other)}
                parts = None
                if run.parts is not None:
                    once, rest = run.parts
                    parts = (once, max(rest + shift, 0.01 * latency))
                out.append((run.key, params, latency, parts))
        return out


def derived_groups(sources: Sequence[int], measured: int) -> list[list[int]] | None:
    """Each measured row's group of rows in a fit whose first ``len(sources)`` rows are derived (``sources``: the
    index among the ``measured`` rows after them of each one's run): its own row index first, then its derived
    rows'; None: nothing derived."""
    if not sources:
        return None
    derived = len(sources)
    groups = [[derived + index] for index in range(measured)]
    for row, source in enumerate(sources):
        groups[source].append(row)
    return groups


def held_out_by_group(matrix: np.ndarray, values: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """The held-out error of each group's first row with the whole group left out: ``solve(matrix[g, g],
    values[g])[0]`` (for ridge: ``I - H`` and the residuals; for the process: the inverted system and its
    weights)."""
    import numpy as np

    out = np.empty(len(groups))
    for position, group in enumerate(groups):
        if len(group) == 1:
            out[position] = values[group[0]] / max(float(matrix[group[0], group[0]]), 1e-12)
        else:
            out[position] = np.linalg.lstsq(matrix[np.ix_(group, group)], values[group], rcond=None)[0][0]
    return out


def _uniform(run: SeriesRun, value: Any) -> bool:
    """Whether the run's series length is the knob's ``value`` (a uniform series of that many steps)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return False
    return abs(run.length / float(value) - 1.0) <= MATCH


def _like(value: Any, other: float) -> Any:
    """``other`` in the type of the knob's ``value`` (an int knob's choices are ints)."""
    return int(round(other)) if isinstance(value, int) else other


def _positive(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


__all__ = [
    "MATCH",
    "MIN_VOTES",
    "SERIES_PHASES",
    "CountNeighbours",
    "SeriesRun",
    "count_values",
    "derived_groups",
    "held_out_by_group",
    "series_run",
]
