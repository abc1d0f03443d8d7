"""Measure each table's per-trial start-up and evaluation with real trials: the replay cost model's overhead.

Usage::

    python bench/tables/measure_overhead.py                        # every declared table, 4 trials each
    python bench/tables/measure_overhead.py --tables avqa:cpu1t --trials 3
    python bench/tables/measure_overhead.py --dry-run              # measure and print, write no sidecar

A replay runs nothing, so :mod:`tuner.replay.cost_model` models what each replayed trial would
have held the device: ``startup + (warmup + min_repeats) x latency_p50_s + evaluation``. The
calls' latency is in the table; the per-trial ``startup`` (the worker's process start, imports,
the model's load) and ``evaluation`` (the quality evaluators against the reference output) are
not. This script measures them on this host, per declared table (``hardware_types.yaml``):

* a real study of the table's replay spec (:func:`tuner.replay.table.replay_spec`: the fixed
  parameters and overridden inputs as the table was measured) runs ``--trials`` settings through
  the real :class:`~tuner.study.coordinator.Coordinator` and the spec's default runner
  (:func:`tuner.runner.choice.make_runner`, with the evaluators' warm-ups preloaded, as
  ``tuner run`` builds it) on one CPU slot with the table's torch thread count (sidecar
  ``torch_threads``); a table measured with oneDNN off (sidecar ``"onednn": false``) gets
  torch's oneDNN backend switched off in every worker, as ``build_tables.py --no-onednn`` did
  in-process, without importing torch any sooner than the plain runner does (:func:`onednn_off`,
  a preload warm-up: flipped in the fork server before any worker forks when the preloaded workload
  imports torch there — every worker inherits it —, else by an import hook in each worker; the
  switch prints :data:`ONEDNN_OFF_SAID` on the stderr of the process that flipped it). No
  MLflow; the memory model off;
* the settings: the reference and the baseline (what every study runs first), then settings
  drawn (seed 0) from the table's OK rows no slower than its median latency (to keep this quick);
* each run's recorded ``cost`` (the samples in run order: which of them reloaded the model is read from it,
  :func:`tuner.replay.cost_model.reload_split`) (:func:`tuner.storage.cost.trial_cost`: the worker's reported
  ``phases_s`` and the runner's ``wall_time_s``; ``startup`` = wall - warm-up - measured -
  evaluation - finish) is one sample;
* the sidecar's ``trial_overhead_s`` gets the median start-up and evaluation (seconds) over the
  OK samples, with every sample, the runner, the host's load and the time (UTC). Nothing else in
  the sidecar changes. ``calls_vs_model``: the median over the OK samples of the real warm-up +
  timed calls' seconds over the model's ``(warmup + min_repeats) x`` the table's latency (a check
  of the model's call term, not used by it: a fresh process's calls, and repeats until the CV
  converges, can cost more than the table's warm, in-process calls).

The first trial of a study also pays the fork server's start (imports and warm-ups, once per
study): its sample shows it, the median leaves it out. The host is shared: the load averages
before and after are recorded next to the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

TABLE_DIR = Path(__file__).resolve().parent
ROOT = TABLE_DIR.parents[1]
SOURCE = "bench/tables/measure_overhead.py"
ONEDNN_OFF_WARM_UP = "measure_overhead:onednn_off"  # module importable through PYTHONPATH (set in main)
ONEDNN_OFF_SAID = "measure_overhead: torch's oneDNN backend switched off"


def onednn_off() -> None:
    """Fork-server warm-up: torch's oneDNN backend off in every worker, torch imported no sooner.

    When the server already imported torch (a workload module that imports it), the switch is
    flipped there and every forked worker inherits it. Otherwise the worker imports torch itself
    (its start-up pays for that, as with the plain runner): an import hook flips the switch as
    soon as torch is loaded, and says so on its stderr (:data:`ONEDNN_OFF_SAID`).
    """
    if "torch" in sys.modules:
        _switch_off()
        return
    sys.meta_path.insert(0, _AfterTorchImport())


def _switch_off() -> None:
    import importlib

    importlib.import_module("torch.backends.mkldnn").enabled = False  # type: ignore[attr-defined]
    print(ONEDNN_OFF_SAID, file=sys.stderr, flush=True)


class _AfterTorchImport:
    """A meta-path finder that runs :func:`_switch_off` right after ``torch`` is imported (once)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        import importlib.util

        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader, run = spec.loader, spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _switch_off()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def pick_settings(table: Any, count: int, seed: int = 0) -> list[dict[str, Any]]:
    """The reference, the baseline, then settings drawn (``seed``) from the table's OK rows no slower
    than its median latency: ``count`` settings in all (the reference and baseline always)."""
    from tuner.spec.candidate import canonical_key

    spec = table.spec
    chosen = [dict(s) for s in (spec.reference, spec.baseline) if s is not None]
    taken = {canonical_key(table.lookup(s).params) for s in chosen if table.lookup(s) is not None}
    rows = [r for r in table.rows.values() if r.outcome.value == "OK" and r.values.get("latency_p50_s")]
    median = statistics.median(r.values["latency_p50_s"] for r in rows) if rows else 0.0
    quick = sorted(
        (r for r in rows if r.values["latency_p50_s"] <= median and canonical_key(r.params) not in taken),
        key=lambda r: canonical_key(r.params),
    )
    extra = random.Random(seed).sample(quick, max(0, min(count - len(chosen), len(quick))))
    return (chosen + [dict(r.params) for r in extra])[: max(count, 1)]


