"""Predict before measuring: each setting's latency and peak memory, with an interval, before it runs.

A study's own measured OK trials fit one model per predicted metric (:class:`LogRidge`): log(metric)
ridge-linear in the setting's features (:func:`setting_features`: a number's log over its range, so steps x
frames x passes -- a call's multiplicative cost structure -- is a sum; a categorical's choices one-hot, a
numeric categorical's log value besides, which alone stands for it in a cost model, :func:`cost_columns`;
a column for runs of another GPU type, a warm start's, whose weight
is that hardware's scale once the study has measured enough to tell it), plus a Gaussian process on what the
line leaves (interactions). A cost model's line may also take in a knob of words' interaction columns -- a
cache method whose saving grows with the steps -- where they lower its held-out error by a clear margin
(:mod:`tuner.search.fitting.interactions`). The interval is bounded by the :data:`INTERVAL` ranks of the held-out (leave-one-out, closed
form) errors of the line and of the process together (finite-sample ranks, :func:`tuner.search.fitting.recorded_errors.rank_bounds`: with few
runs, their extremes), at least :data:`FLOOR` wide, so it widens with the fit's real
errors, not an assumed noise; and at least as wide as the study's own errors out of sample, each recorded
prediction against its measurement (:mod:`tuner.search.fitting.recorded_errors`). A latency whose runs all reported their call's phases may be predicted as two such
models, the once-per-call phases and the rest, summed (:mod:`tuner.search.fitting.split_latency`: kept where it predicts
the held-out runs better). Where the runs reported a uniform series of steps or tokens, each also stands for its
setting at the count knob's other values (:mod:`tuner.search.fitting.count_neighbours`): those derived runs join the
latency's fit, never its run counts nor its interval's errors. No prediction before
:data:`MIN_FIT` local runs. A warm start's source trials (``tuner run --warm-start``: the coordinator's
``prediction_prior``) count while the study's own runs are fewer than the features, then no more
(:func:`kept_samples`).

Predicted: ``latency_p50_s`` and the study's memory figure (:func:`memory_metric`: the peak its constraints
limit, else the device peak). The coordinator records each prediction on the trial it is about to run
(attribute ``prediction``: ``{metric: {"value", "low", "high", "fitted_on", "prior"}}``); the views read it
beside the measurement (:func:`prediction_errors`: measured / predicted - 1). How close it comes:
``bench/prediction_error.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.results import Outcome
from tuner.search.fitting.count_neighbours import CountNeighbours, derived_groups, held_out_by_group
from tuner.search.fitting.interactions import Pairs, chosen_mask, extended, group_spans, interaction_groups
from tuner.search.fitting.recorded_errors import RecordedErrors, rank_bounds
from tuner.search.fitting.split_latency import Sample, SplitLatency, split_or_plain, split_parts
from tuner.search.setting_features import cost_columns, setting_features
from tuner.storage.attributes import is_measured, metrics_of, outcome_of, prediction_of

if TYPE_CHECKING:
    import numpy as np
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from tuner.spec.models import StudySpec

MIN_FIT = 3
"""Fewest local measured OK trials (with the metric) before a metric is predicted."""
INTERVAL = (0.1, 0.9)
"""Shares of the leave-one-out log residuals below a prediction's interval's low and high end (finite-sample
ranks: :func:`tuner.search.fitting.recorded_errors.rank_bounds`)."""
RIDGES = (0.001, 0.01, 0.1, 1.0)
"""Ridge penalties tried on the features (scaled to [0, 1]; the intercept is not penalised): the one with the
smallest leave-one-out error is kept -- small where the cost is a clean product, larger on noisy timings."""
FLOOR = math.log1p(0.02)
"""Narrowest half-width of an interval (log units): 2 %, a repeated measurement's own spread."""
MAX_SAMPLES = 300
"""The latest runs a model is fitted on (its residual process costs the cube of their number)."""
FIXED_PROCESS = ((1.0,), (0.3,))
"""The residual process's length scale (the features run over [0, 1]: 1.0 is one knob's whole range) and noise (a
share of the residuals' variance; 1.0: mostly noise, little interaction) of the predictions a study records and
skips by. Fixed, not chosen by held-out error: chosen among :data:`CHOSEN_PROCESS`, they fitted a study's few dozen
runs' own noise, and the predictions of the next settings were further off (docs/benchmarks.md, "The residual
process's scales fixed")."""
CHOSEN_PROCESS = ((0.25, 0.5, 1.0, 2.0), (0.05, 0.3, 1.0))
"""The length scales and noise shares the proposer's models choose among by held-out error
(:mod:`tuner.search.predicted_gain`, ``choose_process``): its candidates are ranked, not recorded, and with the fixed
scales the replayed Omni default reached 95 % of the front later (docs/benchmarks.md)."""
LATENCY = "latency_p50_s"
MEMORY_FALLBACKS = ("peak_vram_device_gb", "peak_rss_gb")


