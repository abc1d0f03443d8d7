"""Propose the setting the predictions say adds most to the front per second (issue 38: predict before measuring).

:class:`PredictedGainSampler` wraps the spec's sampler (the *base*: TPE by default). Each proposal is chosen
among *candidate* settings -- the whole grid of the space when it has at most :data:`POOL` settings, else
:data:`POOL` settings drawn (seeded) from its distributions -- that the spec's rules allow and no trial of the
study has asked yet. Every choice is weighed by what measuring a candidate costs in device-seconds
(:mod:`tuner.search.trial_cost`): its predicted ``latency_p50_s`` through a line fitted on the study's trials'
recorded device-seconds (start-up, warm-ups and evaluation besides the timed calls), plus a model reload where
its ``reload_on`` values differ from the loaded ones, plus its shape's reference where that reference has not run
(with ``reference_shape.per`` the loop queues it first).

*The spread start* (``start: spread``, the default), until the study has ``after`` measured feasible trials:
once three runs predict the latency, the candidate with the largest squared distance (in the predictor's
feature space) to the nearest setting any trial asked, per predicted device-second -- a space-filling design
that prefers cheap settings, so the models see the whole space early for little device time (a candidate's own
run only: a shape's reference it queues is part of seeing that shape). Before the latency is predicted, or with
``start: sampler``, the base proposes.

*The predicted gain*, from ``after`` measured feasible trials on:

1. an :class:`~tuner.search.prediction.OutcomePredictor` fitted on the study's trials (latency, the memory
   figure and the quality objectives: :func:`~tuner.search.prediction.quality_objectives`) predicts each
   candidate's value on every objective;
2. its *gain* is the hypervolume its predicted point adds to the current front (objectives scaled to [0, 1]
   over the measured feasible trials, reference point 1.1 on each; the predicted points of trials asked but not
   yet told count as measured, so proposals asked ahead spread out instead of repeating one guess; a candidate
   whose shape's reference would run first adds that reference's predicted point too);
3. the candidate with the largest gain per predicted device-second is proposed.

Each finished trial is read once (its attributes folded into the predictor, the measured range and the front),
so a proposal costs as much in a study of thousands of trials as in one of ten.

No candidate predicted to add anything, an objective not predicted yet, or no candidate left: the base proposes
(TPE's own exploration). The base still sees every trial (TPE learns from the chosen ones as from its own). The
predicted centre is used, not the interval's optimistic end: on the replayed tables the optimistic end chose
slow, uncertain settings first and reached the front later (docs/benchmarks.md). Skipping what the front beats
(:mod:`tuner.search.dominance`) and a setting's measurement are unchanged: a chosen setting runs like any other,
and nothing enters the front unmeasured.

A study whose trials record no ``latency_p50_s`` has no cost to divide by: each gain counts as per call, and the
spread start leaves the proposals to the base. :attr:`PredictedGainSampler.chosen` keeps, per trial
number, the gain of each proposal chosen by predicted gain, :attr:`PredictedGainSampler.spread` the score of
each spread-start pick (in memory, for the benchmarks and tests).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tuner.pareto import dominates, hypervolume, is_measured_feasible, minimised
from tuner.search.prediction import LATENCY, OutcomePredictor
from tuner.search.setting_features import setting_features
from tuner.search.trial_cost import ShapeCosts, TrialCost
from tuner.spec.search.reload import reload_values
from tuner.spec.space import distributions, grid, resolve

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
    space = distributions(spec)
    if _grid_counts(space, pool) is not None:
        values = grid(spec)
        names = list(values)
        settings = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values.values())]
    else:
        rng = random.Random(seed)
        settings = [_draw(space, rng) for _ in range(pool)]
    return [setting for setting in settings if resolve(spec, setting)[0] is not None]


def _grid_counts(space: Mapping[str, BaseDistribution], limit: int) -> dict[str, int] | None:
    """Each parameter's count of values when the grid has at most ``limit`` settings; None when it has more or a
    parameter is not enumerable (a float without a step, a log-scaled int). Counted before any list is built."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    counts: dict[str, int] = {}
    for name, distribution in space.items():
        if isinstance(distribution, CategoricalDistribution):
            counts[name] = len(distribution.choices)
        elif isinstance(distribution, IntDistribution) and not distribution.log:
            counts[name] = (distribution.high - distribution.low) // distribution.step + 1
        elif isinstance(distribution, FloatDistribution) and distribution.step is not None:
            counts[name] = int(round((distribution.high - distribution.low) / distribution.step)) + 1
        else:
            return None
    return counts if math.prod(counts.values()) <= limit else None


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
    spec: StudySpec, base: optuna.samplers.BaseSampler, seed: int, after: int, start: str = "spread"
) -> optuna.samplers.BaseSampler:
    """``base`` wrapped in :class:`PredictedGainSampler` (an Optuna ``BaseSampler``)."""
    import optuna

    class Sampler(PredictedGainSampler, optuna.samplers.BaseSampler):
        pass

    return Sampler(spec, base, seed, after, start)  # type: ignore[abstract]


