"""Typed records of what the storage holds: a trial (:class:`TrialRecord`) and a study (:class:`StudyRecord`).

Part of the storage gateway (:mod:`tuner.storage.attributes` names every attribute,
:mod:`tuner.storage.store` writes them): the tracker, the exporter, the service and
``tuner status`` read the same record the coordinator wrote, through these. A trial's bulky side records
(environment, runtime, worker info, log tail) are read with :func:`trial_records` / :func:`full_record`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from tuner.pareto import feasible_measurement
from tuner.results import TrialResult
from tuner.runner.recorded_env import recorded_only
from tuner.storage import attributes as names
from tuner.storage.attributes import Attributed, named_constraints
from tuner.storage.cost import CostedTrial, StudyCost, device_s_of, study_cost
from tuner.storage.store_rows import stored_records

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

LOG_TAIL_STORED_CHARS = 2000

NOISY_CV = 0.10
"""A trial whose stored ``latency_cv`` is above this is *noisy* (see :attr:`TrialRecord.noisy`).

Why 0.10: it is the default ``measurement.noisy_cv`` the latency evaluator flags with
(so ``latency_noisy`` and this definition agree on every study that keeps the default),
twice the default convergence target ``cv_target = 0.05`` (a trial above it stopped at
``max_repeats`` without converging), and at 0.10 the median of the usual 3–10 repeats is
uncertain by about 1.25 × 0.10 / sqrt(n) ≈ 4–7 % (one standard error): two such trials
less than ~10 % apart on latency cannot be ordered. Below it, wall-clock timing on a
quiet machine is trusted. A study's own ``measurement.noisy_cv`` may be stricter (its
stored ``latency_noisy`` flag then counts too) but never looser.
"""


TRIAL_PROVENANCE_KEYS = (names.ENV, names.RUNTIME)
"""Keys of a worker's ``info`` stored as their own side records (:func:`tuner.runner.worker.trial_provenance`):
``env`` (the trial's allow-listed environment, secrets masked) and ``runtime`` (packages, torch / CUDA / cuDNN,
driver, git commit, weights' sha256, and ``unavailable``: why a fact is missing)."""


def result_attributes(result: TrialResult) -> dict[str, Any]:
    """The user attributes recording ``result`` (JSON-serialisable): what a coordinator reads (outcome, metrics,
    times, samples, ``cut_short``); the bulky rest is :func:`result_records`."""
    metrics = {
        name: {"value": m.value, "unit": m.unit, "direction": m.direction, **({"reason": m.reason} if m.reason else {})}
        for name, m in result.metrics.items()
    }
    cut_short = result.info.get("cut_short")
    past_ceiling = result.info.get("past_ceiling")
    settled = result.info.get("settled")
    scored = result.info.get(names.QUALITY_SCORED)
    per_input = {
        case: {name: {"value": m.value, **({"reason": m.reason} if m.reason else {})} for name, m in figures.items()}
        for case, figures in result.per_input.items()
    }
    return {
        names.OUTCOME: result.outcome.value,
        names.REASON: result.reason,
        names.METRICS: metrics,
        names.WALL_TIME_S: round(result.wall_time_s, 6),
        names.EVAL_TIME_S: round(result.eval_time_s, 6),
        names.OUTPUT_PATH: result.output_path,
        names.SAMPLES: dict(result.samples),
        **({names.CUT_SHORT: cut_short} if cut_short else {}),
        **({names.PAST_CEILING: past_ceiling} if past_ceiling else {}),
        **({names.SETTLED: settled} if settled else {}),
        **({names.QUALITY_SCORED: scored} if scored else {}),
        **({names.PER_INPUT: per_input} if per_input else {}),
        **({names.CLIFFS: list(result.cliffs)} if result.cliffs else {}),
    }


def result_records(result: TrialResult) -> dict[str, Any]:
    """The side records of ``result`` (:data:`tuner.storage.attributes.TRIAL_RECORDS`, JSON-serialisable): the log
    tail (its last :data:`LOG_TAIL_STORED_CHARS`), ``worker_info`` (the worker's info less ``env`` and ``runtime``)
    and the worker's ``env`` and ``runtime`` (:data:`TRIAL_PROVENANCE_KEYS`) when it reported them."""
    return {
        names.LOG_TAIL: result.log_tail[-LOG_TAIL_STORED_CHARS:],
        names.WORKER_INFO: {k: v for k, v in result.info.items() if k not in TRIAL_PROVENANCE_KEYS},
        **{key: result.info[key] for key in TRIAL_PROVENANCE_KEYS if key in result.info},
    }


@lru_cache(maxsize=32)
def _record_env_of_spec(spec_yaml: str) -> tuple[str, ...]:
    from tuner.spec.loading import parse_spec

    try:
        return tuple(parse_spec(spec_yaml, source="<stored spec>").record_env)
    except ValueError:
        return ()


def study_record_env(study: Attributed) -> tuple[str, ...]:
    """The ``record_env`` of the spec stored with ``study`` (empty: none, or no spec a reader can parse)."""
    spec_yaml = StudyRecord.of(study).spec_yaml
    return _record_env_of_spec(spec_yaml) if isinstance(spec_yaml, str) and spec_yaml else ()


def _with_recorded_env(records: dict[str, Any], record_env: Sequence[str]) -> dict[str, Any]:
    """``records`` with its ``env`` filtered to what the worker records now
    (:func:`tuner.runner.recorded_env.recorded_only`): an older tuner recorded the whole environment."""
    if names.ENV in records:
        records[names.ENV] = recorded_only(records[names.ENV], record_env)
    return records


def trial_records(
    study: optuna.Study, trials: Sequence[FrozenTrial], record_env: Sequence[str] | None = None
) -> dict[int, dict[str, Any]]:
    """Trial number -> the side records of each of ``trials`` of ``study`` (name -> value, only those stored):
    the side table's (:func:`tuner.storage.store_rows.stored_records`, one query), else the trial's user attributes
    (in memory, or written by an older tuner). The one reader of env, runtime, worker info and log tail.
    ``env`` holds only the allow-listed variables and the study spec's ``record_env``
    (:mod:`tuner.runner.recorded_env`), however it was stored (``record_env``: that list when the caller has
    read it already, :func:`study_record_env`)."""
    stored = stored_records(study, [t.number for t in trials])
    if record_env is None:
        record_env = study_record_env(study) if trials else ()
    return {
        t.number: _with_recorded_env(
            {**{k: t.user_attrs[k] for k in names.TRIAL_RECORDS if k in t.user_attrs}, **stored.get(t.number, {})},
            record_env,
        )
        for t in trials
    }


def full_record(study: optuna.Study, trial: FrozenTrial) -> TrialRecord:
    """:meth:`TrialRecord.from_trial` with the trial's side records read (env, runtime, log tail)."""
    record_env = study_record_env(study)  # the study's attributes read once
    return TrialRecord.from_trial(trial, trial_records(study, [trial], record_env)[trial.number], record_env)


@dataclass(frozen=True)
class TrialRecord:
    """A read-only view of one stored trial, as the views (MLflow, export) need it."""

    number: int
    state: str
    role: str
    outcome: str
    reason: str | None
    params: Mapping[str, Any]
    derived: Mapping[str, Any]
    values: tuple[float, ...] | None
    constraints: Mapping[str, float]
    metrics: Mapping[str, Mapping[str, Any]]
    placeholder: bool
    duplicate_of: int | None
    slot: str | None
    wall_time_s: float | None
    eval_time_s: float | None
    datetime_start: str | None
    datetime_complete: str | None
    samples: Mapping[str, str] = field(default_factory=dict)
    host: str | None = None  # where the trial ran (every coordinator writes these when it starts a trial)
    worker: str | None = None
    fingerprint_note: str | None = None  # how this host differs from the reference's, when it does
    compared_with: Mapping[str, Any] | None = None  # the reference at its shape: {"trial": n, "shape": {...}}
    warm_start_from: str | None = None  # the study whose front queued this setting (a warm start)
    predicted_peak_gb: float | None = None  # SKIPPED_PREDICTED_OOM: the memory model's prediction (None: an OOM)
    prediction_witness: str | None = None  # ... and the trial it comes from ("trial 7", "warm_start:<study> trial 7")
    env: Mapping[str, str] | None = None  # the allow-listed environment the trial's worker ran with, secrets masked
    runtime: Mapping[str, Any] | None = None  # packages, torch / CUDA / cuDNN, driver, git, weights' sha256
    cut_short: str | None = None  # how the time limit shortened the latency measurement (one line), when it did
    past_ceiling: str | None = None  # the repeats stopped past a latency ceiling (one line): it cannot join the front
    waiting: str | None = None  # why it had not started when asked (shown while RUNNING without a slot)
    settled: str | None = None  # the repeats stopped once they settled the trial's place on the front (one line)
    quality_scored: Mapping[str, Any] | None = None  # scored off the device: where, seconds (tuner.runner.scoring)
    unavailable_constraints: Mapping[str, str] = field(default_factory=dict)  # key -> why it could not be evaluated
    measured: bool = False  # a workload ran for it (it counts against the budget)
    log_tail: str | None = None  # the end of the worker's log, as stored (its last LOG_TAIL_STORED_CHARS)
    cost: Mapping[str, Any] | None = None  # device-seconds the run held, by phase (tuner.storage.cost.trial_cost)
    per_input: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)  # input -> metric -> value
    cliffs: tuple[str, ...] = ()  # inputs worse than the trial's mean by more than the spec's cliff_margins
    prediction: Mapping[str, Mapping[str, Any]] | None = None  # predicted before it ran (tuner.search.prediction)
    sustained: Any = None  # measurement.sustained's levels (a list; by input name for several inputs), when it ran

    @staticmethod
    def from_trial(
        trial: FrozenTrial, records: Mapping[str, Any] | None = None, record_env: Sequence[str] = ()
    ) -> TrialRecord:
        """The record of ``trial``; ``env``, ``runtime`` and ``log_tail`` from its side ``records``
        (:func:`trial_records`) when given, else from its user attributes (None for a trial whose side
        records are in the side table: read them with :func:`full_record`). ``env`` holds only the
        allow-listed variables and ``record_env`` (the study spec's; :func:`study_record_env`)."""
        attrs = trial.user_attrs
        side = _with_recorded_env(
            {**{k: attrs[k] for k in names.TRIAL_RECORDS if k in attrs}, **(records or {})}, record_env
        )
        return TrialRecord(
            number=trial.number,
            state=trial.state.name,
            role=attrs.get(names.ROLE, names.SEARCH),
            outcome=attrs.get(names.OUTCOME, trial.state.name),
            reason=attrs.get(names.REASON),
            params=dict(trial.params),
            derived=dict(attrs.get(names.DERIVED, {})),
            values=tuple(trial.values) if trial.values is not None else None,
            constraints=named_constraints(trial),
            metrics=dict(attrs.get(names.METRICS, {})),
            placeholder=bool(attrs.get(names.PLACEHOLDER_VALUES, False)),
            duplicate_of=attrs.get(names.DUPLICATE_OF),
            slot=attrs.get(names.SLOT),
            wall_time_s=attrs.get(names.WALL_TIME_S),
            eval_time_s=attrs.get(names.EVAL_TIME_S),
            datetime_start=trial.datetime_start.isoformat() if trial.datetime_start else None,
            datetime_complete=trial.datetime_complete.isoformat() if trial.datetime_complete else None,
            samples=dict(attrs.get(names.SAMPLES, {})),
            host=attrs.get(names.HOST),
            worker=attrs.get(names.WORKER),
            fingerprint_note=attrs.get(names.FINGERPRINT_NOTE),
            compared_with=attrs.get(names.COMPARED_WITH),
            warm_start_from=attrs.get(names.WARM_START_FROM),
            predicted_peak_gb=attrs.get(names.PREDICTED_PEAK_GB),
            prediction_witness=attrs.get(names.PREDICTION_WITNESS),
            env=side.get(names.ENV),
            runtime=side.get(names.RUNTIME),
            cut_short=attrs.get(names.CUT_SHORT) or (side.get(names.WORKER_INFO) or {}).get("cut_short"),
            past_ceiling=attrs.get(names.PAST_CEILING),
            settled=attrs.get(names.SETTLED),
            quality_scored=attrs.get(names.QUALITY_SCORED),
            waiting=attrs.get(names.WAITING),
            unavailable_constraints=dict(attrs.get(names.UNAVAILABLE_CONSTRAINTS) or {}),
            measured=bool(attrs.get(names.MEASURED)),
            log_tail=side.get(names.LOG_TAIL),
            cost=attrs.get(names.COST) if isinstance(attrs.get(names.COST), Mapping) else None,
            per_input=dict(attrs.get(names.PER_INPUT) or {}),
            cliffs=tuple(attrs.get(names.CLIFFS) or ()),
            sustained=(side.get(names.WORKER_INFO) or {}).get("sustained"),
            prediction=attrs.get(names.PREDICTION),
        )

    @property
    def device_s(self) -> float | None:
        """Device-seconds the run held (None: it ran nothing, or its cost is unknown)."""
        return device_s_of(self.cost)

    def costed(self) -> CostedTrial:
        """What :func:`tuner.storage.cost.study_cost` needs of this trial."""
        return CostedTrial(self.number, self.outcome, self.measured, self.duplicate_of, self.cost)

    @property
    def role_shown(self) -> str:
        """The role as views print it: ``search (warm start)`` for a setting a warm start queued."""
        return f"{self.role} (warm start)" if self.warm_start_from else self.role

    def metric_value(self, name: str) -> float | None:
        metric = self.metrics.get(name)
        value = metric.get("value") if metric else None
        return float(value) if value is not None else None

    @property
    def latency_cv(self) -> float | None:
        """The stored coefficient of variation of the latency repeats (std / mean, ddof=1); None when unknown."""
        return self.metric_value("latency_cv")

    @property
    def noisy(self) -> bool:
        """True when this trial's latency is not to be taken as a fact: the one definition of "noisy".

        Noisy when the stored ``latency_cv`` is above :data:`NOISY_CV`, or when the worker
        stored ``latency_noisy = 1`` (the study's ``measurement.noisy_cv`` was stricter).
        A trial without a CV (one repeat, never measured) is not called noisy: nothing says so.
        """
        cv = self.latency_cv
        flagged = self.metric_value("latency_noisy")
        return (cv is not None and cv > NOISY_CV) or (flagged is not None and flagged > 0)


