"""Optuna samplers by name, with a spec's options (and a grid sampler safe for ask/tell)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.errors import StudyError
from tuner.search.cost_aware import COST_OPTION, cost_aware_tpe
from tuner.spec.models import SamplerName, StudySpec
from tuner.spec.space import grid

if TYPE_CHECKING:
    import optuna


def make_sampler(name: SamplerName, spec: StudySpec, seed: int) -> optuna.samplers.BaseSampler:
    """The named Optuna sampler with the spec's options (constraints are read from trials), wrapped in the
    predicted-gain proposer when ``sampler.predicted_gain`` is on (:mod:`tuner.search.predicted_gain`; never
    around ``grid``, which proposes every setting once).

    ``tpe`` takes one option of its own, ``cost_aware`` (a preset name or mapping,
    :mod:`tuner.search.cost_aware`); a bad value raises ValueError (preflight reports it).
    """
    base = _named_sampler(name, spec, seed)
    gain = spec.sampler.predicted_gain
    if gain is None or name == "grid":
        return base
    from tuner.search.predicted_gain import predicted_gain_sampler

    return predicted_gain_sampler(spec, base, seed, gain.after, gain.start)


def _named_sampler(name: SamplerName, spec: StudySpec, seed: int) -> optuna.samplers.BaseSampler:
    """The named Optuna sampler with the spec's options (see :func:`make_sampler`)."""
    import optuna

    options = dict(spec.sampler.options)
    if name == "tpe":
        cost_aware = options.pop(COST_OPTION, None)  # opt-in cost-aware TPE (:mod:`tuner.search.cost_aware`)
        options.setdefault("multivariate", True)
        options.setdefault("n_startup_trials", 5)
        if cost_aware is not None:
            return cost_aware_tpe(cost_aware, seed=seed, **options)
        return optuna.samplers.TPESampler(seed=seed, **options)
    if name == "nsga2":
        options.setdefault("population_size", 8)
        return optuna.samplers.NSGAIISampler(seed=seed, **options)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, **options)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed, **options)
    if name == "grid":
        return AskTellGridSampler(grid(spec), seed=seed, **options)
    raise StudyError(f"unknown sampler {name!r}")


def sampler_class(name: str) -> type | None:
    """The Optuna class behind a sampler name (for the options it accepts); None for an unknown name."""
    import optuna

    classes: dict[str, type] = {
        "tpe": optuna.samplers.TPESampler,
        "nsga2": optuna.samplers.NSGAIISampler,
        "gp": optuna.samplers.GPSampler,
        "random": optuna.samplers.RandomSampler,
        "grid": optuna.samplers.GridSampler,
    }
    return classes.get(name)


def _grid_sampler_class() -> type:
    import optuna

    from tuner.storage.optuna_private import grid_exhausted

    class _AskTellGridSampler(optuna.samplers.GridSampler):  # type: ignore[misc]
        """GridSampler for an ask/tell loop: it marks the grid exhausted instead of ``study.stop()``.

        (``study.stop()`` is only allowed inside ``optimize``.) The coordinator
        reads :attr:`exhausted` and stops.
        """

        exhausted = False

        def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
            self.exhausted = grid_exhausted(self, study)

    return _AskTellGridSampler


def AskTellGridSampler(search_space: dict[str, list[Any]], seed: int, **options: Any) -> optuna.samplers.BaseSampler:
    """A grid sampler usable with ask/tell (see :func:`_grid_sampler_class`); ``options`` go to GridSampler."""
    return _grid_sampler_class()(search_space, seed=seed, **options)  # type: ignore[no-any-return]
