"""An exhaustive table measured with a drift anchor: the host's speed, timed beside the rows, divided out.

The 1-thread tables are measured over 40-60 minutes on a shared 2-core host whose speed drifts: a flexible
model's residuals along the build order (the settings are visited in a seeded random order, so neighbours in
the CSV are unrelated settings) correlate 0.46 (Omni) and 0.47 (Wan) from one row to the next, and the
settings measured again within one minute agree with each other far better than with the table (issue 38,
docs/benchmarks.md, "A table measured against a drift anchor"). This build measures the same rows in the same
order and protocol as ``build_tables.py --rebuild --timed-calls N`` (quality taken over from the 1-thread
table: seeded, deterministic outputs), and every ``--anchor-every`` rows one fixed *anchor* setting the same
way. Files, beside the tables (``<table>.cpu1t-anchored.*``):

* ``.raw.csv`` -- the rows as measured (the raw latency; a run that stops resumes where it left off), itself a
  table the replay reads (hardware type ``cpu1t-anchored-raw``: the same build without the correction);
* ``.anchors.csv`` -- each anchor measurement: ``after_rows`` (table rows measured before it), its latency;
* ``.csv`` -- the table the replay reads (``--finish``): each row's ``latency_p50_s`` and cost-structure seconds
  multiplied by ``median(anchor) / anchor(row)``, where ``anchor(row)`` interpolates, in log, the anchors
  (each the running median of :data:`SMOOTHING` anchor measurements) just before and just after the row (the raw figures stay in ``.raw.csv``, same rows, same order).
  Memory and quality are not scaled.

The correction assumes a drift that scales every setting alike over a few rows; ``bench/tables/table_drift.py``
(the residuals' correlation along the build order, corrected and raw) and ``bench/tables/remeasure.py omni_tiny
--front --csv bench/tables/omni_tiny.cpu1t-anchored.csv`` check it.

Usage: ``python bench/tables/anchored_build.py omni_tiny --timed-calls 3 --anchor-every 6`` then
``python bench/tables/anchored_build.py omni_tiny --finish``; the Wan table: ``wan_tiny --timed-calls 3
--anchor-every 3``, then ``wan_tiny --finish --smoothing 1``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import build_tables
from table_definitions import TABLE_DIR, TABLES, settings_of
from table_sidecar import run_record, sidecar_head

HARDWARE = "cpu1t-anchored"
ANCHORS: dict[str, dict[str, Any]] = {
    "wan_tiny": {
        "num_frames": 5,
        "height": 64,
        "width": 64,
        "num_inference_steps": 6,
        "guidance_scale": 5.0,
        "scheduler": "unipc",
        "cache": "none",
        "cache_threshold": 0.1,
        "vae_tiling": False,
        "batch_size": 1,
        "precision": "bf16",
        "attention_backend": "native",
    },
    "omni_tiny": {
        "video_fps": 2.0,
        "max_frames": 8,
        "max_pixels": 12544,
        "audio_seconds": 2.0,
        "max_new_tokens": 8,
        "num_beams": 1,
        "use_cache": True,
        "batch_size": 1,
        "attn_implementation": "sdpa",
        "precision": "bf16",
    },
}
"""The anchor setting per table: near the middle of the table's latencies (about 0.2 s on both), cheap to repeat."""
SMOOTHING = 9
"""Anchors in the running median that stands for the host's speed (9 x 6 rows: about two minutes of the build).
Chosen on the Omni build by the median leave-one-out residual of the corrected table (``table_drift.py``'s
model): 1 anchor 5.5 %, 3: 5.0 %, 5: 4.7 %, 9: 4.3 %, 15: 4.5 %, 25: 4.4 %, 51: 4.7 %; raw 5.0 % (issue 38 notes).
The Wan build (an anchor every 3 rows, a faster drift that night) by the same test: 1: 7.3 %, 3: 7.5 %, 5: 7.9 %,
9: 8.1 %, 15: 8.3 %, 25: 8.7 %; raw 11.3 %: ``--smoothing 1`` (the sidecar's ``smoothing_anchors``)."""


