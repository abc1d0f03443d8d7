"""The plumbing the phases of ``bench/gpu_check.py`` share (a child that dies with its parent, a JSON file
written atomically), and the study plumbing: a phase's context, a study run through the
public API (``tuner.create_study`` / ``tuner.run_study``, no MLflow, no memory model: every setting runs) under the
phase's kept home, and one plain row per trial."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

LOG_TAIL_CHARS = 1500
"""Characters of a failed trial's worker log kept in its row."""


@dataclass(frozen=True)
class PhaseContext:
    """Where and how a phase runs: ``device`` ``cuda`` or ``cpu``; ``home`` its kept tuner home;
    ``cap_s`` its cap in seconds (studies are given a wall-time budget inside it)."""

    device: str
    home: Path
    cap_s: float

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"


def _trial_row(trial: Any, side: dict[str, Any]) -> dict[str, Any]:
    """One finished trial's row; ``side``: its side records (env, runtime, worker info, log tail:
    :func:`tuner.storage.records.trial_records`)."""
    attrs = {**trial.user_attrs, **side}
    info = dict(attrs.get("worker_info") or {})
    row = {
        "number": trial.number,
        "role": attrs.get("role"),
        "outcome": attrs.get("outcome"),
        "reason": attrs.get("reason"),
        "params": dict(trial.params),
        "slot": attrs.get("slot"),
        "cuda_visible_devices": (attrs.get("env") or {}).get("CUDA_VISIBLE_DEVICES"),
        "device_used": attrs.get("device_used") or info.get("device_used") or "not recorded",
        "warm_worker_pid": info.get("warm_worker_pid"),
        "duplicate_of": attrs.get("duplicate_of"),
        "weights_identity": (attrs.get("runtime") or {}).get("weights_identity"),
        "compared_with": attrs.get("compared_with"),
        "phases_s": (attrs.get("cost") or {}).get("phases_device_s") or {},
        "quality_scored": attrs.get("quality_scored"),  # scored off the device (measurement.score_off_device)
        "eval_time_s": attrs.get("eval_time_s"),
        "metrics": {key: entry.get("value") for key, entry in dict(attrs.get("metrics", {})).items()},
        "unavailable": {
            key: entry.get("reason")
            for key, entry in dict(attrs.get("metrics", {})).items()
            if entry.get("value") is None
        },
    }
    if attrs.get("outcome") != "OK":
        row["log_tail"] = str(attrs.get("log_tail") or "")[-LOG_TAIL_CHARS:]
    return row


def study_rows(
    spec: dict[str, Any], ctx: PhaseContext, name: str, share: float = 0.7, enqueue: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Run ``spec`` as study ``name`` in ``ctx.home`` and return one row per finished trial (:func:`_trial_row`;
    an enqueued setting the study stopped before does not appear).
    The study stops itself after ``share`` of the phase's cap (``budget.wall_time_s``). ``enqueue``: full
    settings to run, in order, after the spec's reference and baseline."""
    import tuner

    ctx.home.mkdir(parents=True, exist_ok=True)
    spec = {**spec, "name": name, "budget": {**spec["budget"], "wall_time_s": max(5.0, share * ctx.cap_s)}}
    path = ctx.home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    opened = tuner.create_study(path, study_name=name, home=ctx.home)
    for setting in enqueue or ():
        opened.study.enqueue_trial(setting)
    tuner.run_study(opened, home=ctx.home, use_mlflow=False, memory_model=False)
    from tuner.storage.records import trial_records

    finished = [trial for trial in opened.study.get_trials() if trial.state.is_finished()]
    side = trial_records(opened.study, finished)
    return [_trial_row(trial, side[trial.number]) for trial in finished]


def metric_figures(row: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """``row``'s values of the metrics ``names`` (None when absent or unavailable), and under ``unavailable`` the
    reason of each one the trial reported unavailable (e.g. NVML's utilization on a CPU)."""
    figures: dict[str, Any] = {name: row["metrics"].get(name) for name in names}
    figures["unavailable"] = {name: row["unavailable"][name] for name in names if name in row["unavailable"]}
    return figures


def failures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trials that did not end OK: number, outcome, reason and the tail of their worker log."""
    return [{k: r.get(k) for k in ("number", "outcome", "reason", "log_tail")} for r in rows if r["outcome"] != "OK"]


def die_with_parent() -> None:
    """In a child before ``exec``: SIGKILL it when its parent dies (Linux ``PR_SET_PDEATHSIG``), so a phase
    never outlives a coordinator that was itself SIGKILLed; the phase's runners' reapers then kill the rest."""
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    """``path`` holds either its old content or all of ``data``, never a part (temporary file + rename)."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2, default=str))
    os.replace(temporary, path)
