"""Two samplers used ONLY as benchmark baselines (``bench/search_efficiency.py``), never by studies.

They answer "how much better than the obvious is the tuner's search?":

* :class:`SweepSampler` — the grid a person sweeps by hand: nested loops over the spec's
  parameters in spec order, the last parameter varying fastest. Each parameter's values start at
  the reference setting's value and move away from it: the values in order of their distance
  from the reference's value in the parameter's ordered values (:func:`tuner.spec.space.grid`:
  int and float ranges ascending, categorical choices as written, bool ``False, True``), the
  lower one first when two are equally far. For a reference at the top of a range that is
  ``24, 18, 12, 6``; in the middle of ``[a, b, c, d]`` at ``b``: ``b, a, c, d``. A parameter
  the reference does not set starts at its first value. Deterministic (no seed); settings already
  in the study (the reference, the baseline) are skipped, as a person would not measure them
  twice. It marks itself :attr:`~SweepSampler.exhausted` once every setting was proposed, like
  :func:`tuner.search.samplers.AskTellGridSampler` (the coordinator reads ``sampler.exhausted``).
* :class:`HillClimbSampler` — Triton Model Analyzer's quick search made multi-objective (a Pareto
  local search): it starts from the spec's baseline (measured second, after the reference) and
  proposes an unvisited neighbour — one parameter one step up or down in its ordered values —
  of a point on the current feasible front, the most recently added point first, its neighbours
  in a seeded random order. When no front point has an unvisited neighbour it jumps to a
  uniformly random unvisited setting (seeded); with no feasible point yet, the baseline stands
  in for the front. Exhausted once every setting of the space has been visited.

"Visited" means any trial of the study holds the setting (finished, running or waiting), so
neither sampler proposes a setting twice. Both sample every parameter in
:meth:`sample_relative`; :meth:`sample_independent` (a parameter outside the spec) falls back to
Optuna's RandomSampler.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from tuner.pareto import front_trials
from tuner.spec.candidate import canonical_key
from tuner.spec.space import distributions, grid
from tuner.storage.attributes import enqueued_params

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.study import Study
    from optuna.trial import FrozenTrial, TrialState

    from tuner.spec.models import StudySpec


def _index(values: Sequence[Any], value: Any) -> int | None:
    """Position of ``value`` in ``values`` (same type and value: ``1`` is not ``True``)."""
    for index, candidate in enumerate(values):
        if type(candidate) is type(value) and candidate == value:
            return index
    return None


def sweep_values(values: Sequence[Any], start: Any) -> list[Any]:
    """``values`` ordered by distance from ``start``'s position, the lower side first on ties."""
    origin = _index(values, start)
    if origin is None:
        return list(values)
    return [values[i] for i in sorted(range(len(values)), key=lambda i: (abs(i - origin), i))]


def sweep_order(spec: StudySpec) -> list[dict[str, Any]]:
    """Every setting of ``spec``'s space in the hand-sweep order (see the module docstring)."""
    reference = spec.reference or {}
    columns = {
        name: sweep_values(values, reference[name]) if name in reference else list(values)
        for name, values in grid(spec).items()
    }
    return [dict(zip(columns, combo)) for combo in itertools.product(*columns.values())]


class _TableSampler(optuna.samplers.BaseSampler):
    """What both baselines share: the spec's space, visited keys, relative sampling of every parameter."""

    exhausted = False

    def __init__(self, spec: StudySpec, seed: int | None = None) -> None:
        self._names = list(spec.parameters)
        self._distributions = distributions(spec)
        self._fallback = optuna.samplers.RandomSampler(seed=seed)

    def _key(self, params: Mapping[str, Any]) -> str:
        return canonical_key({name: params[name] for name in self._names})

    def _setting_of(self, trial: FrozenTrial) -> dict[str, Any] | None:
        """The trial's full setting: its params, else its enqueued (fixed) params; None when partial."""
        for source in (trial.params, enqueued_params(trial) or {}):
            if all(name in source for name in self._names):
                return {name: source[name] for name in self._names}
        return None

    def _visited(self, study: Study) -> set[str]:
        settings = (self._setting_of(t) for t in study.get_trials(deepcopy=False))
        return {self._key(s) for s in settings if s is not None}

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {name: d for name, d in self._distributions.items() if not d.single()}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def _answer(self, setting: Mapping[str, Any], search_space: Mapping[str, Any]) -> dict[str, Any]:
        return {name: setting[name] for name in search_space}


class SweepSampler(_TableSampler):
    """The hand sweep (benchmark baseline only; see the module docstring)."""

    def __init__(self, spec: StudySpec, seed: int | None = None) -> None:
        super().__init__(spec, seed)
        self.order = sweep_order(spec)
        self._keys = [self._key(s) for s in self.order]
        self._cursor = 0
        self._visited_keys: set[str] = set()
        self._seen: set[int] = set()

    def _advance(self, study: Study) -> None:
        for trial in study.get_trials(deepcopy=False):
            if trial.number not in self._seen:
                setting = self._setting_of(trial)
                if setting is not None:
                    self._visited_keys.add(self._key(setting))
                    self._seen.add(trial.number)
        while self._cursor < len(self._keys) and self._keys[self._cursor] in self._visited_keys:
            self._cursor += 1

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space or enqueued_params(trial) is not None:
            return {}
        self._advance(study)
        if self._cursor >= len(self.order):
            self.exhausted = True
            return self._answer(self.order[0], search_space)  # asked past the end: a copy, free
        setting = self.order[self._cursor]
        self._visited_keys.add(self._keys[self._cursor])
        self._cursor += 1
        return self._answer(setting, search_space)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self._advance(study)
        self.exhausted = self._cursor >= len(self.order)


class HillClimbSampler(_TableSampler):
    """Pareto local search from the baseline (benchmark baseline only; see the module docstring)."""

    def __init__(self, spec: StudySpec, seed: int | None = None) -> None:
        super().__init__(spec, seed)
        self._values = grid(spec)
        self._directions = [o.direction for o in spec.objectives]
        self._start = dict(spec.baseline or spec.reference or {})
        self._rng = random.Random(seed)
        names = list(self._values)
        self._all = [dict(zip(names, combo)) for combo in itertools.product(*self._values.values())]
        self._all_keys = [self._key(s) for s in self._all]

    def neighbours(self, setting: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Settings one step up or down in one parameter's ordered values, in a seeded random order."""
        found: list[dict[str, Any]] = []
        for name, values in self._values.items():
            index = _index(values, setting.get(name))
            if index is None:
                continue
            for step in (-1, 1):
                if 0 <= index + step < len(values):
                    found.append({**setting, name: values[index + step]})
        self._rng.shuffle(found)
        return found

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space or enqueued_params(trial) is not None:
            return {}
        trials = study.get_trials(deepcopy=False)
        visited = self._visited(study)
        front = front_trials(trials, self._directions)
        anchors = [dict(t.params) for t in sorted(front, key=lambda t: -t.number)]
        if not anchors and self._start:
            anchors = [self._start]
        for anchor in anchors:
            for neighbour in self.neighbours(anchor):
                if self._key(neighbour) not in visited:
                    return self._answer(neighbour, search_space)
        unvisited = [s for s, key in zip(self._all, self._all_keys) if key not in visited]
        if not unvisited:
            self.exhausted = True
            return self._answer(self._all[0], search_space)  # asked past the end: a copy, free
        return self._answer(self._rng.choice(unvisited), search_space)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self.exhausted = len(self._visited(study)) >= len(self._all)
