"""Which candidates will surely run out of memory: a monotone model of peak memory (issue 14).

Every trial that ran is evidence: an ``OK`` trial's measured peaks (the metrics
named ``peak_*_gb``) and an ``OOM`` trial's failure. A warm start adds a prior:
the same evidence from a study of the same spec on other hardware
(:mod:`.warm_start`). Activation memory depends on the model and the setting,
not on the GPU type, so peaks measured elsewhere are taken as they are; the
*limit* is always this host's.

The model is monotone. A parameter with an order — int, float, a categorical
whose choices are all numbers, or all resolutions written ``W*H`` / ``WxH``
(ordered by pixel count) — is costlier when larger; any other parameter (bool,
string) must be equal. A parameter's ``memory`` key in the spec overrides this:
``increases`` (a bool: true costs more; strings: in the listed order),
``decreases`` (the reverse: e.g. ``offload_model``, ``fp8``) or ``none`` (no
effect: any value, e.g. ``sample_steps``). An observation ``w`` is *no costlier*
than a candidate ``c`` when every ordered parameter of ``w`` costs no more than
``c``'s, and the rest (but those of no effect) are equal.

* Predicted peak of ``c``: the largest peak among observations no costlier than ``c``.
* ``c`` is skipped when that prediction passes a memory limit by the margin
  (``peak > limit x (1 + margin)``), or when an OOM was observed at a setting no
  costlier than ``c``,
* unless this study measured a setting at least as costly as ``c`` that completed
  within the limits: the monotone assumption is then contradicted and the
  measurement wins (so a wrong prediction is corrected by the next measurement).
* Local evidence outranks the prior: a prior observation is dropped once a local
  measurement at a setting at least as costly as it completed within the limits.

The limits are the spec's active constraints with a ``max`` on a ``peak_*_gb``
metric, as :func:`~tuner.search.objectives.plan_constraints` resolved them on this
host (none on a CPU host for a GPU metric: then only OOM outcomes inform the model).

The model is updated from the trial list the coordinator reads each turn
anyway (:meth:`FeasibilityModel.update` looks at each finished trial once) and
keeps, as observations arrive, the local measurements that fit and no other that
fits is at least as costly as (the *frontier*: all the "measured here" rule needs,
since "no costlier" is transitive) and the local *evidence* (OOMs and measurements
with a limited peak: all a skip or a predicted peak can come from). A prediction
costs O(frontier x parameters) when the frontier covers the candidate — the usual
case, and every case without memory limits or OOMs — and O((frontier + evidence +
prior) x parameters) past it; no storage access. Its answers are those of a scan of
every observation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome
from tuner.storage.attributes import (
    PREDICTED_PEAK_GB,
    PREDICTION_WITNESS,
    duplicate_of,
    is_measured,
    metrics_of,
    outcome_of,
)

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from tuner.search.objectives import ConstraintPlan
    from tuner.spec.models import StudySpec

MEMORY_METRIC = re.compile(r"peak_[a-z0-9_]+_gb")
DEFAULT_MARGIN = 0.05
LOCAL = "local"
_RESOLUTION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*[*xX×]\s*(\d+(?:\.\d+)?)\s*")


@dataclass(frozen=True)
class Observation:
    """What one trial says about memory: its setting, its peaks (GB, by metric) or that it ran out.

    ``source`` is :data:`LOCAL` (this study) or ``warm_start:<study>``; ``number`` the trial's number there.
    """

    params: Mapping[str, Any]
    peaks_gb: Mapping[str, float]
    oom: bool
    source: str = LOCAL
    number: int | None = None

    @property
    def local(self) -> bool:
        return self.source == LOCAL

    @property
    def witness(self) -> str:
        """``trial 7`` for this study's trial 7, ``warm_start:<study> trial 7`` for the prior's."""
        trial = f"trial {self.number}" if self.number is not None else "a trial"
        return trial if self.local else f"{self.source} {trial}"


@dataclass(frozen=True)
class Prediction:
    """The model's verdict on a candidate; ``reason`` / ``witness`` are set when it is skipped."""

    skip: bool
    reason: str | None = None
    predicted_peak_gb: float | None = None
    witness: str | None = None

    def attributes(self) -> dict[str, Any]:
        """The user attributes a skipped trial records (its ``reason`` aside)."""
        return {PREDICTED_PEAK_GB: self.predicted_peak_gb, PREDICTION_WITNESS: self.witness}


