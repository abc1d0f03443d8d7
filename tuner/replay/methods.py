"""A benchmark method, and one replayed study of it through the real coordinator.

A :class:`Method` is a sampler (an Optuna sampler name with options, or a baseline of
:mod:`.baselines`), extra keyword arguments for :class:`~tuner.study.coordinator.Coordinator`,
and an optional ``setup`` run on the opened study before the coordinator starts (it may return
more coordinator keyword arguments) — so a coordinator feature or a warm start from another
study is a method in a few lines::

    Method("tpe-no-memory-model", "tpe", coordinator_options={"memory_model": False})

    def warm(opened, context):  # replay a source study into the same storage, start from it
        replay_once(source_target, Method("tpe", "tpe"), context.seed, 100, context.workdir / "source",
                    storage_url=opened.storage_url, study_name="source")
        source = open_source(opened.storage_url, "source", opened.spec)
        enqueue_front(opened.study, opened.spec, opened.storage_url, source)
        return {"memory_prior": load_prior(opened.study, opened.spec, opened.storage_url, ...)}
    Method("tpe-warm", "tpe", setup=warm)

:func:`replay_once` creates a fresh study in a SQLite file under a scratch directory (the tuner
home of that replay: trial directories go there), runs the unchanged coordinator with a
:class:`~tuner.replay.runner.ReplayRunner` on one slot, and returns the normalised hypervolume
after each measured trial (:func:`~tuner.replay.hypervolume.hypervolume_curve`). No MLflow.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from tuner.replay.baselines import HillClimbSampler, SweepSampler
from tuner.replay.hypervolume import Normalizer, hypervolume_curve, run_order
from tuner.replay.runner import ReplayRunner
from tuner.replay.table import MeasuredTable, exhaustive_front, feasible_values, replay_spec
from tuner.results import Outcome
from tuner.runner.base import Slot
from tuner.search.dominance import audit_counts
from tuner.search.objectives import plan_constraints
from tuner.search.samplers import make_sampler
from tuner.spec.models import SamplerName
from tuner.storage.attributes import cost_of, is_measured, outcome_of
from tuner.storage.cost import device_s_of
from tuner.study.coordinator import Coordinator
from tuner.study.studies import OpenStudy, create_study

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.spec.models import StudySpec

DEFAULT_SKIP: Mapping[str, Any] = {"audit_share": 0.1}
"""``sampler.skip_dominated`` as a spec gets it by default (:class:`tuner.spec.search.sampler.SkipDominatedSpec`)."""
DEFAULT_GAIN: Mapping[str, Any] = {"after": 10}
"""``sampler.predicted_gain`` as a spec gets it by default (:class:`tuner.spec.search.sampler.PredictedGainSpec`)."""
BASELINE_SAMPLERS: dict[str, type] = {"sweep": SweepSampler, "hillclimb": HillClimbSampler}
SAMPLER_HOOKS = ("infer_relative_search_space", "sample_relative", "sample_independent", "before_trial", "after_trial")


@dataclass(frozen=True)
class SetupContext:
    """What a method's ``setup`` may use: the table, the seed and the replay's scratch directory."""

    table: MeasuredTable
    seed: int
    workdir: Path


@dataclass(frozen=True)
class Method:
    """How one benchmark method searches (see the module docstring).

    ``sampler``: an Optuna sampler name of :func:`tuner.search.samplers.make_sampler` (its
    ``options`` go into the replay spec's sampler block, so ``make_sampler``'s defaults apply to
    the rest) or a key of :data:`BASELINE_SAMPLERS`. ``setup`` runs on the opened study before
    the coordinator; what it returns (a mapping or None) is added to ``coordinator_options``.
    ``whole_space``: the budget is the whole space (the sweep). ``deterministic``: one seed is
    enough. ``seeds``: fewer seeds than the bench's for a slow sampler (None: the bench's).
    ``skip_dominated``: the sampler block's ``skip_dominated`` (None: off, as before it was the default;
    :data:`DEFAULT_SKIP`: the spec's default; :mod:`tuner.search.dominance`). ``reload_lookahead``: the sampler
    block's (None: the spec's default; 1: proposals run in the order asked; :mod:`tuner.study.load_order`).
    ``predicted_gain``: the sampler block's (None: off, as before it was the default; :data:`DEFAULT_GAIN`: the
    spec's default; :mod:`tuner.search.predicted_gain`).
    """

    name: str
    sampler: str
    options: Mapping[str, Any] = field(default_factory=dict)
    coordinator_options: Mapping[str, Any] = field(default_factory=dict)
    setup: Callable[[OpenStudy, SetupContext], Mapping[str, Any] | None] | None = None
    deterministic: bool = False
    whole_space: bool = False
    seeds: int | None = None
    skip_dominated: Mapping[str, Any] | None = None
    reload_lookahead: int | None = None
    predicted_gain: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Target:
    """What a replay is measured against: the table, its exhaustive front's normalised hypervolume."""

    table: MeasuredTable
    normalizer: Normalizer
    front_hypervolume: float
    front_size: int

    @staticmethod
    def of(table: MeasuredTable) -> Target:
        feasible = feasible_values(table)
        names = [o.metric for o in table.spec.objectives]
        normalizer = Normalizer.over(feasible.values(), names, [o.direction for o in table.spec.objectives])
        front = exhaustive_front(table)
        return Target(table, normalizer, normalizer.hypervolume(front.values()), len(front))


