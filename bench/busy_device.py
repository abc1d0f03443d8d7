"""Where a tiny-Wan study's device time goes in a warm worker: the share of each phase.

Runs ``search_spaces/wan_tiny_cpu.yaml`` (diffusers' real WanPipeline, tiny architecture, random weights, one
CPU thread, ``workload.worker: warm``) as a study through the public API (no MLflow, every setting runs) with
``--trials`` measured trials, then sums the trials' recorded ``cost.phases_device_s``
(:func:`tuner.storage.cost.study_cost`, the figures ``tuner status`` shows) and prints each phase's share of the
study's device time: measured calls, warm-ups, start-up (process start, the model's load and every reload),
evaluation (quality scoring), finish (samples, saved output, provenance) and unattributed (killed workers).
Issue 38 asks for measured calls >= 75 %.

Usage: ``python bench/busy_device.py [--trials 14] [--label NAME] [--warmup N|auto] [--reload-on A,B]``: raw
figures (the study's sums and one row per trial) to ``bench/results/busy_device.json`` (``--results`` another
file); ``--report`` prints the same lines from them and measures nothing. ``--warmup`` and ``--reload-on``
override the spec's ``measurement.warmup`` and ``workload.python.reload_on``: ``--warmup 1 --reload-on
precision,attention_backend`` is the spec before issue 38 (every trial warmed up, a backend change reloads);
``--light-warmup on|off`` turns the factory's one-step warm-up of a new shape on or off (default: on);
``--same-settings`` runs a seeded random sampler with nothing skipped, so two arms run the same settings;
``--reload-lookahead N`` sets ``sampler.reload_lookahead`` (1: proposals run in the order asked; default: the
spec's, 3). ``--after-another`` runs the study in a ``tuner worker`` (in this process) right
after another study of the same workload with another seed: it finds the worker's warm workers running, the
model loaded (its wall time is then its first trial's start to its last one's end). Each run's row says whether it reloaded the model (its ``reload_on`` values differ from the run
before it, in the order they ran).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import raw_results
import yaml
from raw_results import provenance

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "search_spaces" / "wan_tiny_cpu.yaml"
TARGET_SHARE = 0.75  # issue 38: measured calls' share of the study's device time
SHOWN = ("measured", "warmup", "startup", "evaluation", "finish", "unattributed")


def _trial_row(trial: Any, side: dict[str, Any]) -> dict[str, Any]:
    """One finished trial: its number, role, outcome, the parameters that reload or reshape, its cost's
    phases (device-s), the warm-up calls it made and its latency p50 (s). ``side``: its side records."""
    from tuner.storage.records import TrialRecord

    record = TrialRecord.from_trial(trial)
    cost = record.cost or {}
    metric = (trial.user_attrs.get("metrics") or {}).get("latency_p50_s") or {}
    keep = ("precision", "attention_backend", "num_frames", "height", "width", "cache")
    return {
        "number": trial.number,
        "role": trial.user_attrs.get("role"),
        "outcome": record.outcome,
        "params": {k: trial.params.get(k) for k in keep if k in trial.params},
        "device_s": record.device_s,
        "phases_device_s": dict(cost.get("phases_device_s") or {}),
        "warmup_calls": (side.get("worker_info") or {}).get("warmup"),
        "latency_p50_s": metric.get("value"),
        "psnr_db": ((trial.user_attrs.get("metrics") or {}).get("psnr_db") or {}).get("value"),
        "eval_time_s": trial.user_attrs.get("eval_time_s"),
        "scored_off_device": bool(trial.user_attrs.get("quality_scored")),
        "setting": dict(sorted(trial.params.items())),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the study in a fresh tuner home; its phase sums, wall time and trial rows."""
    import tuner
    from tuner.front.cost import cost_of_records
    from tuner.storage.records import TrialRecord, trial_records

    spec = yaml.safe_load(SPEC.read_text())
    spec["budget"] = {**spec["budget"], "trials": args.trials, "wall_time_s": args.wall_s}
    if args.reload_on is not None:
        spec["workload"]["python"]["reload_on"] = [name for name in args.reload_on.split(",") if name]
    if args.same_settings:  # proposals that depend on the seed only, every one run: two arms run the same list
        spec["sampler"] = {"name": "random", "skip_dominated": None}
    if args.reload_lookahead is not None:
        spec["sampler"] = {**spec.get("sampler", {}), "reload_lookahead": args.reload_lookahead}
    if args.light_warmup is not None:
        light = args.light_warmup == "on"
        spec["workload"]["python"]["kwargs"] = {**spec["workload"]["python"]["kwargs"], "light_warmup": light}
    if getattr(args, "score_off_device", None) is not None:
        spec["measurement"] = {**spec["measurement"], "score_off_device": args.score_off_device}
    if args.warmup is not None:
        spec["measurement"] = {
            **spec["measurement"],
            "warmup": args.warmup if args.warmup == "auto" else int(args.warmup),
        }
    with tempfile.TemporaryDirectory(prefix="busy_device_") as tmp:
        home = Path(tmp)
        path = home / "wan_tiny_busy.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        if getattr(args, "after_another", False):
            opened, wall_s = _after_another(spec, home)
        else:
            started = time.perf_counter()
            opened = tuner.create_study(path, study_name="wan_tiny_busy", home=home)
            tuner.run_study(opened, home=home, use_mlflow=False, memory_model=False)
            wall_s = time.perf_counter() - started
        trials = [t for t in opened.study.get_trials() if t.state.is_finished()]
        cost = cost_of_records([TrialRecord.from_trial(t) for t in trials])
        side = trial_records(opened.study, trials)
        rows = [_trial_row(t, side.get(t.number, {})) for t in trials]
        _mark_reloads(rows, trials, spec["workload"]["python"]["reload_on"])
    return {
        "label": args.label,
        "spec": str(SPEC.relative_to(ROOT)),
        "trials_asked": args.trials,
        "measurement": spec["measurement"],
        "reload_on": spec["workload"]["python"]["reload_on"],
        "light_warmup": args.light_warmup or "on (the factory's default)",
        "sampler": spec["sampler"],
        **({"after_another": True} if getattr(args, "after_another", False) else {}),
        "study_wall_s": round(wall_s, 2),
        "recorded_device_s": round(cost.recorded_s, 3),
        "phases_device_s": {k: round(v, 3) for k, v in cost.phases_s.items()},
        "trials": rows,
    }