def memory_limits(plan: ConstraintPlan) -> dict[str, float]:
    """Memory metric -> this host's limit (GB), from the plan's active ``max`` constraints on ``peak_*_gb``."""
    limits: dict[str, float] = {}
    for constraint in plan.active:
        if MEMORY_METRIC.fullmatch(constraint.metric) and constraint.max_value is not None:
            limits[constraint.metric] = min(constraint.max_value, limits.get(constraint.metric, math.inf))
    return limits


def observation_of(trial: FrozenTrial, source: str = LOCAL) -> Observation | None:
    """The evidence in a finished trial that ran (``OK`` with its peaks, or ``OOM``); None for anything else
    (not run, a copy, a crash, a timeout, still running)."""
    if not trial.state.is_finished() or not is_measured(trial) or duplicate_of(trial) is not None:
        return None
    outcome = outcome_of(trial)
    if outcome == Outcome.OOM.value:
        return Observation(dict(trial.params), {}, True, source, trial.number)
    if outcome != Outcome.OK.value:
        return None
    peaks: dict[str, float] = {}
    for name, metric in metrics_of(trial).items():
        value = metric.get("value") if isinstance(metric, Mapping) else None
        if MEMORY_METRIC.fullmatch(name) and isinstance(value, (int, float)) and math.isfinite(value):
            peaks[name] = float(value)
    return Observation(dict(trial.params), peaks, False, source, trial.number)


def _resolution(value: Any) -> float:
    match = _RESOLUTION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"not a resolution: {value!r}")
    return float(match.group(1)) * float(match.group(2))


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _natural_key(parameter: Any) -> Callable[[Any], float] | None:
    """How a parameter's values grow by nature: numbers, ``W*H`` pixel counts; None for bools and strings."""
    if parameter.type in ("int", "float"):
        return _number
    if parameter.type == "bool":
        return None
    for key in (_number, _resolution):
        try:
            for choice in parameter.choices:
                key(choice)
        except ValueError:
            continue
        return key
    return None


def _listed_key(parameter: Any) -> Callable[[Any], float]:
    """Cost along the listed choices (false, true for a bool)."""
    choices = [False, True] if parameter.type == "bool" else list(parameter.choices)

    def key(value: Any) -> float:
        for index, choice in enumerate(choices):
            if type(choice) is type(value) and choice == value:
                return float(index)
        raise ValueError(f"not a choice: {value!r}")

    return key


def order_keys(spec: StudySpec) -> dict[str, Callable[[Any], float] | None]:
    """Parameter name -> how its values are ordered by cost (larger key: costlier); None for a parameter of no
    effect (``memory: none``); absent for one that must be equal (see the module docstring)."""
    keys: dict[str, Callable[[Any], float] | None] = {}
    for name, parameter in spec.parameters.items():
        if parameter.memory == "none":
            keys[name] = None
            continue
        key = _natural_key(parameter)
        if key is None and parameter.memory is not None:
            key = _listed_key(parameter)
        if key is not None:
            keys[name] = _reversed(key) if parameter.memory == "decreases" else key
    return keys


def _reversed(key: Callable[[Any], float]) -> Callable[[Any], float]:
    return lambda value: -key(value)