def run_trials(
    table: Any, settings: Sequence[dict[str, Any]], threads: int, onednn: bool, home: Path
) -> tuple[list[dict[str, Any]], str]:
    """Run ``settings`` as one real study of ``table``'s replay spec (see the module docstring); the
    samples (one per run, trial order) and the runner's description."""
    from tuner.evaluators.registry import warm_ups
    from tuner.replay.table import replay_spec
    from tuner.runner.base import Slot
    from tuner.runner.choice import make_runner
    from tuner.search.objectives import plan_constraints
    from tuner.storage import attributes as names
    from tuner.storage.store import enqueue
    from tuner.study.coordinator import Coordinator
    from tuner.study.studies import create_study

    spec, text = replay_spec(table, len(settings), "random", {}, seed=0)
    opened = create_study(
        spec,
        text,
        f"sqlite:///{home / 'overhead.db'}",
        "overhead",
        "random",
        len(settings),
        {"spec_name": spec.name, "overhead_of": table.hardware.label},
    )
    for setting in settings:  # the reference and the baseline are queued by create_study
        if setting not in (spec.reference, spec.baseline):
            enqueue(opened.study, setting, names.SEARCH)
    preload = [*warm_ups(spec.used_metrics), *([] if onednn else [ONEDNN_OFF_WARM_UP])]
    runner = make_runner(spec, preload)
    described = f"{type(runner).__name__}(launcher={getattr(runner, 'launcher', 'n/a')}, preload={preload})"
    try:
        Coordinator(
            study=opened.study,
            spec=opened.spec,
            runner=runner,
            slots=[Slot(0, None, threads)],
            home=home,
            device="cpu",
            plan=plan_constraints(spec, {}),
            budget_trials=len(settings),
            wall_time_s=None,
            memory_model=False,
        ).run()
    finally:
        runner.close()
    ran = [t for t in opened.study.get_trials(deepcopy=False) if names.is_measured(t)]
    ran.sort(key=lambda t: (t.datetime_complete or datetime.max, t.number))  # run order: a parked trial runs late
    return [sample_of(table, t, onednn) for t in ran], described


def sample_of(table: Any, trial: Any, onednn: bool = True) -> dict[str, Any]:
    """One run's sample: its outcome, wall and phase seconds (the recorded ``cost``), latencies, and
    (with oneDNN off, see :func:`onednn_off`) (:func:`onednn_off`)."""
    from tuner.storage import attributes as names

    cost = names.cost_of(trial) or {}
    phases = {p: round(float(s), 3) for p, s in (cost.get("phases_device_s") or {}).items()}
    latency = (names.metrics_of(trial).get("latency_p50_s") or {}).get("value")
    row = table.lookup(trial.params)
    recorded = None if row is None else row.values.get("latency_p50_s")
    from tuner.runner.measure.warmup import floor_of

    calls = floor_of(table.spec.measurement.warmup) + table.spec.measurement.min_repeats  # ``auto``: one warm-up
    return {
        "trial": trial.number,
        "role": names.role_of(trial),
        "outcome": names.outcome_of(trial),
        "settings": dict(trial.params),
        "wall_s": round(float(cost.get("wall_s") or 0.0), 3),
        "phases_s": phases,
        "latency_p50_s": None if latency is None else round(float(latency), 4),
        "table_latency_p50_s": recorded,
        "calls_s": round(phases.get("warmup", 0.0) + phases.get("measured", 0.0), 3),
        "modelled_calls_s": None if recorded is None else round(calls * recorded, 3),
    }