class PredictedGainSampler:
    """The hooks of a sampler choosing by predicted gain per second (see the module docstring; made an Optuna
    ``BaseSampler`` by :func:`predicted_gain_sampler`); ``base`` proposes before ``after`` measured feasible
    trials and whenever the predictions cannot choose."""

    def __init__(
        self, spec: StudySpec, base: optuna.samplers.BaseSampler, seed: int, after: int, start: str = "spread"
    ) -> None:
        self.spec = spec
        self.base = base
        self.after = after
        self.start = start
        self._space = distributions(spec)
        self._candidates = candidate_pool(spec, seed)
        self._rows = [setting_features(candidate, self._space, prior=False) for candidate in self._candidates]
        self._shapes = ShapeCosts(spec, self._space, self._candidates)
        self._directions = [objective.direction for objective in spec.objectives]
        self._names = [objective.metric for objective in spec.objectives]
        self._chosen: dict[int, dict[str, Any]] = {}  # trial number -> the setting chosen for it, until told
        self.chosen: dict[int, float] = {}  # trial number -> the predicted gain per second it was chosen for
        self.spread: dict[int, float] = {}  # trial number -> the spread per second of a spread start's pick
        # measured runs only, no runs derived along a count knob: with them, the replayed Omni default reached 95 %
        # of the front in a median 51.2 device-s over 20 seeds, without them 33.6 (docs/benchmarks.md)
        # and the residual process's scales chosen by held-out error (with the recorded predictions' fixed ones, the
        # replayed Omni default reached 95 % later: docs/benchmarks.md, "The residual process's scales fixed")
        # and no interaction columns: the recorded predictions come closer with them, but ranked with them the
        # replayed default reached 95 % of the front 10-13 % later on Wan, Omni and avatar (docs/benchmarks.md)
        self._predictor = OutcomePredictor(
            spec, self._space, quality=True, neighbours=False, choose_process=True, interactions=False
        )
        self._folded: set[int] = set()  # finished trials taken in (each read once)
        self._points: list[tuple[float, ...]] = []  # the measured feasible trials' values, minimised
        self._low: list[float] = []  # their range per objective
        self._high: list[float] = []
        self._front: list[tuple[float, ...]] = []  # the non-dominated ones (each value once)
        self._cost = TrialCost(spec)  # device-seconds per candidate, from the trials' recorded cost
        self._reloads = [reload_values(self._cost.reload_on, candidate) for candidate in self._candidates]

    def reseed_rng(self) -> None:
        self.base.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)
        choice = self.choose(study.get_trials(deepcopy=False))
        spreading = len(self._points) < self.after  # counted after choose() took the finished trials in
        if choice is not None:
            setting, score = choice
            self._chosen[trial.number] = setting
            (self.spread if spreading else self.chosen)[trial.number] = score

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
        """The proposal and what it was chosen for (module docstring): before ``after`` measured feasible trials
        the spread start's pick and its spread per second, from then on the candidate with the largest predicted
        gain per second and that gain; None when the base should propose. Each finished trial's attributes are
        read once (:meth:`_fold`), so a proposal costs the same in a study of ten trials or of thousands."""
        import numpy as np

        self._fold(trials)
        gaining = len(self._points) >= self.after
        if not gaining and self.start != "spread":
            return None
        asked = {_key(t.params) for t in trials}
        open_ = [index for index, candidate in enumerate(self._candidates) if _key(candidate) not in asked]
        if not open_:
            return None
        pending = [t.params for t in trials if not t.state.is_finished() and t.params]
        missing = self._shapes.missing(trials)  # shapes whose reference a candidate there would queue first
        rows = np.asarray(
            [self._rows[index] for index in open_]
            + [setting_features(params, self._space, prior=False) for params in pending]
            + [self._shapes.rows[shape] for shape in missing]
        )
        predicted = self._predictor.centres(rows)
        if LATENCY in predicted:
            loads = [self._reloads[index] for index in open_] + [
                reload_values(self._cost.reload_on, params)
                for params in [*pending, *(self._shapes.params[shape] for shape in missing)]
            ]
            seconds = self._cost.seconds(predicted[LATENCY], loads, self._cost.loaded(trials))
        elif gaining:
            seconds = np.ones(len(rows))
        else:
            return None  # the spread start weighs by the predicted latency: the base proposes until it is
        if not gaining:  # a shape's reference is not charged here: it is part of seeing that shape
            return self._spread(trials, open_, rows, np.asarray(seconds[: len(open_)]))
        first = {shape: len(open_) + len(pending) + n for n, shape in enumerate(missing)}  # a missing shape's row
        spent = np.asarray([self._spent(index, position, seconds, first) for position, index in enumerate(open_)])
        if any(name not in predicted for name in self._names):
            return None
        values = np.column_stack([predicted[name] for name in self._names])
        scale = _Scale(self._low, self._high)
        front = [scale(point) for point in self._front]
        front += [scale(minimised(point, self._directions)) for point in values[len(open_) : len(open_) + len(pending)]]
        reference = (REFERENCE,) * len(self._names)
        base = hypervolume(front, reference)
        best: tuple[dict[str, Any], float] | None = None
        for position, index in enumerate(open_):
            point = scale(minimised(values[position], self._directions))
            if not all(x < r for x, r in zip(point, reference, strict=True)):
                continue
            added = [point]
            before = first.get(self._shapes.of[index])
            if before is not None and not self._shapes.is_reference[index]:  # its shape's reference runs too
                added.append(scale(minimised(values[before], self._directions)))
            gain = (hypervolume([*front, *added], reference) - base) / max(float(spent[position]), 1e-9)
            if gain > 0 and (best is None or gain > best[1]):
                best = (self._candidates[index], gain)
        return best

    def _spent(self, index: int, position: int, seconds: np.ndarray, first: Mapping[tuple[str, ...], int]) -> float:
        """Predicted device-seconds of choosing candidate ``index`` (at ``position`` of ``seconds``): its own, and
        its shape's reference's when that is missing (``first``: a missing shape's row in ``seconds``)."""
        before = first.get(self._shapes.of[index])
        extra = float(seconds[before]) if before is not None and not self._shapes.is_reference[index] else 0.0
        return float(seconds[position]) + extra

    def _spread(
        self, trials: Sequence[FrozenTrial], open_: Sequence[int], rows: np.ndarray, spent: np.ndarray
    ) -> tuple[dict[str, Any], float]:
        """The spread start's pick: the open candidate with the largest squared distance (feature space, each
        feature over [0, 1]) to the nearest setting any trial asked, per predicted device-second of its own run
        (``spent``; a shape's reference it would queue first is not charged: measuring the reference is part of
        seeing that shape, and on the replayed Wan table charging it found the front later)."""
        import numpy as np

        asked = np.asarray([setting_features(t.params, self._space, prior=False) for t in trials if t.params])
        mine = rows[: len(open_)]
        nearest = ((mine[:, None, :] - asked[None, :, :]) ** 2).sum(axis=2).min(axis=1)
        score = nearest / np.maximum(spent, 1e-9)
        pick = int(np.argmax(score))
        return self._candidates[open_[pick]], float(score[pick])

    def _fold(self, trials: Sequence[FrozenTrial]) -> None:
        """Take in the finished trials not seen yet: the predictor's evidence, the measured feasible points (their
        range, the front) and their cost (latency, device-seconds)."""
        from tuner.storage.attributes import cost_of, metrics_of
        from tuner.storage.cost import device_s_of

        for trial in trials:
            if trial.number in self._folded or not trial.state.is_finished():
                continue
            self._folded.add(trial.number)
            self._predictor.update([trial])
            if not is_measured_feasible(trial) or trial.values is None:
                continue
            point = minimised(trial.values, self._directions)
            self._points.append(point)
            self._low = [min(a, b) for a, b in zip(self._low or point, point, strict=True)]
            self._high = [max(a, b) for a, b in zip(self._high or point, point, strict=True)]
            minimise = ["minimize"] * len(point)
            if point not in self._front and not any(dominates(kept, point, minimise) for kept in self._front):
                self._front = [kept for kept in self._front if not dominates(point, kept, minimise)] + [point]
            spent = device_s_of(cost_of(trial))
            latency_s = (metrics_of(trial).get(LATENCY) or {}).get("value")
            if spent is not None and isinstance(latency_s, (int, float)) and latency_s > 0:
                self._cost.add(trial, float(latency_s), spent)


class _Scale:
    """Minimised objective values scaled to [0, 1] over the measured points' range (a flat objective: width 1)."""

    def __init__(self, low: Sequence[float], high: Sequence[float]) -> None:
        self.low = list(low)
        self.width = [(top - bottom) or 1.0 for bottom, top in zip(low, high, strict=True)]

    def __call__(self, point: Sequence[float]) -> tuple[float, ...]:
        return tuple((x - low) / width for x, low, width in zip(point, self.low, self.width, strict=True))


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A setting's identity (values as text: 4 and 4.0 of a categorical are one choice)."""
    return tuple(sorted((name, repr(value)) for name, value in params.items()))