def paths(table: str) -> dict[str, Path]:
    """The raw rows, the anchors, the corrected table and its sidecar of ``table``."""
    stem = f"{table}.{HARDWARE}"
    return {
        "raw": TABLE_DIR / f"{stem}.raw.csv",
        "anchors": TABLE_DIR / f"{stem}.anchors.csv",
        "table": TABLE_DIR / f"{stem}.csv",
        "sidecar": TABLE_DIR / f"{stem}.json",
        "raw_sidecar": TABLE_DIR / f"{stem}.raw.json",
    }


def measure(table: str, timed_calls: int, anchor_every: int, limit: int | None) -> None:
    """Measure (or resume) the raw rows and their anchors (see the module docstring)."""
    os.environ["TUNER_TORCH_THREADS"] = "1"
    from tuner.spec.loading import load_spec

    definition = TABLES[table]
    spec = load_spec(definition.spec_path)
    names, settings = settings_of(definition)
    random.Random(0).shuffle(settings)  # build_tables' order
    anchor = next(s for s in settings if all(s[k] == v for k, v in ANCHORS[table].items()))
    where = paths(table)
    quality_from = build_tables._quality_rows(table, names)
    columns = [
        *names,
        *("outcome", "reason", "latency_p50_s", "latency_repeats", "peak_rss_gb"),
        *definition.quality,
        *definition.structure,
    ]
    done = build_tables._done_keys(where["raw"], names)
    keep: dict[str, Any] = {}
    started, load_before = time.time(), os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        references: dict[str, Path] = {}

        def row_of(setting: dict[str, Any], number: int) -> list[str]:
            reference = build_tables._reference_for(spec, setting, work, [], keep, references)
            return build_tables._measure_row(
                spec, setting, names, number, work, [], reference, keep, quality_from, definition, timed_calls
            )

        new_raw, new_anchors = not where["raw"].exists(), not where["anchors"].exists()
        with where["raw"].open("a", newline="") as raw, where["anchors"].open("a", newline="") as anchors:
            rows, marks = csv.writer(raw), csv.writer(anchors)
            if new_raw:
                rows.writerow(columns)
            if new_anchors:
                marks.writerow(["after_rows", "unix_s", "latency_p50_s"])
            measured = 0
            for number, setting in enumerate(settings, start=1):
                key = build_tables._key(setting, names)
                if key in done:
                    continue
                if limit is not None and measured >= limit:
                    break
                if (len(done) + measured) % anchor_every == 0:
                    _anchor(marks, anchors, row_of(anchor, 0), len(done) + measured, columns)
                rows.writerow(row_of(setting, number))
                raw.flush()
                measured += 1
                if measured % 50 == 0:
                    print(f"{table} {HARDWARE}: {len(done) + measured}/{len(settings)}", flush=True)
            _anchor(marks, anchors, row_of(anchor, 0), len(done) + measured, columns)
    _write_sidecar(table, timed_calls, anchor_every, started, load_before, len(settings))


def _anchor(writer: Any, handle: Any, cells: list[str], after_rows: int, columns: list[str]) -> None:
    latency = dict(zip(columns, cells, strict=False))["latency_p50_s"]
    writer.writerow([after_rows, round(time.time(), 1), latency])
    handle.flush()


def _write_sidecar(
    table: str, timed_calls: int, anchor_every: int, started: float, load_before: tuple[float, ...], settings: int
) -> None:
    where = paths(table)
    previous = json.loads(where["sidecar"].read_text()) if where["sidecar"].exists() else {}
    runs = [*previous.get("runs", []), run_record(started, load_before)]
    base = json.loads(build_tables.table_path(table, 1).with_suffix(".json").read_text())
    sidecar = {
        **sidecar_head(table, settings, HARDWARE, 1, True, base.get("cpu")),
        "quality_measured_here": False,
        "remeasure_below_s": None,
        "timed_calls": timed_calls,
        "peak_rss_per_setting": True,
        "anchor": {"setting": ANCHORS[table], "every_rows": anchor_every},
        "runs": runs,
        **({"trial_overhead_s": base["trial_overhead_s"]} if "trial_overhead_s" in base else {}),
    }
    where["sidecar"].write_text(json.dumps(sidecar, indent=2) + "\n")