def memory_metric(spec: StudySpec) -> str:
    """The memory figure to predict: the first ``peak_*_gb`` a constraint limits, else the device peak."""
    for constraint in spec.constraints:
        if constraint.metric.startswith("peak_") and constraint.metric.endswith("_gb") and constraint.max is not None:
            return constraint.metric
    return MEMORY_FALLBACKS[0]


@dataclass(frozen=True)
class Prediction:
    """A predicted ``value`` with its interval ``[low, high]`` (the metric's units), the local runs it was fitted
    on and whether runs of another GPU type (a warm start's) took part."""

    value: float
    low: float
    high: float
    fitted_on: int
    prior: bool

    def record(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "fitted_on": self.fitted_on,
            "prior": self.prior,
        }


class LogRidge:
    """log(y): ridge-linear in the feature rows (the multiplicative structure), its penalty chosen by leave-one-out
    error, plus a Gaussian process on what the line leaves (interactions: a precision that costs more at a larger
    size) whose length scale and noise are the one pair of ``process`` or the pair of its lengths x noises with the
    smallest leave-one-out error (:data:`FIXED_PROCESS`, :data:`CHOSEN_PROCESS`); the leave-one-out residuals
    (closed form) give the interval."""

    with_prior: bool = False  # fitted on a warm start's runs of another GPU type too

    def __init__(
        self,
        rows: np.ndarray,
        logs: np.ndarray,
        sources: Sequence[int] = (),
        process: tuple[Sequence[float], Sequence[float]] = FIXED_PROCESS,
        interactions: Sequence[Pairs] = (),
    ) -> None:
        """``sources``: the first ``len(sources)`` rows are runs derived from measured ones
        (:mod:`tuner.search.fitting.count_neighbours`), each the index among the measured rows (those after them) of the
        run it comes from. They are fitted on. The penalty is chosen by the measured rows'
        leave-one-out errors; ``loo`` and ``line_loo`` -- the interval's errors and the split's test -- leave each
        measured row out together with the rows derived from it (they carry its measurement: left in, they make
        the errors, and so the interval, too small); none derived: the two are the same."""
        import numpy as np

        derived = len(sources)
        self.interactions = interactions  # column groups, each kept where it predicts held-out runs better
        spans = group_spans(rows.shape[1], interactions)
        rows = extended(rows, interactions)
        self.mask = chosen_mask(rows[derived:], logs[derived:], spans, RIDGES)
        rows = rows * self.mask
        groups = derived_groups(sources, len(logs) - derived)
        self.rows = rows
        self.mean_x, self.mean_y = rows.mean(axis=0), float(logs.mean())
        centred = rows - self.mean_x
        fits = []
        for ridge in RIDGES:  # the penalty with the smallest leave-one-out error (closed form for ridge)
            inverse = np.linalg.inv(centred.T @ centred + ridge * np.eye(rows.shape[1]))
            coef = inverse @ centred.T @ (logs - self.mean_y)
            residual = logs - (self.mean_y + centred @ coef)
            leverage = np.einsum("ij,jk,ik->i", centred, inverse, centred) + 1.0 / len(logs)
            loo = (residual / np.clip(1.0 - leverage, 1e-6, None))[derived:]
            grouped = loo
            if groups is not None:  # I - H, H the hat matrix (the mean's share included)
                hat = centred @ inverse @ centred.T + 1.0 / len(logs)
                grouped = held_out_by_group(np.eye(len(logs)) - hat, residual, groups)
            fits.append((float(np.mean(loo**2)), ridge, coef, residual, grouped))
        chosen = min(fits, key=lambda fit: fit[0])
        _, self.ridge, self.coef, residual, self.line_loo = chosen
        self.scale = float(np.var(residual)) or 1e-12
        best: tuple[float, float, Any, Any] | None = None
        for length in process[0]:
            for noise in process[1]:
                system = np.linalg.inv(self._kernel(rows, rows, length) + noise * self.scale * np.eye(len(logs)))
                weights = system @ residual
                loo = (weights / np.clip(np.diag(system), 1e-12, None))[derived:]
                error = float(np.mean(loo**2))
                if best is None or error < best[0]:
                    grouped = loo if groups is None else held_out_by_group(system, weights, groups)
                    best = (error, length, weights, grouped)
        assert best is not None
        _, self.length, self.weights, self.loo = best

    def _kernel(self, left: np.ndarray, right: np.ndarray, length: float) -> np.ndarray:
        import numpy as np

        distance = ((left[:, None, :] - right[None, :, :]) ** 2).sum(axis=2)
        return self.scale * np.exp(-distance / (2.0 * length**2))  # type: ignore[no-any-return]

    def centres(self, rows: np.ndarray) -> np.ndarray:
        """The predicted log values of many feature rows at once (no intervals)."""
        rows = extended(rows, self.interactions) * self.mask
        centre = self.mean_y + (rows - self.mean_x) @ self.coef
        return centre + self._kernel(rows, self.rows, self.length) @ self.weights  # type: ignore[no-any-return]

    def predict(self, row: Sequence[float]) -> tuple[float, float, float]:
        """The predicted log value and its interval's low and high logs."""
        import numpy as np

        point = extended(np.asarray(row, dtype=float)[None, :], self.interactions)[0] * self.mask
        centre = self.mean_y + float((point - self.mean_x) @ self.coef)
        centre += float(self._kernel(point[None, :], self.rows, self.length)[0] @ self.weights)
        errors = np.concatenate([self.loo, self.line_loo])  # the wider of the two fits' held-out errors
        low, high = rank_bounds(errors, INTERVAL, FLOOR)
        return centre, centre + low, centre + high


