"""``tuner show STUDY TRIAL``: everything about one trial, whole.

What it prints (``--json``: the same as one JSON document): role, outcome and state;
where and when it ran (host, slot, worker, times); what its run cost (``cost``: device-seconds
= wall seconds x the slot's devices, split by phase: :func:`tuner.front.cost.trial_cost_lines`);
copy-of, warm-start and predicted-OOM
links; the WHOLE reason; params and derived values; objectives and every stored metric
with units (an unavailable metric with its reason); a trial of several inputs: each input's figures and the
cliffs flagged (:mod:`tuner.front.spread`); constraints (feasible when <= 0);
samples' paths; the setting's native invocation (rendered from the spec stored with the
study by :func:`tuner.ship.invocation.render_invocation`) and, when the worker recorded
it, what was actually executed; the trial's files and the tail of its log.

Where a trial's files are: ``<home>/<study>/trial_<number:05d>/`` (``result.json``,
``worker.log``, ``sample/``), written by the coordinator that ran it. On another host, or
under another ``--home``, they are absent: the log tail then comes from the storage
(its last :data:`tuner.storage.records.LOG_TAIL_STORED_CHARS` characters). Logs and
invocations pass through :func:`tuner.secrets.redact_text` before they are shown.

Registered on :data:`tuner.cli.app.app` when imported (by :mod:`tuner.cli.main`).
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tuner.cli.app import HomeOption, StorageOption, app, fail, out
from tuner.cli.status_view import trial_document
from tuner.errors import StudyError
from tuner.front.cost import trial_cost_lines
from tuner.front.load_curve import load_lines, prediction_lines
from tuner.front.spread import spread_lines
from tuner.secrets import redact_text
from tuner.spec.metrics import NO_REFERENCE_METRICS, base_metric, has_direction, objective_units
from tuner.spec.models import SpecError
from tuner.storage.opening import storage_url, tuner_home
from tuner.storage.records import StudyRecord, full_record
from tuner.study.studies import OpenStudy, load_study, study_directory

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

LOG_LINES = 30  # default lines of the log tail
LOG_READ_BYTES = 256 * 1024  # at most this much of the log's end is read


@app.command()
def show(
    study: str = typer.Argument(..., help="Study name."),
    trial: int = typer.Argument(..., help="Trial number (as 'tuner status' lists them)."),
    storage: str | None = StorageOption,
    home: Path | None = HomeOption,
    lines: int = typer.Option(LOG_LINES, "--lines", "-n", min=0, help="Lines of the log tail to show."),
    as_json: bool = typer.Option(False, "--json", help="Print the trial as one JSON document."),
) -> None:
    """Everything about one trial: params, outcome, the whole reason, metrics with units, invocation, log tail."""
    root = tuner_home(home)
    try:
        opened = load_study(storage_url(storage, root), study, read_only=True)
        trial_dir = study_directory(root, study) / f"trial_{trial:05d}"
    except (StudyError, SpecError) as error:
        fail(str(error))
    trials = opened.study.get_trials(deepcopy=False)
    found = next((t for t in trials if t.number == trial), None)
    if found is None:
        known = f"its trials are 0 to {trials[-1].number}" if trials else "it has no trials yet"
        fail(f"study '{study}' has no trial {trial} ({known})")
    document = trial_view(opened, found, trial_dir, lines)
    if as_json:
        typer.echo(json.dumps(document, indent=2, default=str))
        return
    for line in fit_lines(render_trial(document), out.width):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def fit_lines(lines: Sequence[str], width: int) -> list[str]:
    """``lines`` with each one wider than ``width`` broken between words, continued under its own indentation
    plus two blanks (a log tail line's continuation marked ``  : `` where its lines are ``  | ``). A path wider
    than the line (a word with a ``/``) is never broken: it stands whole on its own line, past ``width``, so
    it can be copied; a line without one is filled to ``width``, any word wider than the line cut."""
    fitted: list[str] = []
    for line in lines:
        if len(line) <= width:
            fitted.append(line)
            continue
        lead = re.match(r"\s*(\| )?", line)
        indent = (lead.group(0) if lead else "").replace("|", ":") + "  "
        deep_path = any("/" in word and len(word) > width - len(indent) for word in line.split())
        fitted += textwrap.wrap(
            line,
            width,
            subsequent_indent=indent,
            break_long_words=not deep_path,
            break_on_hyphens=False,
        ) or [line]
    return fitted


def trial_view(opened: OpenStudy, trial: FrozenTrial, trial_dir: Path, lines: int) -> dict[str, Any]:
    """One stored trial as a JSON-able document: :func:`tuner.cli.status_view.trial_document` plus ``study``,
    ``device`` (the study's: ``cuda`` or ``cpu``, the unit of its cost), ``invocation`` (native, from the stored spec; None with ``invocation_error`` when it cannot be
    rendered), ``executed`` (what the worker ran, from ``result.json``), ``files`` and ``log_tail``
    (``{"source": path or "storage", "lines": [...]}``, the last ``lines`` lines)."""
    from tuner.pareto import front_trials
    from tuner.ship.invocation import render_invocation

    record = full_record(opened.study, trial)  # with its side records: runtime, log tail
    trials = opened.study.get_trials(deepcopy=False)
    on_front = record.number in {t.number for t in front_trials(trials, [o.direction for o in opened.spec.objectives])}
    units = objective_units(opened.spec.objective_names, [record.metrics])
    document = {
        "study": opened.study.study_name,
        "device": StudyRecord.of(opened.study).device,
        **trial_document(record, opened.spec.objective_names, units, on_front),
    }
    try:
        document["invocation"] = _redacted(render_invocation(opened.spec, {**record.params, **record.derived}))
    except ValueError as error:
        document["invocation"], document["invocation_error"] = None, str(error)
    result_path, log_path = trial_dir / "result.json", trial_dir / "worker.log"
    payload = _result_payload(result_path)
    document["executed"] = _redacted(_executed(payload))
    document["files"] = {
        "trial_dir": str(trial_dir),
        "result": str(result_path) if result_path.is_file() else None,
        "log": str(log_path) if log_path.is_file() else None,
    }
    document["log_tail"] = _log_tail(payload, log_path, record.log_tail, lines)
    runtime = record.runtime
    document["weights_identity"] = runtime.get("weights_identity") if isinstance(runtime, Mapping) else None
    return document


def render_trial(document: Mapping[str, Any]) -> list[str]:
    """The lines ``tuner show`` prints for a :func:`trial_view` document (plain text, nothing cut)."""
    head = [
        f"trial {document['number']} of study {document['study']}: {document['role']}, {document['outcome']}"
        f" (state {document['state']}{', on the Pareto front' if document['on_front'] else ''})"
    ]
    head += _where(document)
    head += trial_cost_lines(document.get("cost"), document.get("device"), document["duplicate_of"])
    head += _links(document)
    head.append(f"reason: {document['reason']}" if document["reason"] else "reason: -")
    identity = document.get("weights_identity")
    if identity:
        random = str(identity).startswith("random:")
        head.append(
            f"weights: {identity}"
            + (
                " (random: quality metrics are agreement with the reference setting "
                "of an untrained network, not output quality)"
                if random
                else ""
            )
        )
    body = _pairs("params", document["params"]) + _pairs("derived", document["derived"])
    body += _objectives(document) + _constraints(document["constraints"]) + render_metric_lines(document["metrics"])
    body += spread_lines(
        document.get("per_input") or {},
        document["metrics"],
        document.get("cliffs") or [],
        [name.partition(":")[0] for name in document["objectives"]],
    )
    body += prediction_lines(document.get("prediction"), document["metrics"])
    body += load_lines(document.get("sustained"))
    body += _pairs("samples", document["samples"]) + _invocations(document) + _files(document)
    tail = document["log_tail"]
    if tail["lines"]:
        body.append(f"log tail (last {len(tail['lines'])} lines, from {tail['source']}):")
        body += [f"  | {line}" for line in tail["lines"]]
    else:
        body.append(f"log tail: none ({tail['source']})")
    return head + body


def _where(document: Mapping[str, Any]) -> list[str]:
    parts = [
        f"{label} {document[key]}"
        for label, key in (("host", "host"), ("slot", "slot"), ("worker", "worker"))
        if document.get(key)
    ]
    times = [
        f"{label} {document[key]}"
        for label, key in (("started", "datetime_start"), ("completed", "datetime_complete"))
        if document.get(key)
    ]
    spans = [
        f"{label} {document[key]:.4g} s"
        for label, key in (("wall time", "wall_time_s"), ("evaluation", "eval_time_s"))
        if isinstance(document.get(key), (int, float))
    ]
    scored = document.get("quality_scored") or {}
    if scored.get("failed"):
        spans.append(f"quality not scored off the device: {scored['failed']}")
    elif scored:
        spans.append(f"quality scored off the device ({scored.get('where', 'a scorer process')}) beside the next trial")
    lines = [f"ran on {', '.join(parts)}"] if parts else ["ran on: - (never run here: a copy, a skip or queued)"]
    return lines + ([", ".join(times + spans)] if times or spans else [])


def _links(document: Mapping[str, Any]) -> list[str]:
    lines = []
    if document["duplicate_of"] is not None:
        lines.append(
            f"copy of trial {document['duplicate_of']}: the same setting, measured there (its log and "
            f"files: tuner show {document['study']} {document['duplicate_of']})"
        )
    if document["warm_start_from"]:
        lines.append(f"queued by a warm start from study {document['warm_start_from']}")
    if document["predicted_peak_gb"] is not None or document["prediction_witness"]:
        peak = document["predicted_peak_gb"]
        lines.append(
            f"predicted OOM: {f'peak {peak:.2f} GB, ' if peak is not None else ''}from {document['prediction_witness']}"
        )
    compared = document.get("compared_with")
    if compared:
        shape = ", ".join(f"{name}={value}" for name, value in (compared.get("shape") or {}).items())
        by = f"trial {compared['trial']}" if compared.get("trial") is not None else "not measured"
        lines.append(f"compared with: the reference at {shape} ({by})")
    if document["fingerprint_note"]:
        lines.append(f"host differs from the reference's: {document['fingerprint_note']}")
    if document["noisy"]:
        lines.append(f"NOISY: latency cv {document['latency_cv'] or 0:.3g}; its latency is not a fact")
    if document.get("cut_short"):
        lines.append(f"measurement cut short by the time limit: {document['cut_short']}")
    if document.get("past_ceiling"):
        lines.append(document["past_ceiling"])
    if document.get("settled"):
        lines.append(document["settled"])
    return lines


def _pairs(title: str, values: Mapping[str, Any]) -> list[str]:
    if not values:
        return [f"{title}: -"]
    width = max(len(k) for k in values)
    return [f"{title}:"] + [f"  {key.ljust(width)} = {value}" for key, value in values.items()]


def _objectives(document: Mapping[str, Any]) -> list[str]:
    note = (
        " (placeholders: worst-case values told to the sampler for a failed point, not measurements)"
        if document["placeholder_values"]
        else ""
    )
    lines = [f"objectives:{note}"]
    for name, objective in document["objectives"].items():
        value = objective["value"]
        lines.append(f"  {name} = {_with_unit(value, objective['unit'])}" if value is not None else f"  {name} = -")
    return lines


def _constraints(constraints: Mapping[str, float]) -> list[str]:
    if not constraints:
        return ["constraints: -"]
    return ["constraints (feasible when <= 0):"] + [
        f"  {name} = {value:.4g} ({'ok' if value <= 0 else 'violated'})" for name, value in constraints.items()
    ]


def render_metric_lines(metrics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """``metrics:`` and one line a stored metric: its value with its unit and, when a direction means something
    for it (:func:`tuner.spec.metrics.has_direction`: not a counter), the better direction; an unavailable one's
    reason."""
    if not metrics:
        return ["metrics: none recorded"]
    width = max(len(name) for name in metrics)
    lines = ["metrics:"]
    for name, metric in metrics.items():
        if metric.get("value") is None:
            lines.append(f"  {name.ljust(width)}  unavailable: {metric.get('reason') or 'no value recorded'}")
        else:
            notes = [str(metric.get("direction") or "")] if has_direction(name) else []
            if base_metric(name) in NO_REFERENCE_METRICS:
                notes.append("no reference: the output's own")
            shown = f"  ({', '.join(note for note in notes if note)})" if any(notes) else ""
            lines.append(f"  {name.ljust(width)}  {_with_unit(metric['value'], metric.get('unit'))}{shown}")
    return lines


def _invocations(document: Mapping[str, Any]) -> list[str]:
    if document["invocation"] is None:
        lines = [f"invocation: unavailable: {document.get('invocation_error')}"]
    else:
        lines = [
            "invocation (native, outside the tuner):",
            *(f"  {line}" for line in _invocation_lines(document["invocation"])),
        ]
    if document["executed"]:
        lines += ["executed by the worker:", *(f"  {line}" for line in _invocation_lines(document["executed"]))]
    return lines


def _invocation_lines(invocation: Mapping[str, Any]) -> list[str]:
    """A rendered invocation as a person pastes it: argv quoted for a shell, a URL and body, a target and kwargs."""
    kind = invocation.get("kind")
    if kind == "command":
        lines = [shlex.join(str(a) for a in invocation.get("argv") or [])]
        lines += [f"env {k}={v}" for k, v in (invocation.get("env") or {}).items()]
        return lines + ([f"cwd {invocation['cwd']}"] if invocation.get("cwd") else [])
    if kind == "http":
        return [
            f"POST {invocation.get('url')} ({invocation.get('api')}, concurrency {invocation.get('concurrency')})",
            f"body {json.dumps(invocation.get('body'), default=str)}",
        ]
    rest = {k: v for k, v in invocation.items() if k not in ("kind", "target")}
    return [f"{kind or 'python'}: {invocation.get('target')}"] + [
        f"{k} {json.dumps(v, default=str)}" for k, v in rest.items()
    ]


def _files(document: Mapping[str, Any]) -> list[str]:
    files = document["files"]
    if files["result"] is None and files["log"] is None:
        return [
            f"files: none at {files['trial_dir']} (a copy or skip ran nothing; or it ran on another host or "
            "under another --home)"
        ]
    return [f"files: {files['trial_dir']}"] + [
        f"  {name}: {path}" for name, path in (("result", files["result"]), ("log", files["log"])) if path
    ]


def _with_unit(value: Any, unit: Any) -> str:
    shown = f"{value:.6g}" if isinstance(value, float) else str(value)
    return f"{shown} {unit}" if unit and unit != "1" else shown


def _result_payload(result_path: Path) -> dict[str, Any]:
    """The worker's ``result.json`` as a mapping; empty when absent or unreadable."""
    try:
        payload = json.loads(result_path.read_text())
    except (OSError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


def _executed(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the worker recorded as executed (``invocation`` of ``result.json``); None when it recorded none."""
    invocation = payload.get("invocation")
    return invocation if isinstance(invocation, dict) else None


def _log_tail(payload: Mapping[str, Any], log_path: Path, stored: str | None, lines: int) -> dict[str, Any]:
    """The last ``lines`` lines of the trial's log, redacted, from the first source that has any:

    ``result.json``'s ``log_tail`` (the worker's traceback, then the end of ``worker.log``), the
    ``worker.log`` file itself (its last :data:`LOG_READ_BYTES` bytes), the tail stored with the
    trial in the storage (what is left when the files are on another host).
    """
    if lines == 0:
        return {"source": "not asked for (--lines 0)", "lines": []}
    sources: list[tuple[str, str]] = [
        (
            str(payload.get("log_tail") or ""),
            f"{log_path.parent / 'result.json'} (the worker's traceback, then the end of its log)",
        )
    ]
    try:
        with open(log_path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - LOG_READ_BYTES))
            sources.append((handle.read().decode(errors="replace"), str(log_path)))
    except OSError:
        pass
    sources.append((str(stored or ""), "the storage (its last characters stored with the trial)"))
    for text, source in sources:
        if text.strip():
            return {"source": source, "lines": redact_text(text).splitlines()[-lines:]}
    return {"source": "no log: empty, or not on this host and none stored", "lines": []}


def _redacted(value: Any) -> Any:
    """``value`` with every string inside passed through :func:`tuner.secrets.redact_text`."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(item) for item in value]
    return value
