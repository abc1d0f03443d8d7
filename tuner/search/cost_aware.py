"""Cost-aware TPE: prefer settings predicted to cost fewer device-seconds (opt-in sampler options).

Selected with the ``tpe`` sampler's option ``cost_aware`` (popped by
:func:`tuner.search.samplers.make_sampler` before Optuna's ``TPESampler`` sees its options)::

    sampler: {name: tpe, options: {cost_aware: ei-per-second}}
    sampler: {name: tpe, options: {cost_aware: {weight: 1.0, cool_over: 100, cheap_start: true}}}

Two mechanisms, each off unless asked for (:class:`CostAwareOptions`):

* **EI per predicted second** (``weight`` > 0): TPE picks, among its ``n_ei_candidates`` draws
  from l(x), the one maximising log l(x)/g(x) (a monotone transform of expected improvement);
  here it maximises ``log l(x)/g(x) - weight * log c(x)``, ``c(x)`` the predicted device-seconds
  of a run of x (with ``weight`` = 1: improvement per predicted second, as in cost-aware BO). The
  prediction is :class:`CostModel`: a ridge regression of log(device-seconds) on the
  parameters (numbers on a log scale when positive, categorical choices one-hot), fitted on the
  study's measured OK runs (their recorded ``cost``, :mod:`tuner.storage.cost`); before two such
  runs there is no prediction and TPE picks as usual. ``cool_over`` (measured trials) lets the
  weight fall linearly to 0 (cost cooling, as in CArBO) so that late search is plain TPE.
* **Cheap first** (``cheap_start``): TPE's start-up trials (fewer than ``n_startup_trials``
  finished trials; Optuna draws them at random) are drawn from each parameter's cheaper half by
  its declared order: the lower half of an int / float range, the first half (rounded up) of a
  categorical's choices (a bool: ``False``). A spec lists choices cheap-first for this to help.

The reference and baseline are enqueued and run first whatever the sampler proposes. Both
mechanisms only change which setting is proposed: nothing is skipped, and every proposal
still goes through the coordinator's rules, copies and memory model.

Units: device-seconds (one device per CPU slot). The sampler subclasses
:func:`tuner.storage.optuna_private.hooked_tpe_class`: public hooks over TPE's private steps, which that
module holds with every other use of Optuna's private API (checked at construction, so an Optuna that
renamed them fails loudly, not silently).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome
from tuner.storage.attributes import cost_of, is_measured, outcome_of
from tuner.storage.cost import device_s_of

if TYPE_CHECKING:
    import numpy as np
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

COST_OPTION = "cost_aware"
MIN_FIT_RUNS = 2  # measured OK runs before the cost model predicts anything
PRESETS: dict[str, dict[str, Any]] = {
    "off": {},
    "cheap-start": {"cheap_start": True},
    "ei-per-second": {"weight": 1.0},
    "ei-per-second+cheap-start": {"weight": 1.0, "cheap_start": True},
    "ei-per-second-cooled": {"weight": 1.0, "cool_over": 100},
}


@dataclass(frozen=True)
class CostAwareOptions:
    """What the cost-aware TPE does (see the module docstring).

    ``weight``: exponent of the predicted cost in the acquisition (0: none; 1: EI per second).
    ``cool_over``: measured trials over which the weight falls linearly to 0 (None: constant).
    ``cheap_start``: start-up trials from each parameter's cheaper half. ``ridge``: the cost
    model's L2 penalty (features are scaled to [0, 1]).
    """

    weight: float = 0.0
    cool_over: int | None = None
    cheap_start: bool = False
    ridge: float = 1.0

    @staticmethod
    def parse(value: Any) -> CostAwareOptions:
        """From a preset name of :data:`PRESETS` or a mapping of the fields; ValueError otherwise."""
        if isinstance(value, str):
            if value not in PRESETS:
                raise ValueError(f"{COST_OPTION}: unknown preset {value!r} (known: {', '.join(PRESETS)})")
            value = PRESETS[value]
        if not isinstance(value, Mapping):
            raise ValueError(f"{COST_OPTION}: expected a preset name or a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - {"weight", "cool_over", "cheap_start", "ridge"})
        if unknown:
            raise ValueError(f"{COST_OPTION}: unknown option {unknown[0]!r} (weight, cool_over, cheap_start, ridge)")
        options = CostAwareOptions(
            float(value.get("weight", 0.0)),
            _optional_int(value.get("cool_over")),
            bool(value.get("cheap_start", False)),
            float(value.get("ridge", 1.0)),
        )
        if options.weight < 0 or options.ridge <= 0 or (options.cool_over is not None and options.cool_over < 1):
            raise ValueError(f"{COST_OPTION}: weight >= 0, ridge > 0 and cool_over >= 1 required, got {value!r}")
        return options

    def weight_after(self, measured: int) -> float:
        """The cost weight once ``measured`` trials ran (linear cooling to 0 over ``cool_over``)."""
        if self.cool_over is None:
            return self.weight
        return self.weight * max(0.0, 1.0 - measured / self.cool_over)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def features(internal: Mapping[str, np.ndarray], space: Mapping[str, BaseDistribution]) -> np.ndarray:
    """The cost model's design matrix (rows: settings) from Optuna internal representations.

    An int / float parameter is one column in [0, 1] (on a log scale when its range is positive:
    cost tends to be multiplicative in steps, frames, pixels); a categorical of k choices is k - 1
    one-hot columns (choice 0 is the base). Parameters in ``space`` order.
    """
    import numpy as np
    from optuna.distributions import CategoricalDistribution

    rows = len(next(iter(internal.values()))) if internal else 0
    columns: list[np.ndarray] = []
    for name, distribution in space.items():
        values = np.asarray(internal[name], dtype=float)
        if isinstance(distribution, CategoricalDistribution):
            index = np.rint(values).astype(int)
            columns.extend((index == k).astype(float) for k in range(1, len(distribution.choices)))
            continue
        low, high = float(distribution.low), float(distribution.high)  # type: ignore[attr-defined]
        if high <= low:
            continue
        if low > 0:
            columns.append((np.log(values) - math.log(low)) / (math.log(high) - math.log(low)))
        else:
            columns.append((values - low) / (high - low))
    return np.column_stack(columns) if columns else np.zeros((rows, 0))


@dataclass(frozen=True)
class CostModel:
    """log(device-seconds) ~ ridge-linear in :func:`features` (see the module docstring)."""

    space: Mapping[str, BaseDistribution]
    mean_x: np.ndarray
    mean_y: float
    coef: np.ndarray
    runs: int

    @staticmethod
    def fit(
        trials: Sequence[FrozenTrial],
        space: Mapping[str, BaseDistribution],
        ridge: float = 1.0,
        seconds_of: Callable[[FrozenTrial], float | None] | None = None,
        min_runs: int = MIN_FIT_RUNS,
    ) -> CostModel | None:
        """Fitted on the measured OK runs among ``trials`` with a positive ``seconds_of(trial)`` (default: the
        recorded ``device_s``) and every parameter of ``space``; None with fewer than ``min_runs`` such runs."""
        import numpy as np

        internal: dict[str, list[float]] = {name: [] for name in space}
        targets: list[float] = []
        for trial in trials:
            if not is_measured(trial):
                continue
            seconds = seconds_of(trial) if seconds_of is not None else device_s_of(cost_of(trial))
            if not seconds or seconds <= 0 or outcome_of(trial) != Outcome.OK.value:
                continue
            if not all(name in trial.params for name in space):
                continue
            for name, distribution in space.items():
                internal[name].append(distribution.to_internal_repr(trial.params[name]))
            targets.append(math.log(seconds))
        if len(targets) < min_runs:
            return None
        x = features({k: np.asarray(v) for k, v in internal.items()}, space)
        y = np.asarray(targets)
        mean_x, mean_y = x.mean(axis=0), float(y.mean())
        xc = x - mean_x
        coef = np.linalg.solve(xc.T @ xc + ridge * np.eye(x.shape[1]), xc.T @ (y - mean_y))
        return CostModel(dict(space), mean_x, mean_y, coef, len(targets))

    def predict_log(self, internal: Mapping[str, np.ndarray]) -> np.ndarray:
        """Predicted log(device-seconds) of each setting given in internal representation."""
        return self.mean_y + (features(internal, self.space) - self.mean_x) @ self.coef  # type: ignore[no-any-return]

    def predict_s(self, params: Mapping[str, Any]) -> float:
        """Predicted device-seconds of one setting given by its (external) parameter values."""
        import numpy as np

        internal = {name: np.asarray([d.to_internal_repr(params[name])]) for name, d in self.space.items()}
        return float(np.exp(self.predict_log(internal)[0]))


def cheap_half_value(distribution: BaseDistribution, rng: np.random.RandomState) -> Any:
    """A value drawn uniformly from the cheaper half of ``distribution`` by its declared order.

    Int: ``low .. low + steps // 2 * step`` (on its step grid); float: ``[low, midpoint]`` (the
    geometric midpoint when ``log``); categorical: the first ``ceil(k / 2)`` choices.
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        half = max(1, math.ceil(len(distribution.choices) / 2))
        return distribution.choices[int(rng.randint(half))]
    if isinstance(distribution, IntDistribution):
        steps = (distribution.high - distribution.low) // distribution.step
        return int(distribution.low + int(rng.randint(steps // 2 + 1)) * distribution.step)
    if isinstance(distribution, FloatDistribution):
        low, high = distribution.low, distribution.high
        if distribution.log:
            value = math.exp(rng.uniform(math.log(low), (math.log(low) + math.log(high)) / 2))
        else:
            value = rng.uniform(low, (low + high) / 2)
        if distribution.step is not None:
            value = low + round((value - low) / distribution.step) * distribution.step
        return float(min(max(value, low), high))
    raise ValueError(f"no cheap half for {type(distribution).__name__}")


def measured_runs(trials: Sequence[FrozenTrial]) -> int:
    """Trials that ran a workload (the budget's count)."""
    return sum(1 for t in trials if is_measured(t))


def cost_aware_tpe(value: Any, seed: int | None, **tpe_options: Any) -> optuna.samplers.TPESampler:
    """A :class:`~optuna.samplers.TPESampler` with ``tpe_options``, made cost-aware by ``value``
    (a preset name or mapping, :meth:`CostAwareOptions.parse`); ValueError for a bad ``value``."""
    return _sampler_class()(CostAwareOptions.parse(value), seed=seed, **tpe_options)  # type: ignore[no-any-return]


_CLASS: list[type] = []


def _sampler_class() -> type:
    """The TPESampler subclass, built once on first use (Optuna is imported lazily)."""
    if _CLASS:
        return _CLASS[0]
    from optuna.trial import TrialState

    from tuner.storage.optuna_private import hooked_tpe_class

    class CostAwareTPESampler(hooked_tpe_class()):  # type: ignore[misc]
        """TPE with a cost term in its acquisition and cheap start-up draws (module docstring)."""

        def __init__(self, cost: CostAwareOptions, **options: Any) -> None:
            super().__init__(**options)
            self.cost = cost
            self._cost_model: CostModel | None = None
            self._cost_weight = 0.0

        def before_sample(self, study: optuna.Study, search_space: dict[str, BaseDistribution]) -> None:
            trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            self._cost_weight = self.cost.weight_after(measured_runs(trials))
            self._cost_model = CostModel.fit(trials, search_space, self.cost.ridge) if self._cost_weight > 0 else None

        def after_sample(self) -> None:
            self._cost_model = None

        def adjust_acquisition(self, samples: dict[str, np.ndarray], values: np.ndarray) -> np.ndarray:
            if self._cost_model is None or not set(self._cost_model.space) <= set(samples):
                return values
            return values - self._cost_weight * self._cost_model.predict_log(samples)  # type: ignore[no-any-return]

        def sample_independent(
            self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
        ) -> Any:
            if self.cost.cheap_start:
                finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
                if len(finished) < self.n_startup_trials:
                    return cheap_half_value(param_distribution, self.random_state)
            return super().sample_independent(study, trial, param_name, param_distribution)

    _CLASS.append(CostAwareTPESampler)
    return CostAwareTPESampler
