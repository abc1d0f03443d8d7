"""The request and response bodies of ``tuner serve`` (pydantic models; they are its OpenAPI schema).

Every error answer is :class:`ErrorBody`: ``{"detail": "<one line>"}``. Times are ISO 8601
strings (UTC where the storage keeps UTC), budgets and counts are numbers of trials (a device
budget: device-hours), objective values are in their metric's unit (``None`` when not a finite
number). Costs are device-seconds (``_s``) or device-hours (``_h``): GPU-hours for a CUDA study,
CPU-slot hours otherwise (``unit``); see :mod:`tuner.storage.cost`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tuner.spec.models import SamplerName

GPU_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.()/+\-]{0,127}$"
TRIALS_MAX = 1_000_000
PAGE_LIMIT_MAX = 500


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(_Model):
    """Every error answer: one line saying what is wrong (never a traceback, a token or a password)."""

    detail: str


class SubmitRequest(_Model):
    """``POST /api/studies``: a spec (its YAML text) to create a study from, for workers to pick up."""

    spec_yaml: str = Field(description="The spec as YAML text (at most 1 MiB), as in search_spaces/*.yaml.")
    name: str | None = Field(
        default=None,
        max_length=1000,
        description="Study name: letters, digits, '_', '-', '.', at most 128 characters, not "
        "starting with '.' (default: <spec name>-<gpu type>-<UTC time>).",
    )
    trials: int | None = Field(
        default=None, ge=1, le=TRIALS_MAX, description="Trials to measure (default: the spec's budget.trials)."
    )
    device_hours: float | None = Field(
        default=None,
        gt=0,
        le=1e7,
        allow_inf_nan=False,
        description="Device-hours the study's runs may hold, every worker together "
        "(default: the spec's budget.device_hours).",
    )
    gpu_type: str | None = Field(
        default=None,
        pattern=GPU_TYPE_PATTERN,
        description="The GPU type the study targets, as workers report it (e.g. "
        "'NVIDIA H200'), or 'cpu'. Default: 'cpu' for a 'device: cpu' spec; "
        "required otherwise.",
    )
    sampler: SamplerName | None = Field(default=None, description="Default: the spec's sampler.")


class WorkerSeen(_Model):
    """A worker that ran trials of the study: ``worker`` is ``host:pid`` (None when only the host is known)."""

    worker: str | None
    host: str | None
    trials: int
    running: int
    last_seen: str | None = Field(description="Start or end of its latest trial (ISO 8601), when known.")


class FrontPoint(_Model):
    """A trial on the Pareto front (feasible, measured, non-dominated)."""

    number: int
    role: str
    values: list[float | None]
    params: dict[str, Any]


class CostSummary(_Model):
    """What a study's runs have cost so far, every worker together (:mod:`tuner.storage.cost`).

    ``used + wasted = recorded``: the sum of the trials' recorded ``device_s``, in hours;
    ``avoided`` is an estimate, never part of it.
    """

    unit: str = Field(description="'GPU-h' (a CUDA study) or 'CPU-h' (CPU-slot hours).")
    used_device_h: float = Field(description="Device-hours of runs measured OK (constraint-violating ones too).")
    wasted_device_h: float = Field(
        description="Device-hours of runs that ended OOM, TIMEOUT, CRASH or INVALID, or were interrupted."
    )
    avoided_device_h: float = Field(
        description="Device-hours not spent, estimated: copies of measured settings "
        "(their original's cost), predicted OOMs and refused settings "
        "(medians; see avoided_estimate)."
    )
    recorded_device_h: float = Field(description="used + wasted: the trials' recorded device-seconds, in hours.")
    used_trials: dict[str, int] = Field(description="Runs in 'used' by outcome.")
    wasted_trials: dict[str, int] = Field(description="Runs in 'wasted' by outcome.")
    avoided_trials: dict[str, int] = Field(
        description="Trials in 'avoided' by kind (copy, predicted OOM, refused by rules)."
    )
    avoided_estimate: str = Field(description="How 'avoided' was estimated, in one line (empty: nothing avoided).")
    runs_without_cost: int = Field(
        description="Measured runs without a recorded cost (their coordinator died): not counted."
    )
    budget_device_hours: float | None = Field(description="The study's device-hour budget (None: none).")


class StudySummary(_Model):
    """What a study is and where it stands."""

    name: str
    spec_name: str | None
    workload: str | None
    gpu_type: str | None
    device: str | None
    sampler: str | None
    objectives: list[str]
    directions: list[str]
    trials: int = Field(description="Trials recorded (every state).")
    counts: dict[str, int] = Field(
        description="Trials by outcome (OK, OOM, TIMEOUT, CRASH, INVALID, "
        "SKIPPED_PREDICTED_OOM, RUNNING, "
        "WAITING, ...)."
    )
    measured: int = Field(description="Trials that ran a workload (what the budget counts).")
    budget_trials: int | None
    budget_left: int | None
    cancelled: bool
    workers: list[WorkerSeen]
    front: list[FrontPoint]
    cost: CostSummary = Field(description="What its runs have cost so far: device-hours used / wasted / avoided.")


class StudyListEntry(_Model):
    """One study of the storage: what its study attributes say, its trial count and what its runs used."""

    name: str
    trials: int
    gpu_type: str | None
    budget_trials: int | None
    cancelled: bool
    tuner_study: bool = Field(description="Created by tuner (a spec is stored with it).")
    used_device_h: float = Field(description="Device-hours of its runs measured OK (see CostSummary), in 'unit'.")
    unit: str = Field(description="'GPU-h' (a CUDA study) or 'CPU-h' (CPU-slot hours).")


class StudyList(_Model):
    studies: list[StudyListEntry]


class TrialEntry(_Model):
    """One trial as the storage records it."""

    number: int
    state: str
    role: str
    outcome: str
    values: list[float | None] | None
    placeholder: bool = Field(description="The values are OOM / TIMEOUT / rule placeholders, not measurements.")
    params: dict[str, Any]
    host: str | None
    slot: str | None
    worker: str | None
    reason: str | None
    started: str | None
    completed: str | None
    device_s: float | None = Field(
        description="Device-seconds its run held (wall seconds x the slot's devices); "
        "None: it ran nothing (a copy, a skip) or its cost is unknown."
    )


class TrialPage(_Model):
    """Trials ``offset`` .. ``offset + limit - 1`` by trial number, of ``total``."""

    total: int
    offset: int
    limit: int
    trials: list[TrialEntry]


class Health(_Model):
    status: Literal["ok"]


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "Bad input: the one line says what."),
        (401, "Missing or wrong bearer token."),
        (404, "No such study."),
        (413, "The request body is too large."),
        (422, "A field or query parameter is invalid: the one line names it."),
        (503, "The storage cannot be reached."),
    )
}
"""Error answers every API route may give (declared in the OpenAPI schema)."""