def overhead_of(
    samples: Sequence[dict[str, Any]],
    runner: str,
    threads: int,
    onednn: bool,
    load: tuple[Sequence[float], Sequence[float]],
) -> dict[str, Any]:
    """The sidecar's ``trial_overhead_s``: median start-up and evaluation (s) of the OK samples."""
    ok = [s for s in samples if s["outcome"] == "OK"] or list(samples)
    ratios = [s["calls_s"] / s["modelled_calls_s"] for s in ok if s.get("modelled_calls_s")]
    return {
        "startup": round(statistics.median(s["phases_s"].get("startup", 0.0) for s in ok), 3) if ok else 0.0,
        "evaluation": round(statistics.median(s["phases_s"].get("evaluation", 0.0) for s in ok), 3) if ok else 0.0,
        "trials": len(ok),
        "runner": runner,
        "torch_threads": threads,
        "onednn": onednn,
        "calls_vs_model": round(statistics.median(ratios), 3) if ratios else None,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": SOURCE,
        "load_average_before": [round(x, 2) for x in load[0]],
        "load_average_after": [round(x, 2) for x in load[1]],
        "samples": list(samples),
    }


def measure(label: str, trials: int, write: bool) -> dict[str, Any]:
    """Measure one declared table's overhead; write it into its sidecar unless ``write`` is False."""
    from tuner.replay.cost_model import OVERHEAD_KEY
    from tuner.replay.table import load_hardware_types, load_table

    hardware = load_hardware_types(TABLE_DIR / "hardware_types.yaml")[label]
    table = load_table(hardware)
    threads = int(table.sidecar.get("torch_threads", 1))
    onednn = bool(table.sidecar.get("onednn", True))
    settings = pick_settings(table, trials)
    before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tuner-overhead-") as scratch:
        samples, runner = run_trials(table, settings, threads, onednn, Path(scratch))
    overhead = overhead_of(samples, runner, threads, onednn, (before, os.getloadavg()))
    if write:
        path = hardware.table_path.with_suffix(".json")
        sidecar = json.loads(path.read_text())
        sidecar[OVERHEAD_KEY] = overhead
        path.write_text(json.dumps(sidecar, indent=2) + "\n")
    return overhead


def say(label: str, overhead: dict[str, Any]) -> None:
    """One line per table and one per sample."""
    print(
        f"{label}: start-up {overhead['startup']:.3g} s, evaluation {overhead['evaluation']:.3g} s "
        f"(median of {overhead['trials']} OK runs; {overhead['runner']}; threads {overhead['torch_threads']}, "
        f"oneDNN {'on' if overhead['onednn'] else 'off'}; load {overhead['load_average_before'][0]:.2f} -> "
        f"{overhead['load_average_after'][0]:.2f}); warm-up + timed calls {overhead['calls_vs_model']} x the "
        f"model's (median)",
        flush=True,
    )
    for s in overhead["samples"]:
        phases = ", ".join(f"{p} {v:.2f}" for p, v in s["phases_s"].items() if v)
        print(
            f"  trial {s['trial']} {s['role']:<9} {s['outcome']:<4} wall {s['wall_s']:.2f} s ({phases}); "
            f"latency {s['latency_p50_s']} s (table {s['table_latency_p50_s']}); calls {s['calls_s']} s "
            f"(model {s['modelled_calls_s']} s)",
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", help="table:hardware,... (default: every declared table that exists)")
    parser.add_argument("--trials", type=int, default=4, help="real trials per table (reference and baseline first)")
    parser.add_argument("--dry-run", action="store_true", help="print the figures, write no sidecar")
    args = parser.parse_args(argv)
    # the fork server imports this module for the oneDNN switch (ONEDNN_OFF_WARM_UP)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TABLE_DIR), str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    sys.path[:0] = [str(ROOT)]
    from tuner.replay.table import load_hardware_types

    declared = load_hardware_types(TABLE_DIR / "hardware_types.yaml")
    labels = args.tables.split(",") if args.tables else [k for k, hw in declared.items() if hw.table_path.exists()]
    started = time.perf_counter()
    for label in labels:
        if label not in declared:
            parser.error(f"{label}: not declared in hardware_types.yaml; declared: {sorted(declared)}")
        say(label, measure(label, args.trials, write=not args.dry_run))
    print(f"elapsed {time.perf_counter() - started:.0f} s{'' if args.dry_run else '; sidecars written'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