def quality_objectives(spec: StudySpec) -> tuple[str, ...]:
    """The study's objectives other than latency and memory figures: predicted on their own scale (no log)."""
    return tuple(
        objective.metric
        for objective in spec.objectives
        if objective.metric != LATENCY and not objective.metric.startswith("peak_")
    )


class OutcomePredictor:
    """The study's latency and memory predictions (see the module docstring). ``prior``: a warm start's source
    trials (another GPU type), taken as evidence with the "other hardware" column set. ``quality``: its quality
    objectives are predicted too (:func:`quality_objectives`; fitted on their own scale, not the log).
    ``neighbours``: the latency is fitted on runs derived along a count knob too (:mod:`.count_neighbours`).
    ``choose_process``: the residual process's scales are chosen by held-out error (:data:`CHOSEN_PROCESS`), not
    fixed (:data:`FIXED_PROCESS`). ``interactions``: a cost model's line may take a knob of words' interaction
    columns (:mod:`tuner.search.fitting.interactions`); off, the plain line."""

    def __init__(
        self,
        spec: StudySpec,
        space: Mapping[str, BaseDistribution],
        prior: Iterable[FrozenTrial] = (),
        quality: bool = False,
        neighbours: bool = True,
        choose_process: bool = False,
        interactions: bool = True,
    ) -> None:
        self.metrics = (LATENCY, memory_metric(spec), *(quality_objectives(spec) if quality else ()))
        self._linear = set(quality_objectives(spec)) if quality else set()
        self._space = dict(space)
        every = list(range(len(setting_features({}, space, False))))
        self._columns = {name: every if name in self._linear else cost_columns(space) for name in self.metrics}
        self._samples: dict[str, list[Sample]] = {name: [] for name in self.metrics}
        self._models: dict[str, LogRidge | SplitLatency] = {}
        self._parts: tuple[list[Sample], list[Sample]] = ([], [])  # the latency runs' once and rest parts
        self._neighbours = CountNeighbours(space if neighbours else {})  # own series runs and the runs derived
        self._recorded = RecordedErrors(INTERVAL[1] - INTERVAL[0], self._linear)  # own errors out of sample
        self._process = CHOSEN_PROCESS if choose_process else FIXED_PROCESS
        self._interactions = interaction_groups(space, cost_columns(space)) if interactions else []
        self.update(prior, prior=True)

    def update(self, finished: Iterable[FrozenTrial], prior: bool = False) -> None:
        """Take in finished trials (each once): the measured OK ones with a positive figure are evidence."""
        for trial in finished:
            if not is_measured(trial) or outcome_of(trial) != Outcome.OK.value:
                continue
            figures = metrics_of(trial)
            if not prior:
                self._recorded.add(prediction_of(trial), figures)
            full = setting_features(trial.params, self._space, prior)
            for name in self.metrics:
                value = (figures.get(name) or {}).get("value")
                if not isinstance(value, (int, float)) or not math.isfinite(value):
                    continue
                row = [full[index] for index in self._columns[name]]
                if name in self._linear:
                    self._samples[name].append((row, float(value), prior))
                    self._models.pop(name, None)
                elif value > 0:
                    self._samples[name].append((row, math.log(value), prior))
                    self._models.pop(name, None)
                    parts = split_parts(value, figures) if name == LATENCY else None
                    if name == LATENCY and not prior:
                        key = len(self._samples[name]) - 1  # the run's index among the latency samples
                        self._neighbours.add(key, trial.params, figures, float(value))
                    if parts is not None:
                        for kept, part in zip(self._parts, parts):
                            kept.append((row, math.log(part), prior))

    def predict(self, params: Mapping[str, Any]) -> dict[str, Prediction]:
        """The predictions for a setting, by metric; a metric with fewer than :data:`MIN_FIT` local runs: none."""

        out: dict[str, Prediction] = {}
        full = setting_features(params, self._space, prior=False)
        for name in self.metrics:
            model = self._model(name)
            if model is None:
                continue
            centre, low, high = model.predict([full[index] for index in self._columns[name]])
            low, high = self._recorded.widened(name, centre, low, high)
            back = (lambda value: value) if name in self._linear else math.exp
            local = sum(1 for _, _, prior in self._samples[name] if not prior)
            out[name] = Prediction(back(centre), back(low), back(high), local, model.with_prior)
        return out

    def centres(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The predicted value of each metric for many settings at once (``rows``: their feature rows,
        :func:`setting_features` without the prior column set), by metric; a metric not predicted yet: absent."""
        import numpy as np

        out: dict[str, np.ndarray] = {}
        for name in self.metrics:
            model = self._model(name)
            if model is None:
                continue
            centre = model.centres(rows[:, self._columns[name]])
            out[name] = centre if name in self._linear else np.exp(centre)
        return out

    def _model(self, name: str) -> LogRidge | SplitLatency | None:
        """The metric's model, fitted when evidence came in since (None before :data:`MIN_FIT` local runs). The
        latency's: split into its once-per-call phases and the rest when every run reported the phases and the
        split predicts its held-out runs better (:mod:`tuner.search.fitting.split_latency`)."""
        samples = self._samples[name]
        if sum(1 for _, _, prior in samples if not prior) < MIN_FIT:
            return None
        if name not in self._models:
            derived = self._derived(len(samples)) if name == LATENCY else ([], [], [])
            pairs = () if name in self._linear else self._interactions
            plain = fitted(samples[-MAX_SAMPLES:], derived[0], self._process, pairs)
            model: LogRidge | SplitLatency = plain
            if name == LATENCY and len(self._parts[0]) == len(samples) and len(samples) > MIN_FIT:
                once, rest = (part[-MAX_SAMPLES:] for part in self._parts)
                logs = (
                    [s[1] for s in kept_samples(samples[-MAX_SAMPLES:])],
                    [s[1] for s in kept_samples(once)],
                    [s[1] for s in kept_samples(rest)],
                )
                parts = (fitted(once, derived[1], self._process, pairs), fitted(rest, derived[2], self._process, pairs))
                model = split_or_plain(plain, parts, logs, INTERVAL, FLOOR)
            self._models[name] = model
        return self._models[name]

    def _derived(self, runs: int) -> tuple[list[tuple[Sample, int]], ...]:
        """The latency's derived runs (:mod:`tuner.search.fitting.count_neighbours`) as samples of the latency, its once
        and its rest part, each with the index of its source run among the latest :data:`MAX_SAMPLES` of the
        ``runs`` latency samples (the parts empty unless every derived run has them); at most as many as leave the
        fit within :data:`MAX_SAMPLES` rows, the latest."""
        first = max(0, runs - MAX_SAMPLES)
        room = MAX_SAMPLES - (runs - first)
        derived = [entry for entry in self._neighbours.derived() if entry[0] >= first]
        derived = derived[-room:] if room > 0 else []
        columns = self._columns[LATENCY]
        out: tuple[list[tuple[Sample, int]], ...] = ([], [], [])
        for source, params, latency, parts in derived:
            full = setting_features(params, self._space, prior=False)
            row = [full[index] for index in columns]
            out[0].append(((row, math.log(latency), False), source - first))
            if parts is not None:
                out[1].append(((row, math.log(parts[0]), False), source - first))
                out[2].append(((row, math.log(parts[1]), False), source - first))
        return out if len(out[1]) == len(out[0]) else (out[0], [], [])


def kept_samples(samples: Sequence[Sample]) -> list[Sample]:
    """The samples a model is fitted on (feature row, log value, from a warm start's other hardware): a warm
    start's runs of another GPU type count while the study's own runs are fewer than the features
    (:func:`setting_features`: a line through them alone is underdetermined); from then on the study's own runs
    alone, so that a knob whose cost differs by hardware (bf16 without fast kernels) is learned from this
    hardware's runs."""
    return [samples[index] for index in kept_indices(samples)]


def kept_indices(samples: Sequence[Sample]) -> list[int]:
    """The indices in ``samples`` of :func:`kept_samples`."""
    own = [index for index, sample in enumerate(samples) if not sample[2]]
    return own if len(own) == len(samples) or len(own) >= len(samples[own[0]][0]) else list(range(len(samples)))


def fitted(
    samples: Sequence[Sample],
    derived: Sequence[tuple[Sample, int]] = (),
    process: tuple[Sequence[float], Sequence[float]] = FIXED_PROCESS,
    interactions: Sequence[Pairs] = (),
) -> LogRidge:
    """The model of :func:`kept_samples` of ``samples``, fitted on the ``derived`` runs too: each a sample and the
    index in ``samples`` of the run it comes from (one whose run is not kept is left out). They count for neither
    what is kept nor the held-out errors (:class:`LogRidge`'s ``sources``). ``interactions``: the column groups
    the line may take in (:mod:`tuner.search.fitting.interactions`)."""
    import numpy as np

    indices = kept_indices(samples)
    position = {index: at for at, index in enumerate(indices)}
    extra = [(sample, position[source]) for sample, source in derived if source in position]
    kept = [sample for sample, _ in extra] + [samples[index] for index in indices]
    model = LogRidge(
        np.asarray([row for row, _, _ in kept]),
        np.asarray([log for _, log, _ in kept]),
        sources=[source for _, source in extra],
        process=process,
        interactions=interactions,
    )
    model.with_prior = len(kept) > len([sample for sample in samples if not sample[2]])
    return model


def prediction_errors(prediction: Mapping[str, Any] | None, metrics: Mapping[str, Any]) -> dict[str, float]:
    """measured / predicted - 1 per predicted metric the trial measured (a fraction; +0.1: 10 % slower or bigger)."""
    errors: dict[str, float] = {}
    for name, predicted in (prediction or {}).items():
        measured = (metrics.get(name) or {}).get("value")
        value = predicted.get("value") if isinstance(predicted, Mapping) else None
        if isinstance(measured, (int, float)) and isinstance(value, (int, float)) and value > 0:
            errors[name] = float(measured) / float(value) - 1.0
    return errors
