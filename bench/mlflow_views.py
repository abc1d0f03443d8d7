"""Cost of the MLflow views of a study: building the front artifacts, and a full rebuild.

Runs a study of the simulated FakeWorkload (no MLflow while it runs), then measures on this
machine, in one run:

1. ``build_front_views`` (pairwise PNGs, Plotly page, hypervolume, curve, tables): the
   cost of one front refresh, median of 3, and the artifact sizes;
2. ``tuner sync-mlflow`` into a fresh local SQLite store: seconds per trial (every
   child run, rank, sample artifacts, then the front);
3. a second sync into the same store (nothing to log, ranks only): seconds per trial.

Usage: ``python bench/mlflow_views.py [--trials 30]``.
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

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()
    from tuner.study.records import TrialRecord
    from tuner.study.studies import load_study
    from tuner.tracking.sync import sync_study
    from tuner.tracking.views import build_front_views, study_run_info

    with tempfile.TemporaryDirectory(prefix="tuner-bench-views-") as folder:
        cwd = Path(folder)
        env = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
        subprocess.run([sys.executable, "-m", "tuner", "run", str(ROOT / "tests" / "specs" / "fake_ok.yaml"),
                        "--study-name", "bench", "--trials", str(args.trials), "--no-mlflow"],
                       cwd=cwd, env=env, check=True, capture_output=True)
        os.chdir(cwd)
        opened = load_study(f"sqlite:///{cwd / 'studies' / 'studies.db'}", "bench")
        records = [TrialRecord.from_trial(t) for t in opened.study.get_trials()]
        info = study_run_info(opened)
        build_front_views(records, info)  # imports (matplotlib, plotly) are a one-off
        times = []
        for _ in range(3):
            started = time.perf_counter()
            views = build_front_views(records, info)
            times.append(time.perf_counter() - started)
        uri = f"sqlite:///{cwd / 'mlflow' / 'mlflow.db'}"
        (cwd / "mlflow").mkdir()
        started = time.perf_counter()
        report = sync_study(opened, uri)
        first = time.perf_counter() - started
        started = time.perf_counter()
        sync_study(opened, uri)
        second = time.perf_counter() - started
    sizes = {name: len(content) for name, content in views.artifacts.items()}
    print(f"trials recorded                  : {len(records)} ({report.front_size} on the front)")
    print(f"front refresh (build_front_views): {statistics.median(times):8.3f} s (median of 3)")
    print(f"front artifacts                  : {sum(sizes.values()) / 1e6:8.2f} MB in {len(sizes)} files "
          f"(front.html {sizes['front.html'] / 1e6:.2f} MB: plotly.js embedded)")
    print(f"sync-mlflow, fresh store         : {first:8.2f} s = {1000 * first / len(records):.1f} ms/trial")
    print(f"sync-mlflow, again (ranks only)  : {second:8.2f} s = {1000 * second / len(records):.1f} ms/trial")


if __name__ == "__main__":
    main()