def record_feasible(record: TrialRecord) -> bool:
    """COMPLETE, real values (no placeholder), not a copy, every constraint a number <= 0 and none
    unavailable: :func:`tuner.pareto.feasible_measurement`, the test the front applies to frozen trials."""
    return feasible_measurement(
        record.state == "COMPLETE",
        record.values,
        record.placeholder,
        record.duplicate_of,
        record.constraints,
        record.unavailable_constraints,
    )


@dataclass(frozen=True)
class StudyRecord:
    """A read-only view of a study's stored attributes (of an ``optuna.Study`` or a summary from
    ``get_all_studies``), as stored: a missing attribute is None (or empty), nothing is coerced
    that a reader may want to check (a study another tool made may hold anything)."""

    spec_yaml: str | None
    spec_name: str | None
    spec_hash: str | None
    sampler: str | None
    budget_trials: Any  # an int, or None: no trial budget
    budget_wall_time_s: Any  # seconds, or None
    budget_device_hours: Any  # device-hours the study may spend (every host), or None
    objectives: tuple[str, ...]  # the objectives' metric names
    workload_class: str | None
    device: str | None  # cpu | cuda, resolved at creation
    gpu_type: str | None
    fingerprint: Mapping[str, Any]  # the creating host's
    provenance: Mapping[str, Any] | None
    mlflow_run_id: str | None
    mlflow_uri: str | None  # redacted
    cancelled: bool
    cancelled_at: str | None
    events: tuple[Mapping[str, Any], ...]  # {at, event, overrides}
    disabled_constraints: Mapping[str, str]
    timeout_override_s: float | None
    measurement_overrides: Mapping[str, Any]
    warm_start: Mapping[str, Any] | None  # where a warm start came from (see tuner.search.warm_start)
    view_of: str | None = None  # a dashboard view: the real storage (redacted)
    source_study_id: int | None = None
    constraint_order: tuple[str, ...] = ()

    @property
    def tuner_study(self) -> bool:
        """True for a study tuner created (its spec is stored with it)."""
        return bool(self.spec_yaml)

    @staticmethod
    def of(study: Attributed) -> StudyRecord:
        attrs = study.user_attrs
        warm = attrs.get(names.WARM_START)
        fingerprint, objectives = attrs.get(names.FINGERPRINT), attrs.get(names.OBJECTIVES)
        return StudyRecord(
            spec_yaml=attrs.get(names.SPEC_YAML),
            spec_name=attrs.get(names.SPEC_NAME),
            spec_hash=attrs.get(names.SPEC_HASH),
            sampler=attrs.get(names.SAMPLER),
            budget_trials=attrs.get(names.BUDGET_TRIALS),
            budget_wall_time_s=attrs.get(names.BUDGET_WALL_TIME_S),
            budget_device_hours=attrs.get(names.BUDGET_DEVICE_HOURS),
            objectives=tuple(str(n) for n in objectives) if isinstance(objectives, (list, tuple)) else (),
            workload_class=attrs.get(names.WORKLOAD_CLASS),
            device=attrs.get(names.DEVICE),
            gpu_type=attrs.get(names.GPU_TYPE),
            fingerprint=dict(fingerprint) if isinstance(fingerprint, Mapping) else {},
            provenance=attrs.get(names.PROVENANCE),
            mlflow_run_id=attrs.get(names.MLFLOW_RUN_ID),
            mlflow_uri=attrs.get(names.MLFLOW_URI),
            cancelled=bool(attrs.get(names.CANCELLED, False)),
            cancelled_at=attrs.get(names.CANCELLED_AT),
            events=tuple(attrs.get(names.EVENTS) or ()),
            disabled_constraints=dict(attrs.get(names.DISABLED_CONSTRAINTS) or {}),
            timeout_override_s=attrs.get(names.TIMEOUT_OVERRIDE),
            measurement_overrides=dict(attrs.get(names.MEASUREMENT_OVERRIDES) or {}),
            warm_start=warm if isinstance(warm, Mapping) else None,
            view_of=attrs.get(names.VIEW_OF),
            source_study_id=attrs.get(names.SOURCE_STUDY_ID),
            constraint_order=tuple(attrs.get(names.CONSTRAINT_ORDER) or ()),
        )


def study_cost_of(trials: Sequence[FrozenTrial]) -> StudyCost:
    """A study's device-seconds used / wasted / avoided (:func:`tuner.storage.cost.study_cost`) from its trials."""
    return study_cost([TrialRecord.from_trial(t).costed() for t in trials])