def describe(params: Mapping[str, Any], limit: int = 160) -> str:
    """``name=value ...`` of a setting, cut to ``limit`` characters."""
    text = " ".join(f"{name}={value}" for name, value in params.items())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class FeasibilityModel:
    """The monotone memory model of one study (see the module docstring)."""

    spec: StudySpec
    plan: ConstraintPlan
    prior: Sequence[Observation] = ()
    margin: float = DEFAULT_MARGIN
    enabled: bool = True  # False: it learns nothing and never skips (``--no-memory-model``)
    _local: list[Observation] = field(default_factory=list, init=False)
    _frontier: list[Observation] = field(default_factory=list, init=False)  # fitting, none that fits costlier
    _evidence: list[Observation] = field(default_factory=list, init=False)  # local OOMs and limited peaks, in order
    _seen: set[int] = field(default_factory=set, init=False)
    _live_prior: list[Observation] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.limits = memory_limits(self.plan)
        self._names = list(self.spec.parameters)
        self._order = order_keys(self.spec)
        self._live_prior = list(self.prior)

    # ------------------------------------------------------------- evidence
    def observe(self, observation: Observation) -> None:
        """Add one local observation (prior ones come with the constructor); one that fits overrules the
        prior observations no costlier than it."""
        self._local.append(observation)
        if observation.oom or any(metric in observation.peaks_gb for metric in self.limits):
            self._evidence.append(observation)
        if self.within_limits(observation):
            self._live_prior = [w for w in self._live_prior if not self.no_costlier(w.params, observation.params)]
            if not any(self.no_costlier(observation.params, top.params) for top in self._frontier):
                self._frontier = [top for top in self._frontier if not self.no_costlier(top.params, observation.params)]
                self._frontier.append(observation)

    def update(self, trials: Iterable[FrozenTrial]) -> None:
        """Take in the finished trials not seen yet (each trial is looked at once, once finished)."""
        for trial in trials if self.enabled else ():
            if trial.number in self._seen or not trial.state.is_finished():
                continue
            self._seen.add(trial.number)
            observation = observation_of(trial)
            if observation is not None:
                self.observe(observation)

    @property
    def observations(self) -> int:
        return len(self._local) + len(self.prior)

    def no_costlier(self, low: Mapping[str, Any], high: Mapping[str, Any]) -> bool:
        """True when setting ``low`` is no costlier than ``high``: ordered parameters <=, the rest equal."""
        for name in self._names:
            if name not in low or name not in high:
                return False
            if name in self._order and self._order[name] is None:
                continue  # memory: none
            key = self._order.get(name)
            a, b = low[name], high[name]
            if key is None:
                if type(a) is not type(b) or a != b:
                    return False
                continue
            try:
                if key(a) > key(b):
                    return False
            except ValueError:
                return False
        return True

    def within_limits(self, observation: Observation) -> bool:
        """An observation that completed with no known peak past a limit (an unreported peak is not held
        against it: the trial ran)."""
        return not observation.oom and all(
            observation.peaks_gb.get(metric, -math.inf) <= limit for metric, limit in self.limits.items()
        )

    def live_prior(self) -> list[Observation]:
        """The prior observations no local measurement has overruled."""
        return self._live_prior

    # ------------------------------------------------------------ prediction
    def predict(self, params: Mapping[str, Any]) -> Prediction:
        """Skip ``params`` or not (see the module docstring); ``predicted_peak_gb`` is the largest peak
        (first limited metric) seen at a setting no costlier, when any."""
        if not self.enabled or any(self.no_costlier(params, u.params) for u in self._frontier):
            return Prediction(False)  # measured here at a setting at least as costly: it fits
        witnesses = [w for w in (*self._evidence, *self.live_prior()) if self.no_costlier(w.params, params)]
        return self.verdict(witnesses)

    def verdict(self, witnesses: Sequence[Observation]) -> Prediction:
        """The prediction from ``witnesses``, the observations at settings no costlier than the candidate's:
        skip on an OOM among them, or on a peak above a limit (× the margin); else the largest peak seen."""
        oom = next((w for w in witnesses if w.oom), None)
        if oom is not None:
            return Prediction(
                True, f"OOM at {oom.witness} ({describe(oom.params)}) which is no costlier", None, oom.witness
            )
        predicted: float | None = None
        for metric, limit in self.limits.items():
            measured = [w for w in witnesses if metric in w.peaks_gb]
            if not measured:
                continue
            top = max(measured, key=lambda w: w.peaks_gb[metric])
            peak = top.peaks_gb[metric]
            predicted = peak if predicted is None else predicted
            if peak > limit * (1 + self.margin):
                return Prediction(
                    True,
                    f"predicted peak {peak:.1f} GB > limit {limit:.1f} GB (x{1 + self.margin:g} "
                    f"margin) on {metric}, from {top.witness} ({describe(top.params)})",
                    peak,
                    top.witness,
                )
        return Prediction(False, predicted_peak_gb=predicted)
