"""Export a chosen trial as a production config YAML (schema ``tuner.config/v1``).

The document (:mod:`tuner.ship.config_schema`) holds the chosen setting
(parameters, derived values, and its invocation: the full argv of a command
workload; for a ``class:`` or ``python`` one every argument of the calls that
run it, :func:`tuner.ship.invocation.runnable_invocation`, so
``docs/examples/run_exported.py`` runs it from the YAML alone), its metrics with
units and latency spread (p50 / p95 / CV), the comparison with the baseline
(speed-up ratio, quality deltas), the GPU / host fingerprint, provenance (study,
trial, storage, spec hash, sampler, times; git commit, package versions, torch /
CUDA / cuDNN / driver and weights' sha256: :mod:`tuner.ship.provenance_block`; what
finding the setting cost: ``provenance.cost``, the study's device-hours used / wasted /
avoided at export time and the trial's own device-seconds, :func:`tuner.front.cost.export_cost_block`),
the allow-listed environment the trial ran with (secrets masked), how it was selected, and
what ``tuner check`` needs to re-measure it. A copy of a measured setting
(``duplicate_of``) takes its runtime, environment and device from the trial that
measured it.

The choice (:func:`choose`): an explicit trial, a policy expression, a profile or the
best on one objective, given on the command line; else the rule of the study's spec
(``export:``, :mod:`tuner.spec.export_rule`), by default the knee of the front
(:func:`tuner.front.choice.choose_by_rule`). ``selection.rule`` names the rule and where
it came from; ``selection.headline`` what its speed-up is stated against (the baseline when it meets the rule,
else the reference, and how the baseline fails it: :mod:`tuner.front.headline`). Feasible is :func:`tuner.storage.records.record_feasible`, the
front's own test: a trial with a constraint that could not be evaluated (its memory not
measured) is never exported. A study without a feasible measured trial
raises :class:`ExportError` saying what its trials did.

Noisy numbers are not facts: a pick that is noisy (latency CV above
:data:`tuner.storage.records.NOISY_CV`) is replaced by a stable trial within its
spread (:func:`tuner.front.choice.prefer_stable`; not for an explicit ``--trial``),
and the document's ``warnings`` say when the shipped trial or the baseline under
the speed-up is noisy anyway (:mod:`tuner.ship.export_warnings`).
"""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tuner.errors import TunerError
from tuner.front.choice import Choice, PolicyError, choose_by_rule, front_of, prefer_stable, speed_objective
from tuner.front.cost import budget_hours, cost_of_records, export_cost_block
from tuner.front.headline import headline
from tuner.secrets import redact_url
from tuner.ship.config_schema import SCHEMA, validate_config
from tuner.ship.export_warnings import noise_warnings, random_weights_warnings
from tuner.ship.invocation import runnable_invocation
from tuner.ship.provenance_block import provenance_fields, recorded_device, recorded_env
from tuner.spec.export_rule import DEFAULT_RULE, ExportRule
from tuner.spec.loading import parse_spec
from tuner.storage.attributes import ENV, RUNTIME, attributes_of
from tuner.storage.records import StudyRecord, TrialRecord, record_feasible, trial_records

if TYPE_CHECKING:
    import optuna

__all__ = [
    "SCHEMA",
    "ExportError",
    "Choice",
    "choose",
    "choose_trial",
    "build_config",
    "noise_warnings",
    "study_export_rule",
    "write_config",
]


class ExportError(TunerError, RuntimeError):
    """No trial can be exported; the message says why."""


def _records(study: optuna.Study) -> list[TrialRecord]:
    return [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)]


def _measuring_attributes(
    study: optuna.Study, trials: list[optuna.trial.FrozenTrial], record: TrialRecord
) -> Mapping[str, Any]:
    """User attributes and side records (:func:`~tuner.storage.records.trial_records`) of the trial of ``study`` that
    measured ``record``'s setting (itself, or the original of a copy); ``record``'s own ``env`` / ``runtime``
    when that trial is not among ``trials``."""
    number = record.duplicate_of if record.duplicate_of is not None else record.number
    found = next((t for t in trials if t.number == number), None)
    if found is None:
        return {ENV: record.env, RUNTIME: record.runtime}
    return {**attributes_of(found), **trial_records(study, [found])[found.number]}


def _directions(study: optuna.Study) -> list[str]:
    return [d.name.lower() for d in study.directions]


def _no_feasible(study: optuna.Study, records: list[TrialRecord]) -> ExportError:
    outcomes: dict[str, int] = {}
    for record in records:
        key = record.outcome if not (record.outcome == "OK" and record.values is not None) else "OK but infeasible"
        outcomes[key] = outcomes.get(key, 0) + 1
    described = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) or "none"
    return ExportError(
        f"study '{study.study_name}' has no feasible measured trial to export "
        f"({len(records)} trials recorded: {described})"
    )


