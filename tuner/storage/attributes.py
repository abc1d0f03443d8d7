"""The name of every attribute tuner stores on a trial or a study, and the readers of a stored trial's.

Part of the storage gateway (with :mod:`tuner.storage.records`, the typed records, and
:mod:`tuner.storage.store`, the writes and every Optuna internal): no other module of
``tuner/`` names ``user_attrs`` / ``system_attrs`` (``tests/test_storage_gateway.py``).
Everything else uses these constants and the accessors below, which read a trial the
way the coordinator wrote it (defaults included: a trial without a ``role`` is a
``search`` trial, one without an ``outcome`` shows its state).

Layer: foundation (imports nothing of tuner), so :mod:`tuner.pareto` can judge a
stored trial through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

# --------------------------------------------------------------- trial attributes (Optuna user attributes)
ROLE = "role"  # search | reference | baseline (a trial without one is a search trial)
OUTCOME = "outcome"  # tuner.results.Outcome's value, or INTERRUPTED
REASON = "reason"  # why the outcome (one line or more), None when OK
MEASURED = "measured"  # True once a workload ran for it: counts against the budget
PLACEHOLDER_VALUES = "placeholder_values"  # its values are the wall (OOM / TIMEOUT / never run), not a measurement
HOST = "host"  # the host of the coordinator that started it
WORKER = "worker"  # that coordinator, ``host:pid``
SLOT = "slot"  # the slot it ran on (``gpu0``, ``cpu1``)
CANDIDATE_KEY = "candidate_key"  # the setting's canonical key (one run per key, fleet-wide)
DERIVED = "derived"  # the spec's derived values for its params
DUPLICATE_OF = "duplicate_of"  # a copy: the number of the trial that measured the setting
RERUN_OF = "rerun_of"  # a re-queued setting: the number of the trial it runs again
OWED = "owed"  # a re-queued setting whose original held a place in the trial budget (its host died): it runs
METRICS = "metrics"  # name -> {value, unit, direction[, reason]}
LOG_TAIL = "log_tail"  # the end of the worker's log (a side record)
WALL_TIME_S = "wall_time_s"
COST = "cost"  # device-seconds the run held, by phase (tuner.storage.cost.trial_cost)
EVAL_TIME_S = "eval_time_s"
OUTPUT_PATH = "output_path"
WORKER_INFO = "worker_info"  # the worker's info, less ENV / RUNTIME (a side record)
PAST_CEILING = "past_ceiling"  # the repeats stopped past a latency ceiling (``worker_info``'s one line, kept a row)
WAITING = "waiting"  # why an asked trial has not started yet (one line; the status note while it waits, unslotted)
SETTLED = "settled"  # the repeats stopped once the timed calls settled the trial's place on the front (one line)
QUALITY_SCORED = "quality_scored"  # scored off the device (tuner.runner.scoring): where, seconds, or why it failed
CUT_SHORT = "cut_short"  # how the time limit shortened the latency measurement (``worker_info``'s, kept a row)
SAMPLES = "samples"  # name -> path of a sample output (contact sheet, GIF, text)
ENV = "env"  # the allow-listed environment the worker ran with, secrets masked (a side record)
RUNTIME = "runtime"  # packages, torch / CUDA / cuDNN, driver, git, weights' sha256 (a side record)
TRIAL_RECORDS = (ENV, RUNTIME, WORKER_INFO, LOG_TAIL)
"""A trial's side records: bulky facts only ``tuner show``, the export and the views read, kept out of the
user attributes every coordinator loads (:mod:`tuner.storage.store_rows`: a table of tuner's own; user
attributes in memory and on trials an older tuner wrote; read with :func:`tuner.storage.records.trial_records`)."""
INVOCATION = "invocation"  # what the adapter ran, exactly
UNAVAILABLE_CONSTRAINTS = "unavailable_constraints"  # constraint key -> why it could not be evaluated
WARM_START_FROM = "warm_start_from"  # a setting a warm start queued: the source study's name
PREDICTED_PEAK_GB = "predicted_peak_gb"  # SKIPPED_PREDICTED_OOM: the memory model's prediction
PREDICTION_WITNESS = "prediction_witness"  # ... and the trial it comes from
PREDICTION = "prediction"  # latency / memory predicted before the trial ran (tuner.search.prediction), by metric
SKIP_AUDIT = "skip_audit"  # would be skipped as dominated, ran as an audit: {"front": [values], "dominated_by"}
FINGERPRINT_NOTE = "fingerprint_note"  # how this host differs from the reference's, when it does
REFERENCE_OUTPUT = "reference_output"  # the reference trial's output path on its host
PER_INPUT = "per_input"  # a trial of several inputs (spec cases): input -> metric -> {value[, reason]}
CLIFFS = "cliffs"  # lines naming each input worse than the trial's mean by more than the spec's cliff_margins
COMPARED_WITH = "compared_with"  # {"trial": n, "shape": {...}}: the reference at the trial's shape (tuner.study.shapes)
REFERENCE_OUTPUT_SHA256 = "reference_output_sha256"
REFERENCE_OUTPUT_URI = "reference_output_uri"
REFERENCE_OUTPUT_BYTES = "reference_output_bytes"
REFERENCE_OUTPUT_PUBLISH_ERROR = "reference_output_publish_error"
REFERENCE_OUTPUT_RUN_ID = "reference_output_run_id"
FINGERPRINT = "fingerprint"  # trial: the reference host's; study: the creating host's

# --------------------------------------------------------------- trial system attributes (Optuna's own)
FIXED_PARAMS = "fixed_params"  # an enqueued trial's setting, before it is asked
CONSTRAINT_PREFIX = "constraints:"  # Optuna 5's per-key constraints: ``constraints:<key>``
LEGACY_CONSTRAINTS = "constraints"  # the list optuna-dashboard 0.21 reads (dashboard view only)

# --------------------------------------------------------------- study attributes
SPEC_YAML = "spec_yaml"  # the spec's text: ``tuner resume`` needs nothing else
SPEC_NAME = "spec_name"
SPEC_HASH = "spec_hash"
SAMPLER = "sampler"
BUDGET_TRIALS = "budget_trials"
BUDGET_WALL_TIME_S = "budget_wall_time_s"
BUDGET_DEVICE_HOURS = "budget_device_hours"  # device-hours the study may spend (every host)
OBJECTIVES = "objectives"  # the objectives' metric names
WORKLOAD_CLASS = "workload_class"
DEVICE = "device"  # cpu | cuda, resolved at creation
GPU_TYPE = "gpu_type"
PROVENANCE = "provenance"  # git commit and packages of the creating host
MLFLOW_RUN_ID = "mlflow_run_id"
MLFLOW_URI = "mlflow_uri"  # redacted
CANCELLED = "cancelled"
CANCELLED_AT = "cancelled_at"
SUBMITTED_AT = "submitted_at"
EVENTS = "events"  # [{at, event, overrides}]: resumes that changed the study
DISABLED_CONSTRAINTS = "disabled_constraints"  # metric -> why this host cannot hold it
TIMEOUT_OVERRIDE = "timeout_s_override"  # ``tuner resume --timeout``
MEASUREMENT_OVERRIDES = "measurement_overrides"  # ``tuner resume --warmup / --min-repeats ...``
WARM_START = "warm_start"  # where a warm-started study started from, what was enqueued

# --------------------------------------------------------------- the dashboard view (tuner.tracking.dashboard)
VIEW_OF = "view_of"  # view study: the real storage, redacted
SOURCE_STUDY_ID = "source_study_id"
FRONT = "front"
REFRESHED_AT = "refreshed_at"
CONSTRAINT_ORDER = "constraint_order"  # the keys of the legacy constraint list, in order
VIEW_STATE = "tuner_state"  # view trial: the real trial's state
VIEW_COPY_OF = "copy_of"
VIEW_VALUES = "values"  # a PRUNED view trial: objective name -> value

# --------------------------------------------------------------- values
SEARCH, REFERENCE, BASELINE = "search", "reference", "baseline"  # roles
INTERRUPTED = "INTERRUPTED"  # the outcome of a trial given back (re-queued) before it ended


class Attributed(Protocol):
    """Anything with stored user attributes: a frozen or live trial, a study, a study summary."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...


