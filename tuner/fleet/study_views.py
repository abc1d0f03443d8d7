"""What ``tuner serve`` shows of a study, read from the storage only (no HTTP here).

Contracts:

* :func:`study_summary` -- counts by outcome, measured trials against the budget
  (``budget_trials``; ``measured`` counts trials that ran a workload, as the
  coordinator does), the workers seen (from the trial attributes ``worker`` =
  ``host:pid``, ``host``, written when a trial starts; trials without them are
  left out: their worker is unknown), ``cancelled``, the Pareto front
  (:func:`tuner.pareto.front_trials`) and what its runs cost (:func:`cost_summary`: device-hours
  used / wasted / avoided, :mod:`tuner.storage.cost`, the figures ``tuner status`` prints).
* :func:`trial_page` -- one :class:`TrialEntry` per trial by number (with its ``device_s``), a page of them.
* :func:`study_list` -- every study of the storage, from study attributes, trial counts and the
  device-hours its runs used.

Numbers that are not finite (NaN, inf) become ``None``: JSON has no such numbers.
Free text taken from trials (reasons) passes through :func:`tuner.secrets.redact_text`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tuner.fleet.api_models import (
    CostSummary,
    FrontPoint,
    StudyList,
    StudyListEntry,
    StudySummary,
    TrialEntry,
    TrialPage,
    WorkerSeen,
)
from tuner.front.cost import budget_hours, cost_of_records
from tuner.pareto import front_trials
from tuner.secrets import redact_text
from tuner.storage.attributes import host_of, is_measured, role_of, worker_of
from tuner.storage.cost import SECONDS_PER_HOUR, device_unit
from tuner.storage.records import StudyRecord, TrialRecord
from tuner.storage.store import trials_of

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth of lists / dicts) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _text(value: Any) -> str | None:
    return None if value is None else redact_text(str(value))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def measured_count(trials: Iterable[FrozenTrial]) -> int:
    """Trials that ran a workload (the ``measured`` attribute the coordinator sets)."""
    return sum(1 for t in trials if is_measured(t))


def _seen_at(trial: FrozenTrial) -> str | None:
    moment = trial.datetime_complete or trial.datetime_start
    return moment.isoformat() if moment is not None else None


def workers_seen(trials: Sequence[FrozenTrial]) -> list[WorkerSeen]:
    """Distinct workers (``worker`` attribute; else the ``host`` alone) with trial counts and last seen time."""
    seen: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    for trial in trials:
        worker = _text(worker_of(trial))
        host = _text(host_of(trial))
        if worker is None and host is None:
            continue
        if host is None and worker is not None:
            host = worker.rpartition(":")[0] or None
        entry = seen.setdefault((worker, host), {"trials": 0, "running": 0, "last_seen": None})
        entry["trials"] += 1
        entry["running"] += trial.state.name == "RUNNING"
        moment = _seen_at(trial)
        if moment is not None and (entry["last_seen"] is None or moment > entry["last_seen"]):
            entry["last_seen"] = moment
    return [
        WorkerSeen(worker=worker, host=host, **entry)
        for (worker, host), entry in sorted(seen.items(), key=lambda item: (str(item[0][1]), str(item[0][0])))
    ]


def front_points(trials: Sequence[FrozenTrial], directions: Sequence[str]) -> list[FrontPoint]:
    """The Pareto front: trial numbers, objective values, params."""
    return [
        FrontPoint(number=t.number, role=role_of(t), values=finite(list(t.values or ())), params=finite(dict(t.params)))
        for t in front_trials(trials, directions)
    ]


def cost_summary(records: Sequence[TrialRecord], stored: StudyRecord) -> CostSummary:
    """What the study's runs cost (:meth:`tuner.storage.cost.StudyCost.as_dict`'s hours and counts), its unit
    and device-hour budget."""
    figures = cost_of_records(records).as_dict()
    return CostSummary(
        unit=device_unit(stored.device),
        budget_device_hours=budget_hours(stored.budget_device_hours),
        **{key: figures[key] for key in CostSummary.model_fields if key not in ("unit", "budget_device_hours")},
    )


def study_summary(study: optuna.Study) -> StudySummary:
    """The summary of one study (see the module docstring)."""
    stored = StudyRecord.of(study)
    trials = study.get_trials(deepcopy=False)
    directions = [d.name.lower() for d in study.directions]
    records = [TrialRecord.from_trial(t) for t in trials]
    measured = measured_count(trials)
    budget = _int_or_none(stored.budget_trials)
    return StudySummary(
        name=study.study_name,
        spec_name=_text(stored.spec_name),
        workload=_text(stored.workload_class),
        gpu_type=_text(stored.gpu_type),
        device=_text(stored.device),
        sampler=_text(stored.sampler),
        objectives=list(stored.objectives),
        directions=directions,
        trials=len(trials),
        counts=dict(sorted(Counter(str(r.outcome) for r in records).items())),
        measured=measured,
        budget_trials=budget,
        budget_left=None if budget is None else max(budget - measured, 0),
        cancelled=stored.cancelled,
        workers=workers_seen(trials),
        front=front_points(trials, directions),
        cost=cost_summary(records, stored),
    )


def trial_entry(trial: FrozenTrial) -> TrialEntry:
    """One trial as :class:`TrialEntry`."""
    record = TrialRecord.from_trial(trial)
    return TrialEntry(
        number=record.number,
        state=record.state,
        role=str(record.role),
        outcome=str(record.outcome),
        values=None if record.values is None else finite(list(record.values)),
        placeholder=record.placeholder,
        params=finite(dict(record.params)),
        host=_text(record.host),
        slot=_text(record.slot),
        worker=_text(record.worker),
        reason=_text(record.reason),
        started=record.datetime_start,
        completed=record.datetime_complete,
        device_s=finite(record.device_s),
    )


def trial_page(study: optuna.Study, offset: int, limit: int) -> TrialPage:
    """Trials ``offset`` .. ``offset + limit - 1`` (by number) of ``study``."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    return TrialPage(
        total=len(trials), offset=offset, limit=limit, trials=[trial_entry(t) for t in trials[offset : offset + limit]]
    )


def study_list(storage: optuna.storages.BaseStorage) -> StudyList:
    """Every study in ``storage`` (name, trial count, GPU type, budget, cancelled, device-hours used), by name."""
    entries = []
    for frozen in storage.get_all_studies():
        stored = StudyRecord.of(frozen)
        trials = trials_of(storage, frozen)
        used = cost_of_records([TrialRecord.from_trial(t) for t in trials]).used_s / SECONDS_PER_HOUR
        entries.append(
            StudyListEntry(
                name=frozen.study_name,
                trials=len(trials),
                gpu_type=_text(stored.gpu_type),
                budget_trials=_int_or_none(stored.budget_trials),
                cancelled=stored.cancelled,
                tuner_study=stored.tuner_study,
                used_device_h=round(used, 6),
                unit=device_unit(stored.device),
            )
        )
    return StudyList(studies=sorted(entries, key=lambda e: e.name))
