"""Measure every setting of a built-in model's search space on this host: an exhaustive table.

Usage::

    python bench/tables/build_tables.py avatar_dit --threads 1            # quality + latency + memory
    python bench/tables/build_tables.py avatar_dit --threads 2            # latency + memory (quality joined)
    python bench/tables/build_tables.py avqa --threads 1
    python bench/tables/build_tables.py avqa --threads 1 --no-onednn     # another "hardware type"
    python bench/tables/build_tables.py wan_tiny --threads 1             # diffusers' Wan pipeline, tiny, random
    python bench/tables/build_tables.py omni_tiny --rebuild --timed-calls 3   # measured again, median of 3 calls

Hardware types reachable on a CPU host: ``cpuNt`` — N torch intra-op threads;
``cpu1t-nodnn`` — one thread with torch's oneDNN backend off: fp32 runs the same
kernels (measured equal within noise), bf16 loses its fast kernels and runs 2-4x
slower than fp32 (a host without fast bf16, like a GPU without bf16 tensor cores).

Each setting is measured in this one process by the worker's own code
(:func:`tuner.runner.worker.execute`, the warm runner's path: the model stays
loaded, peak RSS is reset before each setting), so a row holds what a tuner
trial of that setting on this host would have recorded:

* ``latency_p50_s`` — with ``--timed-calls N`` (the Wan and Omni tables since 2026-12-06), the median of N
  timed calls, as a trial measures (``latency_repeats`` says N; the sidecar's ``timed_calls`` too). The first
  builds: one timed call (seconds); when that call took under the
  table's ``remeasure_below_s`` (0.5 s; 0.15 s for avqa, whose calls all take
  0.03-0.4 s), it served as warm-up and two more timed calls give the median
  (``latency_repeats`` says 1 or 2) -- a slower first call of a setting new to the process was its latency;
* ``peak_rss_gb`` — the worker's peak resident memory during the timed calls
  (GB = 1e9 bytes; the loaded model and evaluators included). Per setting only
  since the monitor trims the C heap before it resets the high-water mark
  (:mod:`tuner.evaluators.memory`); tables measured before that (their sidecar says
  ``"peak_rss_per_setting": false``) hold the process's history there instead;
* the spec's quality metrics against the reference setting's output — measured
  on the ``--threads 1`` table; a table with ``--threads N > 1`` reads them from
  the 1-thread table of the same space (the outputs do not depend on the thread
  count or oneDNN: the generation is seeded and deterministic), which must exist first;
* ``outcome`` (OK / INVALID / OOM / CRASH) and ``reason`` as the worker gave them.

Settings are visited in a seeded random order (host noise spreads evenly over
the space instead of hitting one corner) and written as they are measured; a
run that stops part way resumes where it left off. A JSON sidecar records the
host: CPU model, thread count, torch version, date, and the load during the run.

The spaces are those of ``search_spaces/avatar_demo.yaml`` (768 settings) and
``search_spaces/avqa_demo.yaml`` with ``audio_sample_rate`` fixed at 16000 and
``use_cache`` at true (3,840 of its 15,360 settings: the full space would take
hours here; the two fixed knobs are the ones the model card shows matter
least), and ``avatar_dit_proxy``: the avatar space with 1 s of audio instead of
3 s (the cheap proxy of multi-fidelity screening; its quality is measured
against the reference setting's output at 1 s), see :data:`TABLES`.

``wan_tiny``: diffusers' real Wan text-to-video pipeline at its tiny architecture with seeded random weights
(``bench/tables/wan_tiny_grid.yaml``: ``search_spaces/wan_tiny_cpu.yaml`` narrowed to frames x steps x CFG x
scheduler x cache x threshold x precision at 64x64). Its spec has a reference per shape
(``reference_shape.per``): each setting's quality is measured against the reference at its own frame count,
measured when a shape first needs it. Each row also records the call's cost structure
(:data:`TableDefinition.structure`: text encoding, the denoising loop, one step, the VAE decode; medians of the
timed calls, seconds), which the cost-structure work replays.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table_definitions import (  # noqa: E402
    ROOT,
    TABLES,
    TableDefinition,
    hardware_name,
    settings_of,
    table_path,
)
from table_sidecar import cpu_model, run_record, sidecar_head  # noqa: E402

KEPT_SIDECAR_KEYS = ("trial_overhead_s",)
"""What a rebuild keeps of the sidecar: the per-trial overhead measured apart (bench/tables/measure_overhead.py)."""


def _request(
    spec: Any,
    settings: dict[str, Any],
    number: int,
    work: Path,
    quality: list[str],
    repeats: int,
    reference: Path,
    is_reference: bool,
) -> Any:
    from tuner.runner.base import TrialRequest

    return TrialRequest(
        study_name=f"table_{spec.name}",
        trial_number=number,
        workload_class=spec.workload.target,
        settings=settings,
        inputs=dict(spec.inputs),
        seed=spec.seed,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": repeats, "max_repeats": repeats, "cv_target": 0.05, "noisy_cv": 0.10},
        timeout_s=3600,
        workdir=str(work / f"t{number:05d}"),
        quality_metrics=quality,
        reference_output=None if is_reference else str(reference),
        save_output=str(reference) if is_reference else None,
        compare_with_self=is_reference,
        reference_settings=dict(spec.reference),
        workload_options=spec.workload.options,
    )


def _value(result: Any, name: str) -> str:
    metric = result.metrics.get(name)
    return "" if metric is None or metric.value is None else f"{metric.value:.6g}"


def measure_table(
    table: str,
    threads: int,
    limit: int | None,
    onednn: bool = True,
    timed_calls: int | None = None,
    rebuild: bool = False,
) -> Path:
    """Measure (or resume) ``table`` with ``threads`` torch threads (and oneDNN or not); return the CSV path.

    ``timed_calls``: every setting's latency is the median of that many timed calls (None: one, two more when
    it was fast -- the first tables' protocol). ``rebuild``: the table is measured again from the start -- the
    existing CSV moves to ``<name>.previous.csv`` (kept until the rebuild is committed; a rebuild that stops
    resumes), whose quality columns are taken over (seeded, deterministic outputs: only latency and memory are
    measured again)."""
    os.environ["TUNER_TORCH_THREADS"] = str(threads)
    import tempfile

    import torch

    torch.backends.mkldnn.enabled = onednn

    from tuner.spec.loading import load_spec

    definition = TABLES[table]
    spec = load_spec(definition.spec_path)
    if definition.inputs:
        spec = spec.model_copy(update={"inputs": {**spec.inputs, **definition.inputs}})
    names, settings = settings_of(definition)
    random.Random(0).shuffle(settings)
    path = table_path(table, threads, onednn)
    previous = path.with_suffix(".previous.csv")
    if rebuild and not previous.exists():
        path.rename(previous)
    quality_from = _quality_rows(table, names) if (threads, onednn) != (1, True) else None
    if rebuild:
        quality_from = _quality_rows(table, names, previous)
    quality = list(definition.quality) if quality_from is None else []
    columns = [
        *names,
        *("outcome", "reason", "latency_p50_s", "latency_repeats", "peak_rss_gb"),
        *definition.quality,
        *definition.structure,
    ]
    done = _done_keys(path, names)
    keep: dict[str, Any] = {}
    started, load_before = time.time(), os.getloadavg()
    load_peak = load_before[0]
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        references: dict[str, Path] = {}
        new_file = not path.exists()
        with path.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if new_file:
                writer.writerow(columns)
            measured = 0
            for number, setting in enumerate(settings, start=1):
                key = _key(setting, names)
                if key in done:
                    continue
                if limit is not None and measured >= limit:
                    break
                reference = _reference_for(spec, setting, work, quality, keep, references)
                writer.writerow(
                    _measure_row(
                        spec,
                        setting,
                        names,
                        number,
                        work,
                        quality,
                        reference,
                        keep,
                        quality_from,
                        definition,
                        timed_calls,
                    )
                )
                handle.flush()
                measured += 1
                load_peak = max(load_peak, os.getloadavg()[0])
                if measured % 50 == 0:
                    print(f"{table} cpu{threads}t: {len(done) + measured}/{len(settings)}", flush=True)
    load = {"before": load_before, "peak": load_peak}
    _write_sidecar(table, threads, onednn, started, load, len(settings), timed_calls, fresh=new_file)
    return path


def _reference_for(
    spec: Any, setting: dict[str, Any], work: Path, quality: list[str], keep: dict[str, Any], done: dict[str, Path]
) -> Path:
    """The saved output of the reference ``setting`` is compared with (the spec's reference at the setting's
    shape when the spec has ``reference_shape.per``), measured the first time a shape needs it."""
    from tuner.runner.worker import execute
    from tuner.spec.quality.reference_shape import reference_at
    from tuner.spec.space import resolve

    at = reference_at(spec, setting)
    assert at is not None, "a table measures quality against the spec's reference"
    if at.label not in done:
        path = work / f"reference_{len(done)}.npz"
        candidate = resolve(spec, at.params)[0]
        assert candidate is not None, f"the reference at {at.label} breaks a rule"
        ran = execute(_request(spec, candidate.settings, 0, work, quality, 1, path, True), keep)
        if ran.outcome.value != "OK":
            raise SystemExit(f"the reference setting at {at.label or 'its shape'} failed: {ran.reason}")
        done[at.label] = path
    return done[at.label]


def _measure_row(
    spec: Any,
    setting: dict[str, Any],
    names: list[str],
    number: int,
    work: Path,
    quality: list[str],
    reference: Path,
    keep: dict[str, Any],
    quality_from: dict[str, dict[str, str]] | None,
    definition: TableDefinition,
    timed_calls: int | None = None,
) -> list[str]:
    """One CSV row of ``setting`` (see the module docstring; ``timed_calls``: :func:`measure_table`'s)."""
    from tuner.runner.worker import execute
    from tuner.spec.space import resolve

    quality_names, remeasure_below_s = definition.quality, definition.remeasure_below_s
    candidate, problem = resolve(spec, setting)
    cells = [str(setting[n]) for n in names]
    if candidate is None:
        return [
            *cells,
            "INVALID",
            problem or "",
            "",
            "",
            "",
            *([""] * (len(quality_names) + len(definition.structure))),
        ]
    calls = timed_calls or 1
    result = execute(_request(spec, candidate.settings, number, work, quality, calls, reference, False), keep)
    latency, repeats = _value(result, "latency_p50_s"), calls
    peak = _value(result, "peak_rss_gb")
    if timed_calls is None and result.outcome.value == "OK" and latency and float(latency) < remeasure_below_s:
        again = execute(_request(spec, candidate.settings, number, work, [], 2, reference, False), keep)
        if again.outcome.value == "OK":
            latency, repeats = _value(again, "latency_p50_s"), 2
            peak = f"{max(float(peak or 0), float(_value(again, 'peak_rss_gb') or 0)):.6g}"
    if quality_from is not None:
        row = quality_from.get(_key(setting, names), {})
        scores = [row.get(name, "") for name in quality_names]
    else:
        scores = [_value(result, name) for name in quality_names]
    return [
        *cells,
        result.outcome.value,
        (result.reason or "").replace("\n", " ")[:300],
        latency if result.outcome.value == "OK" else "",
        str(repeats),
        peak,
        *scores,
        *(_value(result, name) for name in definition.structure),
    ]


def _key(setting: dict[str, Any], names: list[str]) -> str:
    return "|".join(str(setting[n]) for n in names)


def _done_keys(path: Path, names: list[str]) -> set[str]:
    if not path.exists():
        return set()
    with path.open(newline="") as handle:
        return {"|".join(row[n] for n in names) for row in csv.DictReader(handle)}


def _quality_rows(table: str, names: list[str], source: Path | None = None) -> dict[str, dict[str, str]]:
    source = source or table_path(table, 1)
    if not source.exists():
        raise SystemExit(f"{source} is missing: measure the 1-thread table first (it holds the quality)")
    with source.open(newline="") as handle:
        return {"|".join(row[n] for n in names): row for row in csv.DictReader(handle)}


def _write_sidecar(
    table: str,
    threads: int,
    onednn: bool,
    started: float,
    load: dict[str, Any],
    settings: int,
    timed_calls: int | None = None,
    fresh: bool = False,
) -> None:
    """Write the table's JSON sidecar. ``load``: the 1-minute load average ``before`` the run (all three) and its
    ``peak`` seen after each row; ``fresh``: this run measured the CSV from its first row (the runs recorded
    before measured another table and are dropped)."""
    sidecar = table_path(table, threads, onednn).with_suffix(".json")
    previous = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    runs = [] if fresh else previous.get("runs", [])
    if timed_calls:  # a rebuild under this protocol: the runs of an earlier protocol measured another table
        runs = [run for run in runs if run.get("timed_calls") == timed_calls]
    peak = {"load_average_1min_peak": round(load["peak"], 2), **({"timed_calls": timed_calls} if timed_calls else {})}
    runs.append(run_record(started, load["before"], **peak))
    kept = {key: value for key, value in previous.items() if key in KEPT_SIDECAR_KEYS}
    head = sidecar_head(table, settings, hardware_name(threads, onednn), threads, onednn, cpu_model())
    body = {
        **head,
        "quality_measured_here": (threads, onednn) == (1, True),
        "remeasure_below_s": None if timed_calls else TABLES[table].remeasure_below_s,
        **({"timed_calls": timed_calls} if timed_calls else {}),
        "peak_rss_per_setting": True,
        "runs": runs,
        **kept,
    }
    sidecar.write_text(json.dumps(body, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the 'hardware type')")
    parser.add_argument(
        "--no-onednn",
        action="store_true",
        help="measure with torch's oneDNN backend off (bf16 without its fast kernels: an fp32-only host)",
    )
    parser.add_argument("--limit", type=int, default=None, help="measure at most this many new settings")
    parser.add_argument(
        "--timed-calls", type=int, default=None, help="every setting's latency: the median of this many timed calls"
    )
    parser.add_argument(
        "--rebuild", action="store_true", help="measure the table again (its quality kept; see measure_table)"
    )
    args = parser.parse_args(argv)
    path = measure_table(
        args.table, args.threads, args.limit, not args.no_onednn, timed_calls=args.timed_calls, rebuild=args.rebuild
    )
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