def study_export_rule(study: optuna.Study) -> ExportRule:
    """The export rule of the spec stored with ``study`` (:data:`DEFAULT_RULE` for a spec without one, or a
    study stored before specs had rules)."""
    text = StudyRecord.of(study).spec_yaml
    if not text:
        return DEFAULT_RULE
    try:
        return parse_spec(text, source="<stored spec>").export_rule
    except ValueError:
        return DEFAULT_RULE


def choose(
    study: optuna.Study,
    policy: str | None = None,
    profile: str | None = None,
    objective: str | None = None,
    trial_number: int | None = None,
) -> Choice:
    """The trial to export; at most one of policy / profile / objective / trial_number (the command line's
    choice), else the rule of the study's spec (:func:`study_export_rule`). Raises ExportError."""
    if sum(x is not None for x in (policy, profile, objective, trial_number)) > 1:
        raise ExportError("choose one of --policy, --profile, --objective and --trial")
    records = _records(study)
    names: list[str] = list(StudyRecord.of(study).objectives)
    directions = _directions(study)
    if trial_number is not None:
        match = next((r for r in records if r.number == trial_number), None)
        if match is None:
            raise ExportError(f"study '{study.study_name}' has no trial {trial_number}")
        if not record_feasible(match):
            why = f": {match.reason}" if match.reason else ""
            raise ExportError(f"trial {trial_number} is not a feasible measured trial (outcome {match.outcome}{why})")
        return Choice(match, f"trial {trial_number}", None, rule=f"trial {trial_number} (command line)")
    if objective is not None and objective not in names:
        raise ExportError(f"unknown objective {objective!r}; this study's objectives: {', '.join(names)}")
    feasible = [r for r in records if record_feasible(r)]
    if not feasible:
        raise _no_feasible(study, records)
    if objective is not None:
        index = names.index(objective)
        sign = 1.0 if directions[index] == "minimize" else -1.0
        record = min(feasible, key=lambda r: (sign * (r.values or ())[index], r.number))
        text = f"{directions[index]} {objective} (objective)"
        shipped, replaced = prefer_stable(record, feasible, [(objective, directions[index])])
        return Choice(shipped, text, None, replaced, f"{text} (command line)")
    given = policy is not None or profile is not None
    rule = ExportRule(policy, profile, "command line") if given else study_export_rule(study)
    try:
        return choose_by_rule(feasible, names, directions, rule)
    except PolicyError as error:
        raise ExportError(f"{error} (rule: {rule.describe()})") from None


def choose_trial(
    study: optuna.Study, objective: str | None = None, trial_number: int | None = None
) -> optuna.trial.FrozenTrial:
    """The frozen trial :func:`choose` picks by objective or number (for the end of ``tuner run``)."""
    choice = choose(study, objective=objective, trial_number=trial_number)
    return next(t for t in study.get_trials(deepcopy=False) if t.number == choice.record.number)


def _metrics_block(record: TrialRecord) -> dict[str, Any]:
    return {
        name: {
            "value": metric.get("value"),
            "unit": metric.get("unit"),
            "direction": metric.get("direction"),
            "unavailable": None if metric.get("value") is not None else str(metric.get("reason", "unknown")),
        }
        for name, metric in sorted(record.metrics.items())
    }


def _spread(record: TrialRecord) -> dict[str, Any]:
    repeats = record.metric_value("repeats")
    known = record.latency_cv is not None or record.metric_value("latency_noisy") is not None
    return {
        "latency_p50_s": record.metric_value("latency_p50_s"),
        "latency_p95_s": record.metric_value("latency_p95_s"),
        "latency_cv": record.latency_cv,
        "repeats": int(repeats) if repeats is not None else None,
        "noisy": record.noisy if known else None,
    }


def _speed_metric(names: list[str], records: list[TrialRecord]) -> str:
    """The metric speed-ups are taken on: the first objective in seconds, else ``latency_p50_s``."""
    speed = speed_objective(names, records) if names else 0
    return (
        names[speed]
        if names and any((r.metrics.get(names[speed]) or {}).get("unit") == "s" for r in records)
        else "latency_p50_s"
    )


def _comparison(
    chosen: TrialRecord, base: TrialRecord, names: list[str], directions: list[str], records: list[TrialRecord]
) -> dict[str, Any]:
    speed_metric = _speed_metric(names, records)
    fast, slow = chosen.metric_value(speed_metric), base.metric_value(speed_metric)
    speedup = slow / fast if fast and slow is not None and fast > 0 else None
    deltas: dict[str, Any] = {}
    for name, direction in zip(names, directions):
        if name == speed_metric:
            continue
        mine, theirs = chosen.metric_value(name), base.metric_value(name)
        deltas[name] = {
            "delta": mine - theirs if mine is not None and theirs is not None else None,
            "direction": direction,
        }
    return {"speed_metric": speed_metric, "speedup": speedup, "quality_delta": deltas}