def anchor_at(anchors: list[tuple[int, float]], position: float) -> float:
    """The anchor's latency (s) at ``position`` (rows measured before the row, plus one half): the log-linear
    interpolation of the anchors measured just before and just after it (the nearest one past either end)."""
    before = [a for a in anchors if a[0] <= position]
    after = [a for a in anchors if a[0] > position]
    if not before:
        return after[0][1]
    if not after:
        return before[-1][1]
    (p0, v0), (p1, v1) = before[-1], after[0]
    share = (position - p0) / (p1 - p0)
    return math.exp((1 - share) * math.log(v0) + share * math.log(v1))


def smoothed(anchors: list[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """Each anchor's latency replaced by the median of the ``window`` anchors centred on it (fewer at the ends):
    one anchor measurement's own noise (a few %) is not the host's drift."""
    values = [v for _, v in anchors]
    half = window // 2
    return [(p, statistics.median(values[max(0, i - half) : i + half + 1])) for i, (p, _) in enumerate(anchors)]


def finish(table: str, window: int = SMOOTHING) -> None:
    """Write the corrected table (see the module docstring) and print how far the correction moved the rows."""
    definition = TABLES[table]
    where = paths(table)
    with where["anchors"].open(newline="") as handle:
        anchors = smoothed([(int(r["after_rows"]), float(r["latency_p50_s"])) for r in csv.DictReader(handle)], window)
    typical = statistics.median(v for _, v in anchors)
    with where["raw"].open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields = list(reader.fieldnames or [])
        raw_rows = list(reader)
    scaled = ("latency_p50_s", *definition.structure)
    out_fields = fields
    factors = []
    with where["table"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, out_fields)
        writer.writeheader()
        for index, row in enumerate(raw_rows):
            factor = typical / anchor_at(anchors, index + 0.5)
            for name in scaled:
                if row.get(name):
                    row[name] = f"{float(row[name]) * factor:.6g}"
            if row["outcome"] == "OK":
                factors.append(factor)
            writer.writerow(row)
    sidecar = {**json.loads(where["sidecar"].read_text()), "smoothing_anchors": window}
    where["sidecar"].write_text(json.dumps(sidecar, indent=2) + "\n")
    where["raw_sidecar"].write_text(json.dumps({**raw_of(sidecar), "hardware": f"{HARDWARE}-raw"}, indent=2) + "\n")
    spread = sorted(abs(f - 1) for f in factors)
    print(
        f"{table} {HARDWARE}: {len(raw_rows)} rows, {len(anchors)} anchors (median {typical:.4f} s, "
        f"{min(v for _, v in anchors):.4f}-{max(v for _, v in anchors):.4f}); |factor - 1| median "
        f"{statistics.median(spread):.1%}, p90 {spread[int(0.9 * len(spread))]:.1%}"
    )


def raw_of(sidecar: dict[str, Any]) -> dict[str, Any]:
    """The raw table's sidecar: the corrected one's, less what only the correction used."""
    return {key: value for key, value in sidecar.items() if key != "smoothing_anchors"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=sorted(ANCHORS))
    parser.add_argument("--timed-calls", type=int, default=3)
    parser.add_argument("--anchor-every", type=int, default=6, help="rows between two anchor measurements")
    parser.add_argument("--limit", type=int, default=None, help="measure at most this many new rows")
    parser.add_argument("--finish", action="store_true", help="write the corrected table from the raw one")
    parser.add_argument("--smoothing", type=int, default=SMOOTHING, help="anchors in the running median")
    args = parser.parse_args(argv)
    if args.finish:
        finish(args.table, args.smoothing)
    else:
        measure(args.table, args.timed_calls, args.anchor_every, args.limit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