def attributes_of(stored: Attributed) -> Mapping[str, Any]:
    """Every user attribute of ``stored`` (a trial or a study), read-only: for code that hands a trial's
    attributes on as one mapping (the reference hand-off, an export's provenance)."""
    return MappingProxyType(stored.user_attrs)


def role_of(trial: Attributed) -> str:
    """``search``, ``reference`` or ``baseline`` (``search`` when none is stored)."""
    return str(trial.user_attrs.get(ROLE, SEARCH))


def outcome_of(trial: FrozenTrial) -> str:
    """The stored outcome, else the trial's state name (``RUNNING``, ``WAITING``, ``FAIL``...)."""
    return str(trial.user_attrs.get(OUTCOME, trial.state.name))


def reason_of(trial: Attributed) -> str | None:
    """Why the trial ended as it did (None when nothing is stored)."""
    reason = trial.user_attrs.get(REASON)
    return None if reason is None else str(reason)


def is_measured(trial: Attributed) -> bool:
    """True when a workload ran for the trial (it counts against the budget)."""
    return bool(trial.user_attrs.get(MEASURED))


def is_placeholder(trial: Attributed) -> bool:
    """True when the trial's values are placeholders (the wall), not a measurement."""
    return bool(trial.user_attrs.get(PLACEHOLDER_VALUES))