def _after_another(spec: dict[str, Any], home: Path) -> tuple[Any, float]:
    """Two studies in one ``tuner worker`` (``run_worker --once``, in this process): first a study of the same
    workload with another seed (other settings), then the study measured, which finds the worker's warm workers
    (:class:`tuner.runner.choice.KeptRunner`); the second study, opened, and its wall time (s)."""
    import tuner
    from tuner.fleet.worker import WorkerOptions, run_worker
    from tuner.session.events import Quiet

    url = f"sqlite:///{home / 'fleet.db'}"
    before = home / "previous.yaml"
    before.write_text(yaml.safe_dump({**spec, "seed": int(spec.get("seed", 0)) + 1}, sort_keys=False))
    tuner.create_study(before, study_name="previous", storage=url, home=home)
    opened = tuner.create_study(home / "wan_tiny_busy.yaml", study_name="wan_tiny_busy", storage=url, home=home)
    run_worker(WorkerOptions(url, home, once=True, use_mlflow=False), Quiet())
    trials = [t for t in opened.study.get_trials() if t.datetime_start is not None and t.datetime_complete is not None]
    wall_s = (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()
    return opened, wall_s


def _mark_reloads(rows: list[dict[str, Any]], trials: list[Any], reload_on: list[str]) -> None:
    """Give each row of a run ``ran`` (its place in the order runs ended) and ``reloaded`` (whether its
    ``reload_on`` values differ from the run before; the first run loads)."""
    from datetime import datetime

    by_number = {row["number"]: row for row in rows}
    ran = sorted(
        (t for t in trials if by_number[t.number]["device_s"]), key=lambda t: t.datetime_complete or datetime.max
    )
    loaded: tuple[Any, ...] | None = None
    for place, trial in enumerate(ran):
        values = tuple(trial.params.get(name) for name in reload_on)
        by_number[trial.number].update(ran=place, reloaded=values != loaded)
        loaded = values


def _count(n: int, noun: str) -> str:
    """``1 load``, ``3 loads``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def shares(phases: dict[str, float]) -> dict[str, float]:
    """Each phase's share (0..1) of the phases' total."""
    total = sum(phases.values()) or 1.0
    return {phase: phases.get(phase, 0.0) / total for phase in SHOWN}


def _warmup_kind(light: Any) -> str:
    """How a run's new shapes were warmed, for its first line (nothing for a run from before the choice)."""
    if light is None:
        return ""
    return "; whole-call warm-ups" if light in (False, "off") else "; one-step warm-ups"


def _after_the_first(ran: list[dict[str, Any]]) -> list[str]:
    """One line: the shares of the runs after the first, which alone pays the process's one-time costs (its
    start, the evaluators' first set-up, the reference output written); none for a run without rows."""
    if len(ran) < 2:
        return []
    later: dict[str, float] = {}
    for row in ran[1:]:
        for phase, seconds in row["phases_device_s"].items():
            later[phase] = later.get(phase, 0.0) + float(seconds)
    first = sum(float(v) for v in ran[0]["phases_device_s"].values())
    share = shares(later)
    met = "met" if share["measured"] >= TARGET_SHARE else "not met"
    return [
        f"from the second run on (the first, {first:.1f} device-s, pays the one-time costs): measured "
        f"{share['measured']:.1%}, warm-up {share['warmup']:.0%}, start-up and reloads {share['startup']:.0%}, "
        f"evaluation {share['evaluation']:.0%} ({met} there)"
    ]


def report_lines(result: dict[str, Any]) -> list[str]:
    """The lines the bench prints, from its raw figures."""
    share = shares(result["phases_device_s"])
    ran = [row for row in result["trials"] if row["device_s"]]
    met = "met" if share["measured"] >= TARGET_SHARE else "not met"
    first_start = ran[0]["phases_device_s"].get("startup", 0.0) if ran else 0.0
    steady = dict(result["phases_device_s"], startup=result["phases_device_s"]["startup"] - first_start)
    return [
        f"tiny Wan study in a warm worker ({result['label']}; warm-up {result['measurement']['warmup']}, "
        f"reload on {', '.join(result.get('reload_on') or ['nothing'])}"
        f"{_warmup_kind(result.get('light_warmup'))}"
        f"{'; in a tuner worker, after another study of the same workload' if result.get('after_another') else ''}): "
        f"{len(ran)} runs, {result['recorded_device_s']:.0f} device-s recorded in {result['study_wall_s']:.0f} s",
        "device time: " + ", ".join(f"{phase} {share[phase]:.0%}" for phase in SHOWN),
        f"measured calls {share['measured']:.1%} of the device time (target >= {TARGET_SHARE:.0%}: {met})",
        f"without the worker's one-time start ({first_start:.1f} s: interpreter, imports, model load): measured "
        f"{shares(steady)['measured']:.0%}, warm-up {shares(steady)['warmup']:.0%}; "
        f"{sum(row['warmup_calls'] or 0 for row in ran)} warm-up calls made in {len(ran)} runs"
        + (
            f"; {_count(sum(1 for row in ran if row['reloaded']), 'load')} of the model (reload_lookahead "
            f"{result['sampler'].get('reload_lookahead', 'as the spec default')})"
            if all("reloaded" in row for row in ran)
            else ""
        ),
        *_after_the_first(ran),
        f"raw: {provenance(result)}",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=14, help="measured trials (the spec's budget, default 14)")
    parser.add_argument("--wall-s", type=float, default=900.0, help="the study's wall-time budget (s)")
    parser.add_argument("--warmup", default=None, help="measurement.warmup: an int or auto (default: the spec's)")
    parser.add_argument(
        "--reload-on",
        default=None,
        help="workload.python.reload_on, comma-separated (default: the "
        "spec's); the before figure: precision,attention_backend",
    )
    parser.add_argument(
        "--light-warmup",
        choices=("on", "off"),
        default=None,
        help="the factory's one-step warm-up of a new shape on or off (default: the factory's, on)",
    )
    parser.add_argument(
        "--same-settings",
        action="store_true",
        help="a seeded random sampler, nothing skipped: the settings run depend on the seed only (an A/B of two arms)",
    )
    parser.add_argument(
        "--reload-lookahead",
        type=int,
        default=None,
        help="sampler.reload_lookahead: proposals asked ahead for fewer reloads (1: in order; default: the spec's)",
    )
    parser.add_argument(
        "--after-another",
        action="store_true",
        help="run the study in a tuner worker right after another study of the same workload (another seed): "
        "it finds the worker's warm workers running, the model loaded",
    )
    parser.add_argument("--label", default="now", help="a name for this run in the figures (before / after)")
    raw_results.main(parser, "busy_device.py", measure, report_lines)
