"""Cost of the MLflow views of a study: building the front artifacts, and a full rebuild.

Runs a study of the simulated FakeWorkload (no MLflow while it runs), then measures on this
machine, in one run:

1. ``build_front_views`` (pairwise PNGs, Plotly page, hypervolume, curve, tables): the
   cost of one front refresh, median of 3, and the artifact sizes;
2. ``tuner sync-mlflow`` into a fresh local SQLite store: seconds per trial (every
   child run, rank, sample artifacts, then the front);
3. a second sync into the same store (nothing to log, ranks only): seconds per trial.

Usage: ``python bench/mlflow_views.py [--trials 30]``: raw figures to ``bench/results/mlflow_views.json``;
``--report`` prints the same table from them and measures nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import raw_results
from raw_results import provenance

ROOT = Path(__file__).resolve().parents[1]


def measure(trials: int) -> dict[str, Any]:
    """One study of ``trials`` FakeWorkload trials, then the three timings (seconds) and the artifact sizes."""
    from tuner.storage.records import TrialRecord
    from tuner.study.studies import load_study
    from tuner.tracking.run_info import study_run_info
    from tuner.tracking.sync import sync_study
    from tuner.tracking.views import build_front_views

    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="tuner-bench-views-") as folder:
        cwd = Path(folder)
        env = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tuner",
                "run",
                str(ROOT / "tests" / "specs" / "fake_ok.yaml"),
                "--study-name",
                "bench",
                "--trials",
                str(trials),
                "--no-mlflow",
            ],
            cwd=cwd,
            env=env,
            check=True,
            capture_output=True,
        )
        os.chdir(cwd)
        try:
            opened = load_study(f"sqlite:///{cwd / 'studies' / 'studies.db'}", "bench")
            records = [TrialRecord.from_trial(t) for t in opened.study.get_trials()]
            info = study_run_info(opened.study, opened.spec, opened.storage_url)
            build_front_views(records, info)  # imports (matplotlib, plotly) are a one-off
            times = []
            for _ in range(3):
                started = time.perf_counter()
                views = build_front_views(records, info)
                times.append(time.perf_counter() - started)
            uri = f"sqlite:///{cwd / 'mlflow' / 'mlflow.db'}"
            (cwd / "mlflow").mkdir()
            started = time.perf_counter()
            synced = sync_study(opened, uri)
            first = time.perf_counter() - started
            started = time.perf_counter()
            sync_study(opened, uri)
            second = time.perf_counter() - started
        finally:
            os.chdir(here)
    return {
        "trials_recorded": len(records),
        "front_size": synced.front_size,
        "front_refresh_s": times,
        "artifact_bytes": {name: len(content) for name, content in views.artifacts.items()},
        "sync_fresh_s": first,
        "sync_again_s": second,
    }


def report_lines(result: dict[str, Any]) -> list[str]:
    """The table docs/benchmarks.md quotes, from one run's figures (measured now or read back)."""
    sizes, trials = result["artifact_bytes"], result["trials_recorded"]
    first, second = result["sync_fresh_s"], result["sync_again_s"]
    return [
        provenance(result),
        "",
        f"{trials} trials recorded, {result['front_size']} on the front",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| front refresh (`build_front_views`) | {statistics.median(result['front_refresh_s']):.2f} s "
        f"(median of {len(result['front_refresh_s'])}) |",
        f"| front artifacts | {sum(sizes.values()) / 1e6:.2f} MB in {len(sizes)} files, "
        f"{sizes['front.html'] / 1e6:.2f} MB of it `front.html` (plotly.js embedded for offline use) |",
        f"| sync-mlflow into a fresh store | {1000 * first / trials:.0f} ms/trial ({first:.1f} s) |",
        f"| sync-mlflow again (ranks only) | {1000 * second / trials:.0f} ms/trial ({second:.1f} s) |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    raw_results.main(parser, "mlflow_views.py", lambda args: measure(args.trials), report_lines)


if __name__ == "__main__":
    main()