def duplicate_of(trial: Attributed) -> int | None:
    """The trial a copy repeats (None when the trial is not a copy)."""
    return trial.user_attrs.get(DUPLICATE_OF)


def rerun_of(trial: Attributed) -> int | None:
    """The trial a re-queued setting runs again (None otherwise)."""
    return trial.user_attrs.get(RERUN_OF)


def owed(trial: Attributed) -> bool:
    """Whether a re-queued setting keeps its original's place in the trial budget: the original was running on a
    host that died, counted by every host as holding a place, so the rerun starts even when the budget is spent."""
    return bool(trial.user_attrs.get(OWED))


def candidate_key_of(trial: Attributed) -> str | None:
    """The setting's canonical key, once the trial was resolved (None before, or when it never was)."""
    key = trial.user_attrs.get(CANDIDATE_KEY)
    return None if key is None else str(key)


def host_of(trial: Attributed) -> str | None:
    """The host that started the trial (None for trials not started yet)."""
    return trial.user_attrs.get(HOST)


def worker_of(trial: Attributed) -> str | None:
    """The coordinator that started the trial, ``host:pid`` (None for trials not started yet)."""
    return trial.user_attrs.get(WORKER)


def metrics_of(trial: Attributed) -> Mapping[str, Any]:
    """Metric name -> ``{value, unit, direction[, reason]}`` (empty when none is stored)."""
    return trial.user_attrs.get(METRICS) or {}


def wall_time_s_of(trial: Attributed) -> float | None:
    """The worker's wall time for the trial, seconds (None when it did not run)."""
    return trial.user_attrs.get(WALL_TIME_S)


def skip_audit_of(trial: Attributed) -> Any:
    """The ``skip_audit`` of a trial run as an audit of a dominance skip (None for any other)."""
    return attributes_of(trial).get(SKIP_AUDIT)


def cost_of(trial: Attributed) -> Any:
    """The stored ``cost`` of a run (:func:`tuner.storage.cost.trial_cost`); None when it has none."""
    return attributes_of(trial).get(COST)


def prediction_of(trial: Attributed) -> Mapping[str, Any]:
    """Metric -> ``{value, low, high, fitted_on, prior}`` predicted before the trial ran
    (:mod:`tuner.search.prediction`); empty when it ran without one."""
    return trial.user_attrs.get(PREDICTION) or {}


def unavailable_constraints_of(trial: Attributed) -> Mapping[str, Any]:
    """Constraint key -> why it could not be evaluated (empty when every constraint was)."""
    return trial.user_attrs.get(UNAVAILABLE_CONSTRAINTS) or {}


def enqueued_params(trial: FrozenTrial) -> dict[str, Any] | None:
    """The setting a trial was enqueued with (Optuna's ``fixed_params``); None for a trial the sampler proposed."""
    fixed = trial.system_attrs.get(FIXED_PARAMS)
    return None if fixed is None else dict(fixed)


def named_constraints(trial: FrozenTrial) -> dict[str, float]:
    """The trial's constraints by key, from Optuna 5's per-key form (``constraints:<key>``).

    ``FrozenTrial.constraints`` also lists the legacy ``constraints`` list (kept for
    optuna-dashboard) under ``"0"``, ``"1"``, ...; this leaves those copies out. A trial with
    only the legacy list (written by an older tool) gets ``FrozenTrial.constraints``.
    """
    named = {
        key[len(CONSTRAINT_PREFIX) :]: float(value)
        for key, value in trial.system_attrs.items()
        if key.startswith(CONSTRAINT_PREFIX)
    }
    return named or dict(trial.constraints)