@dataclass(frozen=True)
class Replay:
    """One replayed study: hypervolume fraction after each measured trial, and what it cost."""

    method: str
    seed: int
    fractions: list[float]
    trials: int  # recorded, free ones included
    runs: int  # requests the ReplayRunner served
    stopped_because: str
    elapsed_s: float
    sampler_s: float  # time inside the sampler's hooks
    oom_runs: int = 0  # trials that ran and ran out of memory (each cost a run)
    skipped_oom: int = 0  # SKIPPED_PREDICTED_OOM: proposals the memory model kept from running
    device_s: list[float] = field(default_factory=list)  # cumulative device-seconds after each measured trial
    skipped_dominated: int = 0  # SKIPPED_PREDICTED_DOMINATED: proposals predicted dominated, not run
    audited: int = 0  # of those predicted dominated, the audited ones that ran anyway
    wrong_skips: int = 0  # audited ones that joined the front after all (tuner.search.dominance.audit_counts)


@dataclass
class SamplerClock:
    """Seconds spent inside a sampler's hooks (nested calls counted once)."""

    seconds: float = 0.0
    _depth: int = 0

    def attach(self, sampler: optuna.samplers.BaseSampler) -> None:
        for name in SAMPLER_HOOKS:
            setattr(sampler, name, self._timed(getattr(sampler, name)))

    def _timed(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            started = time.perf_counter()
            try:
                return hook(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - started

        return timed


def sampler_for(method: Method, spec: StudySpec, seed: int) -> optuna.samplers.BaseSampler:
    """The method's sampler for a replay spec (whose sampler block holds the method's options)."""
    if method.sampler in BASELINE_SAMPLERS:
        return BASELINE_SAMPLERS[method.sampler](spec, seed=seed)  # type: ignore[no-any-return]
    return make_sampler(method.sampler, spec, seed)  # type: ignore[arg-type]


def budget_for(method: Method, table: MeasuredTable, budget: int) -> int:
    """``budget`` measured trials, or the whole space plus reference and baseline for a sweep."""
    return table.space_size + 2 if method.whole_space else budget


def replay_once(
    target: Target,
    method: Method,
    seed: int,
    budget: int,
    workdir: Path,
    storage_url: str | None = None,
    study_name: str | None = None,
) -> Replay:
    """Replay one study of ``method`` with ``seed`` (the spec's seed; the sampler's seed is the same).

    The study is ``study_name`` (default ``<method>-seed<seed>``) in ``storage_url`` (default: a
    SQLite file of that name in ``workdir``); ``workdir`` is the replay's tuner home.
    """
    started = time.perf_counter()
    table = target.table
    trials = budget_for(method, table, budget)
    sampler_name: SamplerName = method.sampler if method.sampler in get_args(SamplerName) else "random"  # type: ignore[assignment]
    spec, text = replay_spec(
        table,
        trials,
        sampler_name,
        method.options,
        seed,
        method.skip_dominated,
        method.reload_lookahead,
        method.predicted_gain,
    )
    name = study_name or re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{method.name}-seed{seed}")
    workdir.mkdir(parents=True, exist_ok=True)
    url = storage_url or f"sqlite:///{workdir / (name + '.db')}"
    opened = create_study(
        spec,
        text,
        url,
        name,
        sampler_name,
        trials,
        {"spec_name": spec.name, "replay_of": table.hardware.label, "method": method.name},
    )
    if method.sampler in BASELINE_SAMPLERS:
        opened.study.sampler = sampler_for(method, spec, seed)
    clock = SamplerClock()
    clock.attach(opened.study.sampler)
    options = dict(method.coordinator_options)
    if method.setup is not None:
        options.update(method.setup(opened, SetupContext(table, seed, workdir)) or {})
    runner = ReplayRunner(table)
    coordinator = Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=runner,
        slots=[Slot(0, None, 1)],
        home=workdir,
        device="cpu",
        plan=plan_constraints(spec, {}),
        budget_trials=trials,
        wall_time_s=None,
        **options,
    )
    summary = coordinator.run()
    recorded = opened.study.get_trials(deepcopy=False)
    curve = hypervolume_curve(recorded, target.normalizer)
    fractions = [v / target.front_hypervolume if target.front_hypervolume > 0 else 1.0 for v in curve]
    outcomes = [outcome_of(t) for t in recorded]
    audits = audit_counts(recorded, [o.direction for o in spec.objectives])
    return Replay(
        method.name,
        seed,
        fractions,
        len(recorded),
        runner.runs,
        summary.stopped_because,
        time.perf_counter() - started,
        clock.seconds,
        outcomes.count(Outcome.OOM.value),
        outcomes.count(Outcome.SKIPPED_PREDICTED_OOM.value),
        cost_curve(recorded),
        outcomes.count(Outcome.SKIPPED_PREDICTED_DOMINATED.value),
        audits.audited,
        audits.wrong,
    )


def cost_curve(trials: list[FrozenTrial]) -> list[float]:
    """Cumulative device-seconds (:mod:`tuner.storage.cost`) after each trial that ran a workload, in the order
    they ended: aligned with :func:`~tuner.replay.hypervolume.hypervolume_curve`."""
    spent, curve = 0.0, []
    for trial in run_order(trials):
        if is_measured(trial):
            spent += device_s_of(cost_of(trial)) or 0.0
            curve.append(spent)
    return curve
