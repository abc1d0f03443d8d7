"""Propose the setting the predictions say adds most to the front per second (issue 38: predict before measuring).

:class:`PredictedGainSampler` wraps the spec's sampler (the *base*: TPE by default). Until the study has
``after`` measured feasible trials, and whenever the predictions cannot choose, the base proposes. From then on
each proposal is chosen among *candidate* settings -- the whole grid of the space when it has at most
:data:`POOL` settings, else :data:`POOL` settings drawn (seeded) from its distributions -- that the spec's rules
allow and no trial of the study has asked yet:

1. an :class:`~tuner.search.prediction.OutcomePredictor` fitted on the study's trials (latency, the memory
   figure and the quality objectives: :func:`~tuner.search.prediction.quality_objectives`) predicts each
   candidate's value on every objective;
2. its *gain* is the hypervolume its predicted point adds to the current front (objectives scaled to [0, 1]
   over the measured feasible trials, reference point 1.1 on each; the predicted points of trials asked but not
   yet told count as measured, so proposals asked ahead spread out instead of repeating one guess);
3. the candidate with the largest gain per predicted second (its predicted ``latency_p50_s``: what measuring it
   costs, up to the calls per trial, the same for every candidate) is proposed.

No candidate predicted to add anything, an objective not predicted yet, or no candidate left: the base proposes
(TPE's own exploration). The base still sees every trial (TPE learns from the chosen ones as from its own). The
predicted centre is used, not the interval's optimistic end: on the replayed tables the optimistic end chose
slow, uncertain settings first and reached the front later (docs/benchmarks.md). Skipping what the front beats
(:mod:`tuner.search.dominance`) and a setting's measurement are unchanged: a chosen setting runs like any other,
and nothing enters the front unmeasured.

A study whose objectives include no ``latency_p50_s`` has no cost to divide by: each gain counts as per call.
:attr:`PredictedGainSampler.chosen` keeps, per trial number, the gain of each proposal this sampler chose (in
memory, for the benchmarks and tests).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tuner.pareto import front_trials, hypervolume, is_measured_feasible, minimised
from tuner.search.prediction import LATENCY, OutcomePredictor, setting_features
from tuner.spec.space import distributions, resolve

if TYPE_CHECKING:
    import numpy as np
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from tuner.spec.models import StudySpec

POOL = 3000
"""The most candidate settings scored per proposal: the whole grid when it is no larger, else a seeded sample."""
REFERENCE = 1.1
"""The hypervolume's reference point on each objective scaled to [0, 1] over the measured trials."""


def candidate_pool(spec: StudySpec, seed: int, pool: int = POOL) -> list[dict[str, Any]]:
    """The settings :class:`PredictedGainSampler` scores: every setting of the space when it has at most ``pool``
    (ints and categoricals; a float parameter with a step counts its steps), else ``pool`` drawn at random
    (seeded by ``seed``) from the distributions; those the spec's rules refuse are left out."""
    values = _finite_values(distributions(spec))
    if values is not None and math.prod(len(v) for v in values.values()) <= pool:
        names = list(values)
        settings = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values.values())]
    else:
        rng = random.Random(seed)
        settings = [_draw(distributions(spec), rng) for _ in range(pool)]
    return [setting for setting in settings if resolve(spec, setting)[0] is not None]


def _finite_values(space: Mapping[str, BaseDistribution]) -> dict[str, list[Any]] | None:
    """Every value of every parameter, or None when one is a float without a step (not enumerable)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    values: dict[str, list[Any]] = {}
    for name, distribution in space.items():
        if isinstance(distribution, CategoricalDistribution):
            values[name] = list(distribution.choices)
        elif isinstance(distribution, IntDistribution) and not distribution.log:
            values[name] = list(range(distribution.low, distribution.high + 1, distribution.step))
        elif isinstance(distribution, FloatDistribution) and distribution.step is not None:
            count = int(round((distribution.high - distribution.low) / distribution.step)) + 1
            values[name] = [round(distribution.low + i * distribution.step, 12) for i in range(count)]
        else:
            return None
    return values


def _draw(space: Mapping[str, BaseDistribution], rng: random.Random) -> dict[str, Any]:
    """One setting drawn from ``space`` (log distributions uniformly in the log)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    setting: dict[str, Any] = {}
    for name, distribution in space.items():
        if isinstance(distribution, CategoricalDistribution):
            setting[name] = rng.choice(list(distribution.choices))
        elif isinstance(distribution, (IntDistribution, FloatDistribution)):
            low, high = float(distribution.low), float(distribution.high)
            value = math.exp(rng.uniform(math.log(low), math.log(high))) if distribution.log else rng.uniform(low, high)
            step = distribution.step
            if step is not None:
                value = low + round((value - low) / step) * step
            setting[name] = int(round(value)) if isinstance(distribution, IntDistribution) else value
    return setting


def predicted_gain_sampler(
    spec: StudySpec, base: optuna.samplers.BaseSampler, seed: int, after: int
) -> optuna.samplers.BaseSampler:
    """``base`` wrapped in :class:`PredictedGainSampler` (an Optuna ``BaseSampler``)."""
    import optuna

    class Sampler(PredictedGainSampler, optuna.samplers.BaseSampler):
        pass

    return Sampler(spec, base, seed, after)  # type: ignore[abstract]


