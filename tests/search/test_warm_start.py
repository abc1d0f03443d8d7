"""A warm start from a finished study of the same spec (tuner.search.warm_start): its front first, its memory
evidence as the memory model's prior, and one clear line when the source cannot serve."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
from test_memory_model import SPEC, ScriptedGpuRunner, run, setting

import tuner
from tuner.pareto import front_trials
from tuner.search.warm_start import enqueue_front, load_prior, open_source
from tuner.spec.loading import parse_spec
from tuner.study.studies import create_study, load_study

ROOT = Path(__file__).resolve().parents[2]
FAKE_OK = ROOT / "tests" / "specs" / "fake_ok.yaml"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": "", "COLUMNS": "250"},
    )


def test_the_source_front_runs_first_after_the_reference_and_baseline(tmp_path: Path) -> None:
    home = tmp_path / "studies"
    source = tuner.create_study(FAKE_OK, study_name="src", home=home, trials=5)
    for sleep_s, noise in ((0.01, 10), (0.001, 30), (0.005, 20)):  # faster and noisier: a front of three
        source.study.enqueue_trial({"sleep_s": sleep_s, "noise": noise, "batch_size": 1})
    tuner.run_study(source, home=home, use_mlflow=False)
    directions = [d.name.lower() for d in source.study.directions]
    known = [dict(source.spec.reference or {}), dict(source.spec.baseline or {})]
    expected = [
        dict(t.params)
        for t in sorted(front_trials(source.study.get_trials(), directions), key=lambda t: t.values[0])
        if dict(t.params) not in known
    ]
    assert len(expected) >= 2, expected

    done = cli(
        "run",
        str(FAKE_OK),
        "--study-name",
        "dst",
        "--warm-start",
        "src",
        "--trials",
        str(len(expected) + 3),
        "--no-mlflow",
        "--home",
        str(home),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    trials = optuna.load_study(study_name="dst", storage=f"sqlite:///{home / 'studies.db'}").get_trials()
    assert [t.user_attrs["role"] for t in trials[:2]] == ["reference", "baseline"]
    warm = trials[2 : 2 + len(expected)]
    assert [dict(t.params) for t in warm] == expected, "the other type's front, best latency first"
    assert all(t.user_attrs["warm_start_from"] == "src" and t.user_attrs["role"] == "search" for t in warm)
    assert all(t.user_attrs["outcome"] == "OK" for t in warm)
    assert "warm_start_from" not in trials[-1].user_attrs, "then the sampler's own proposals"
    record = optuna.load_study(study_name="dst", storage=f"sqlite:///{home / 'studies.db'}").user_attrs["warm_start"]
    assert record["study"] == "src" and record["front_enqueued"] == len(expected) and record["dropped"] == 0
    assert record["observations"] == 5 and record["same_storage"]
    said = done.stdout + done.stderr
    assert "predictions: 5 measured trials of 'src' (another GPU type) are evidence" in said, said[-3000:]
    predicted = [t.user_attrs["prediction"]["latency_p50_s"] for t in trials if t.user_attrs.get("prediction")]
    features = 4  # sleep_s, noise, batch_size (a categorical of numbers: its log value), the other-hardware column
    assert predicted and all(p["prior"] is (p["fitted_on"] < features) for p in predicted), predicted
    assert any(p["prior"] for p in predicted), "the source's trials took part until this study had its own"
    status = cli("status", "dst", "--home", str(home), cwd=tmp_path)
    assert "search (warm start)" in status.stdout and "warm start from src" in status.stdout, status.stdout[-3000:]


def test_a_source_that_cannot_serve_is_one_line_and_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "studies"
    tuner.create_study(FAKE_OK, study_name="never_ran", home=home)
    tuner.create_study(ROOT / "tests" / "specs" / "fake_failures.yaml", study_name="other_spec", home=home)
    expected = {
        "nosuch": "error: warm start: no study 'nosuch' in sqlite:///",
        "never_ran": "error: warm start: study 'never_ran' in sqlite:///",
        "other_spec": "error: warm start: study 'other_spec' has other parameters than this spec "
        "(only in 'other_spec': behaviour; only in this spec: batch_size, sleep_s): a warm start "
        "needs the same spec",
    }
    for source, start in expected.items():
        done = cli(
            "run",
            str(FAKE_OK),
            "--study-name",
            f"from_{source}",
            "--warm-start",
            source,
            "--no-mlflow",
            "--home",
            str(home),
            cwd=tmp_path,
        )
        assert done.returncode == 2, (source, done.stdout[-1000:], done.stderr[-1000:])
        assert done.stderr.startswith(start) and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
    assert (
        "has no measured trials"
        in cli("run", str(FAKE_OK), "--warm-start", "never_ran", "--home", str(home), cwd=tmp_path).stderr
    )
    names = {s.study_name for s in optuna.get_all_study_summaries(f"sqlite:///{home / 'studies.db'}")}
    assert names == {"never_ran", "other_spec"}, "nothing was created"


def test_the_prior_comes_from_the_source_and_skips_for_this_host(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    source = create_study(spec, SPEC, url, "h100", "random", None, {"spec_name": spec.name})
    source.study.enqueue_trial(setting(56))  # OOM there
    source.study.enqueue_trial(setting(40))  # 40 GB there
    run(source, tmp_path, ScriptedGpuRunner(), budget=3)
    source.study.set_user_attr("fingerprint", {"gpu_memory_gb": "24"})
    oom = next(t for t in source.study.get_trials() if t.user_attrs.get("outcome") == "OOM")

    opened = create_study(spec, SPEC, url, "here", "random", None, {"spec_name": spec.name})
    enqueue_front(opened.study, opened.spec, opened.storage_url, open_source(url, "h100", spec))
    resumed = load_study(url, "here")  # a resume reads the source again from the study's record
    prior, notes = load_prior(resumed.study, resumed.spec, resumed.storage_url, None)
    assert len(prior) == 3 and sum(o.oom for o in prior) == 1 and not notes
    smaller, notes = load_prior(resumed.study, resumed.spec, resumed.storage_url, 48.0)
    assert len(smaller) == 2 and "1 OOM trial(s) of 'h100' left out" in notes[0], "its GPU had less memory"

    resumed.study.enqueue_trial(setting(64))
    runner = ScriptedGpuRunner()
    run(resumed, tmp_path, runner, budget=3, prior=prior)
    trials = resumed.study.get_trials()
    assert trials[1].params == setting(40) and trials[1].user_attrs["warm_start_from"] == "h100"
    skipped = next(t for t in trials if t.params == setting(64))
    assert skipped.user_attrs["outcome"] == "SKIPPED_PREDICTED_OOM" and setting(64) not in runner.calls
    assert skipped.user_attrs["prediction_witness"] == f"warm_start:h100 trial {oom.number}"


def test_a_prior_behind_credentials_is_not_guessed(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    opened = create_study(spec, SPEC, url, "here", "random", None, {"spec_name": spec.name})
    redacted = "postgresql://tuner:***@db.example/tuner"  # as the record keeps it
    opened.study.set_user_attr("warm_start", {"study": "h100", "storage": redacted, "same_storage": False})
    prior, notes = load_prior(opened.study, opened.spec, opened.storage_url, None)
    assert prior == [] and "needs its credentials again (--warm-start-storage)" in notes[0]
