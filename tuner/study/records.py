"""How trial results are written to, and read back from, the Optuna storage.

One place knows the user-attribute names, so the tracker, the exporter and
``tuner status`` read the same record the coordinator wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from tuner.pareto import UNAVAILABLE_CONSTRAINTS_ATTR, feasible_measurement, named_constraints
from tuner.results import TrialResult

if TYPE_CHECKING:
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


TRIAL_PROVENANCE_KEYS = ("env", "runtime")
"""Keys of a worker's ``info`` stored as their own attributes (:func:`tuner.runner.worker.trial_provenance`):
``env`` (the trial's environment, secrets masked) and ``runtime`` (packages, torch / CUDA / cuDNN,
driver, git commit, weights' sha256, and ``unavailable``: why a fact is missing)."""


def result_attributes(result: TrialResult) -> dict[str, Any]:
    """The user attributes recording ``result`` (JSON-serialisable); the worker's ``env`` and ``runtime``
    are their own attributes (:data:`TRIAL_PROVENANCE_KEYS`), not part of ``worker_info``."""
    metrics = {
        name: {"value": m.value, "unit": m.unit, "direction": m.direction,
               **({"reason": m.reason} if m.reason else {})}
        for name, m in result.metrics.items()
    }
    return {
        "outcome": result.outcome.value,
        "reason": result.reason,
        "log_tail": result.log_tail[-LOG_TAIL_STORED_CHARS:],
        "metrics": metrics,
        "wall_time_s": round(result.wall_time_s, 6),
        "eval_time_s": round(result.eval_time_s, 6),
        "output_path": result.output_path,
        "worker_info": {k: v for k, v in result.info.items() if k not in TRIAL_PROVENANCE_KEYS},
        "samples": dict(result.samples),
        **{key: result.info[key] for key in TRIAL_PROVENANCE_KEYS if key in result.info},
    }


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
    warm_start_from: str | None = None  # the study whose front queued this setting (a warm start)
    predicted_peak_gb: float | None = None  # SKIPPED_PREDICTED_OOM: the memory model's prediction (None: an OOM)
    prediction_witness: str | None = None  # ... and the trial it comes from ("trial 7", "warm_start:<study> trial 7")
    env: Mapping[str, str] | None = None  # the environment the trial's worker ran with, secrets masked
    runtime: Mapping[str, Any] | None = None  # packages, torch / CUDA / cuDNN, driver, git, weights' sha256
    cut_short: str | None = None  # how the time limit shortened the latency measurement (one line), when it did
    unavailable_constraints: Mapping[str, str] = field(default_factory=dict)  # key -> why it could not be evaluated

    @staticmethod
    def from_trial(trial: "FrozenTrial") -> "TrialRecord":
        attrs = trial.user_attrs
        return TrialRecord(
            number=trial.number,
            state=trial.state.name,
            role=attrs.get("role", "search"),
            outcome=attrs.get("outcome", "RUNNING" if trial.state.name == "RUNNING" else trial.state.name),
            reason=attrs.get("reason"),
            params=dict(trial.params),
            derived=dict(attrs.get("derived", {})),
            values=tuple(trial.values) if trial.values is not None else None,
            constraints=named_constraints(trial),
            metrics=dict(attrs.get("metrics", {})),
            placeholder=bool(attrs.get("placeholder_values", False)),
            duplicate_of=attrs.get("duplicate_of"),
            slot=attrs.get("slot"),
            wall_time_s=attrs.get("wall_time_s"),
            eval_time_s=attrs.get("eval_time_s"),
            datetime_start=trial.datetime_start.isoformat() if trial.datetime_start else None,
            datetime_complete=trial.datetime_complete.isoformat() if trial.datetime_complete else None,
            samples=dict(attrs.get("samples", {})),
            host=attrs.get("host"),
            worker=attrs.get("worker"),
            fingerprint_note=attrs.get("fingerprint_note"),
            warm_start_from=attrs.get("warm_start_from"),
            predicted_peak_gb=attrs.get("predicted_peak_gb"),
            prediction_witness=attrs.get("prediction_witness"),
            env=attrs.get("env"),
            runtime=attrs.get("runtime"),
            cut_short=(attrs.get("worker_info") or {}).get("cut_short"),
            unavailable_constraints=dict(attrs.get(UNAVAILABLE_CONSTRAINTS_ATTR) or {}),
        )

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
    return feasible_measurement(record.state == "COMPLETE", record.values, record.placeholder, record.duplicate_of,
                                record.constraints, record.unavailable_constraints)