class PredictedGainSampler:
    """The hooks of a sampler choosing by predicted gain per second (see the module docstring; made an Optuna
    ``BaseSampler`` by :func:`predicted_gain_sampler`); ``base`` proposes before ``after`` measured feasible
    trials and whenever the predictions cannot choose."""

    def __init__(self, spec: StudySpec, base: optuna.samplers.BaseSampler, seed: int, after: int) -> None:
        self.spec = spec
        self.base = base
        self.after = after
        self._space = distributions(spec)
        self._candidates = candidate_pool(spec, seed)
        self._rows = [setting_features(candidate, self._space, prior=False) for candidate in self._candidates]
        self._directions = [objective.direction for objective in spec.objectives]
        self._names = [objective.metric for objective in spec.objectives]
        self._chosen: dict[int, dict[str, Any]] = {}  # trial number -> the setting chosen for it, until told
        self.chosen: dict[int, float] = {}  # trial number -> the predicted gain per second it was chosen for

    def reseed_rng(self) -> None:
        self.base.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)
        choice = self.choose(study.get_trials(deepcopy=False))
        if choice is not None:
            setting, gain = choice
            self._chosen[trial.number] = setting
            self.chosen[trial.number] = gain

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: Mapping[str, BaseDistribution]
    ) -> dict[str, Any]:
        chosen = self._chosen.get(trial.number)
        if chosen is not None:
            return {name: chosen[name] for name in search_space if name in chosen}
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        chosen = self._chosen.get(trial.number)
        if chosen is not None and param_name in chosen:
            return chosen[param_name]
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: Any, values: Sequence[float] | None) -> None:
        self._chosen.pop(trial.number, None)
        self.base.after_trial(study, trial, state, values)

    def choose(self, trials: Sequence[FrozenTrial]) -> tuple[dict[str, Any], float] | None:
        """The candidate with the largest predicted gain per second and that gain (module docstring); None when
        the base should propose."""
        import numpy as np

        measured = [t for t in trials if is_measured_feasible(t) and t.values is not None]
        if len(measured) < self.after:
            return None
        asked = {_key(t.params) for t in trials}
        open_ = [index for index, candidate in enumerate(self._candidates) if _key(candidate) not in asked]
        if not open_:
            return None
        predictor = OutcomePredictor(self.spec, self._space, quality=True)
        predictor.update(trials)
        pending = [t.params for t in trials if not t.state.is_finished() and t.params]
        rows = np.asarray(
            [self._rows[index] for index in open_]
            + [setting_features(params, self._space, prior=False) for params in pending]
        )
        predicted = predictor.centres(rows)
        if any(name not in predicted for name in self._names):
            return None
        values = np.column_stack([predicted[name] for name in self._names])
        seconds = device_seconds(measured, predicted[LATENCY]) if LATENCY in predicted else np.ones(len(rows))
        scale = _Scale([minimised(t.values, self._directions) for t in measured])  # type: ignore[arg-type]
        front = [scale(minimised(t.values, self._directions)) for t in front_trials(measured, self._directions)]  # type: ignore[arg-type]
        front += [scale(minimised(point, self._directions)) for point in values[len(open_) :]]  # asked, not told
        reference = (REFERENCE,) * len(self._names)
        base = hypervolume(front, reference)
        best: tuple[dict[str, Any], float] | None = None
        for position, index in enumerate(open_):
            point = scale(minimised(values[position], self._directions))
            if not all(x < r for x, r in zip(point, reference, strict=True)):
                continue
            gain = (hypervolume([*front, point], reference) - base) / max(float(seconds[position]), 1e-9)
            if gain > 0 and (best is None or gain > best[1]):
                best = (self._candidates[index], gain)
        return best


def device_seconds(measured: Sequence[FrozenTrial], latency: np.ndarray) -> np.ndarray:
    """What measuring a setting of predicted ``latency`` (seconds) costs in device-seconds: ``a + b x latency``,
    a line through the measured trials' recorded device-seconds (``cost.device_s``: start-up, warm-ups, the
    timed calls, evaluation) against their latency; ``b >= 1`` (a trial makes one call at least), ``a >= 0``.
    Fewer than three trials with both: the latency itself."""
    import numpy as np

    from tuner.storage.attributes import cost_of, metrics_of
    from tuner.storage.cost import device_s_of

    pairs = []
    for trial in measured:
        spent = device_s_of(cost_of(trial))
        latency_s = (metrics_of(trial).get(LATENCY) or {}).get("value")
        if spent is not None and isinstance(latency_s, (int, float)) and latency_s > 0:
            pairs.append((float(latency_s), spent))
    if len(pairs) < 3:
        return latency
    x, y = np.asarray(pairs).T
    slope = max(1.0, float(np.polyfit(x, y, 1)[0])) if np.ptp(x) > 0 else 1.0
    intercept = max(0.0, float(np.median(y - slope * x)))
    return intercept + slope * latency  # type: ignore[no-any-return]


class _Scale:
    """Minimised objective values scaled to [0, 1] over the measured points (a flat objective: width 1)."""

    def __init__(self, points: Sequence[Sequence[float]]) -> None:
        self.low = [min(column) for column in zip(*points, strict=True)]
        self.width = [
            (max(column) - low) or 1.0 for column, low in zip(zip(*points, strict=True), self.low, strict=True)
        ]

    def __call__(self, point: Sequence[float]) -> tuple[float, ...]:
        return tuple((x - low) / width for x, low, width in zip(point, self.low, self.width, strict=True))


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A setting's identity (values as text: 4 and 4.0 of a categorical are one choice)."""
    return tuple(sorted((name, repr(value)) for name, value in params.items()))
