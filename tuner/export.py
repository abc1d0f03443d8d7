"""Export a chosen trial as a production config YAML (schema ``tuner.config/v1``).

This first form holds the chosen setting (parameters and derived values), its
measured metrics with units, the baseline's metrics for comparison, and
provenance (study, trial, storage, spec hash, host fingerprint, time). The
choice: the feasible, measured trial with the best value of one objective
(the first by default), or an explicit trial number.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tuner.pareto import best_on, is_measured_feasible
from tuner.invocation import render_invocation
from tuner.records import TrialRecord
from tuner.spec import parse_spec
from tuner.study import redact_url

if TYPE_CHECKING:
    import optuna

SCHEMA = "tuner.config/v1"


class ExportError(RuntimeError):
    """No trial can be exported; the message says why."""


def choose_trial(study: "optuna.Study", objective: str | None = None,
                 trial_number: int | None = None) -> "optuna.trial.FrozenTrial":
    """The trial to export (see module docs). Raises :class:`ExportError`."""
    trials = study.get_trials(deepcopy=False)
    names: list[str] = study.user_attrs.get("objectives", [])
    if trial_number is not None:
        matches = [t for t in trials if t.number == trial_number]
        if not matches:
            raise ExportError(f"study '{study.study_name}' has no trial {trial_number}")
        if not is_measured_feasible(matches[0]):
            raise ExportError(f"trial {trial_number} is not a feasible measured trial "
                              f"(outcome {matches[0].user_attrs.get('outcome', matches[0].state.name)})")
        return matches[0]
    name = objective or (names[0] if names else None)
    if name not in names:
        raise ExportError(f"unknown objective {name!r}; this study's objectives: {', '.join(names)}")
    index = names.index(name)
    best = best_on(trials, index, study.directions[index].name.lower())
    if best is None:
        raise ExportError(f"study '{study.study_name}' has no feasible measured trial to export "
                          f"({len(trials)} trials recorded)")
    return best


def _metrics_block(record: TrialRecord) -> dict[str, Any]:
    block: dict[str, Any] = {}
    for name, metric in sorted(record.metrics.items()):
        entry: dict[str, Any] = {"value": metric.get("value"), "unit": metric.get("unit")}
        if metric.get("value") is None:
            entry["unavailable"] = metric.get("reason", "unknown")
        block[name] = entry
    return block


def build_config(study: "optuna.Study", trial: "optuna.trial.FrozenTrial", storage_url: str) -> dict[str, Any]:
    """The ``tuner.config/v1`` document for ``trial``."""
    record = TrialRecord.from_trial(trial)
    attrs = study.user_attrs
    baseline = next((t for t in study.get_trials(deepcopy=False)
                     if t.user_attrs.get("role") == "baseline" and t.user_attrs.get("measured")), None)
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "workload": attrs.get("workload_class"),
        "params": dict(record.params),
        "derived": dict(record.derived),
        "invocation": _invocation(attrs, {**record.params, **record.derived}),
        "objectives": {name: {"value": value, "direction": d.name.lower()}
                       for name, value, d in zip(attrs.get("objectives", []), trial.values or (), study.directions)},
        "metrics": _metrics_block(record),
        "timing": {"worker_wall_time_s": record.wall_time_s, "eval_time_s": record.eval_time_s},
        "provenance": {
            "study": study.study_name,
            "trial": trial.number,
            "role": record.role,
            "storage": redact_url(storage_url),
            "spec_name": attrs.get("spec_name"),
            "spec_hash": attrs.get("spec_hash"),
            "sampler": attrs.get("sampler"),
            "fingerprint": attrs.get("fingerprint", {}),
            "measured_at": record.datetime_complete,
            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    if baseline is not None:
        base = TrialRecord.from_trial(baseline)
        document["baseline"] = {"trial": base.number, "params": dict(base.params),
                                "outcome": base.outcome, "metrics": _metrics_block(base)}
    return document


def _invocation(attrs: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any] | None:
    """The setting as its workload runs it natively, from the spec stored with the study."""
    spec_text = attrs.get("spec_yaml")
    if not spec_text:
        return None
    return render_invocation(parse_spec(spec_text, source="<stored spec>"), settings)


def write_config(document: dict[str, Any], path: Path) -> Path:
    """Write ``document`` as YAML to ``path`` (directories created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return path
