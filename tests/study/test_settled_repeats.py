"""Repeats stop once the interval settles a trial's place on the front (issue 38, item 3c): with
``sampler.skip_dominated`` a search trial runs with the front's latencies as thresholds, and the worker makes no
further timed call once two calls lie clear of all of them by 5 % -- more repeats could move its p50, not which
front trials it is faster than. The trial stays measured (its quality computed) and says why it has fewer
repeats; a trial with a front latency inside its calls' span is measured in full."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna

from tuner.search.dominance import latency_thresholds
from tuner.spec.loading import parse_spec
from tuner.spec.space import distributions

SPEC = """
name: settle
workload: {class: "tuner.workloads.fake:FakeWorkload", timeout_s: 60}
parameters:
  sleep_s: {type: categorical, choices: [0.02, 0.3]}
  noise: {type: categorical, choices: [0, 30]}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {sleep_s: 0.3, noise: 0}
measurement: {warmup: 1, min_repeats: 4, max_repeats: 4}
budget: {trials: 4}
sampler: {name: grid, skip_dominated: {audit_share: 1.0}}
seed: 0
"""
MIN_REPEATS = 4


def test_the_thresholds_are_the_fronts_latencies_and_none_without_a_latency_objective() -> None:
    spec = parse_spec(SPEC)
    front = [
        optuna.trial.create_trial(
            params={"sleep_s": 0.02, "noise": 0},
            distributions=distributions(spec),
            values=[latency, 40.0],
            user_attrs={"measured": True, "outcome": "OK"},
        )
        for latency in (0.3, 0.02, 0.3)
    ]
    assert latency_thresholds(spec, front) == (0.02, 0.3)
    assert latency_thresholds(spec, []) == ()
    throughput = parse_spec(
        SPEC.replace("latency_p50_s, direction: minimize", "throughput_items_per_s, direction: maximize")
    )
    assert latency_thresholds(throughput, front) == (), "no latency objective: nothing to settle"


def test_a_trial_clear_of_every_front_latency_stops_after_two_calls_and_says_so(tmp_path: Path) -> None:
    import tuner

    spec_path = tmp_path / "settle.yaml"
    spec_path.write_text(SPEC)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    opened = tuner.create_study(spec_path, study_name="s", storage=url, home=tmp_path)
    tuner.run_study(opened, home=tmp_path, use_mlflow=False)
    trials = [t for t in optuna.load_study(study_name="s", storage=url).get_trials() if t.user_attrs.get("measured")]
    assert trials[0].user_attrs["role"] == "reference"
    assert trials[0].user_attrs["metrics"]["repeats"]["value"] == MIN_REPEATS, "the reference: no front yet"
    settled = [t for t in trials if "settled" in t.user_attrs]
    assert any(t.params["sleep_s"] == 0.02 for t in settled), "the first fast trial placed saw only ~0.3 s fronts"
    for trial in settled:
        assert trial.user_attrs["metrics"]["repeats"]["value"] == 2, "two calls clear of every front latency"
        assert trial.user_attrs["metrics"]["psnr_db"]["value"] is not None, "its quality is still computed"
        assert trial.values is not None, "measured, on the sampler's map and eligible for the front"
        assert "no front latency within 5%" in trial.user_attrs["settled"]
    for trial in trials:
        if "settled" not in trial.user_attrs and "past_ceiling" not in trial.user_attrs:
            assert trial.user_attrs["metrics"]["repeats"]["value"] == MIN_REPEATS, "otherwise measured in full"
    status = subprocess.run(
        [sys.executable, "-m", "tuner", "status", "s", "--home", str(tmp_path), "--storage", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    assert "repeats stopped settled" in status.stdout, status.stdout
    show = subprocess.run(
        [sys.executable, "-m", "tuner", "show", "s", str(settled[0].number), "--home", str(tmp_path), "--storage", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert show.returncode == 0, show.stderr
    assert "more could not move its place on the front" in " ".join(show.stdout.split()), show.stdout