def build_config(
    study: optuna.Study,
    trial: optuna.trial.FrozenTrial | TrialRecord,
    storage_url: str,
    policy: str | None = None,
    profile: str | None = None,
    replaced_noisy: int | None = None,
    rule: str | None = None,
) -> dict[str, Any]:
    """The validated ``tuner.config/v1`` document for ``trial``.

    ``replaced_noisy``: the noisy trial the policy picked and ``trial`` replaced
    (:attr:`Choice.replaced`), recorded as ``selection.replaced_noisy_trial``. Studies and trials
    recorded before provenance was (no ``provenance`` / ``env`` / ``runtime`` attributes) export
    with those fields null or empty.
    """
    record = trial if isinstance(trial, TrialRecord) else TrialRecord.from_trial(trial)
    stored, study_attrs = StudyRecord.of(study), attributes_of(study)
    trials = study.get_trials(deepcopy=False)
    records = [TrialRecord.from_trial(t) for t in trials]
    measured = _measuring_attributes(study, trials, record)
    names: list[str] = list(stored.objectives)
    directions = _directions(study)
    feasible = [r for r in records if record_feasible(r)]
    front = {r.number for r in front_of(feasible, directions)} if feasible else set()
    by_role = {r.role: r for r in records if r.outcome == "OK" and r.duplicate_of is None and r.role != "search"}
    base = by_role.get("baseline")
    comparison = _comparison(record, base, names, directions, records) if base is not None else None
    said = headline(
        record,
        base,
        by_role.get("reference"),
        policy,
        comparison["speed_metric"] if comparison else _speed_metric(names, records),
    )
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "workload": stored.workload_class,
        "selection": {
            "policy": policy or f"trial {record.number}",
            "rule": rule or policy or f"trial {record.number}",
            "profile": profile,
            "feasible_trials": len(feasible),
            "front_size": len(front),
            "on_front": record.number in front,
            "replaced_noisy_trial": replaced_noisy,
            "headline": said.document() if said is not None else None,
        },
        "params": dict(record.params),
        "derived": dict(record.derived),
        "invocation": _invocation(
            stored.spec_yaml, {**record.params, **record.derived}, recorded_device(study_attrs, measured)
        ),
        "objectives": {
            name: {"value": value, "direction": d} for name, value, d in zip(names, record.values or (), directions)
        },
        "metrics": _metrics_block(record),
        "spread": _spread(record),
        "timing": {"worker_wall_time_s": record.wall_time_s, "eval_time_s": record.eval_time_s},
        "baseline": _baseline_block(base, comparison),
        "gpu": {str(k): str(v) for k, v in stored.fingerprint.items()},
        "provenance": _provenance_block(
            study.study_name, record, records, stored, storage_url, {**provenance_fields(study_attrs, measured)}
        ),
        "check": {
            "spec_yaml": stored.spec_yaml or "",
            "device": str(stored.device or "cpu"),
            "reference": _settings_of(by_role.get("reference")),
            "baseline": _settings_of(base),
        },
        "warnings": noise_warnings(record, base, comparison["speedup"] if comparison else None)
        + random_weights_warnings(measured),
        "env": recorded_env(measured),
    }
    return validate_config(document, f"export of trial {record.number}").to_document()


def _baseline_block(base: TrialRecord | None, comparison: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The export's ``baseline``: the baseline trial's setting, figures and its comparison with the chosen one."""
    if base is None:
        return None
    return {
        "trial": base.number,
        "params": dict(base.params),
        "derived": dict(base.derived),
        "outcome": base.outcome,
        "metrics": _metrics_block(base),
        "spread": _spread(base),
        "comparison": comparison,
    }


def _provenance_block(
    study_name: str,
    record: TrialRecord,
    records: list[TrialRecord],
    stored: StudyRecord,
    storage_url: str,
    fields: Mapping[str, Any],
) -> dict[str, Any]:
    """The export's ``provenance``: where the chosen trial was measured, with what, at what cost."""
    return {
        "study": study_name,
        "trial": record.number,
        "role": record.role,
        "storage": redact_url(storage_url),
        "spec_name": stored.spec_name,
        "spec_hash": stored.spec_hash,
        "sampler": stored.sampler,
        "measured_at": record.datetime_complete,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tuner_version": _version(),
        **fields,
        "cost": export_cost_block(
            cost_of_records(records), stored.device, record, budget_hours(stored.budget_device_hours)
        ),
    }


def _settings_of(record: TrialRecord | None) -> dict[str, Any] | None:
    return None if record is None else dict(record.params)


def _version() -> str:
    try:
        return importlib.metadata.version("tuner")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _invocation(spec_text: str | None, settings: dict[str, Any], device: str) -> dict[str, Any] | None:
    """The setting as production runs it (on ``device``), from the spec stored with the study (``spec_text``)."""
    if not spec_text:
        return None
    try:
        return runnable_invocation(parse_spec(spec_text, source="<stored spec>"), settings, device)
    except ValueError as error:
        raise ExportError(f"cannot render the invocation of this setting: {error}") from None


def write_config(document: dict[str, Any], path: Path) -> Path:
    """Write ``document`` as YAML to ``path`` (directories created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return path
