"""``tuner export`` and ``tuner front`` on real studies: policies, profiles, schema round trip, invocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from tuner.pareto import front_trials, is_measured_feasible
from tuner.ship.config_schema import load_config, validate_config

SPECS = Path(__file__).parents[1] / "specs"
ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}


def tuner(*args: str, cwd: Path, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV
    )


def load(cwd: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{cwd / 'studies' / 'studies.db'}")


def metric(trial: optuna.trial.FrozenTrial, name: str) -> float:
    return float(trial.user_attrs["metrics"][name]["value"])


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("export")
    done = tuner("run", str(SPECS / "fake_ok.yaml"), "--study-name", "e", "--trials", "10", "--no-mlflow", cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return cwd


@pytest.mark.slow
def test_policy_export_round_trips_and_carries_what_production_needs(study_dir: Path) -> None:
    out = study_dir / "policy.yaml"
    policy = "minimize latency_p50_s subject to psnr_db >= 30 and latency_cv <= 0.5"
    done = tuner("export", "e", "--policy", policy, "-o", str(out), cwd=study_dir)
    assert done.returncode == 0, done.stderr
    study = load(study_dir, "e")
    allowed = [  # a figure a trial lacks excludes it (one repeat past a latency ceiling: no latency_cv)
        t
        for t in study.trials
        if is_measured_feasible(t)
        and None not in (t.user_attrs["metrics"]["psnr_db"]["value"], t.user_attrs["metrics"]["latency_cv"]["value"])
        and metric(t, "psnr_db") >= 30
        and metric(t, "latency_cv") <= 0.5
    ]
    expected = min(allowed, key=lambda t: (metric(t, "latency_p50_s"), t.number))

    text = out.read_text()
    document = yaml.safe_load(text)
    assert validate_config(document).to_document() == document, "the YAML round-trips through its schema"
    assert load_config(out).provenance.trial == expected.number
    assert document["schema"] == "tuner.config/v1" and document["selection"]["policy"] == policy
    assert document["params"] == expected.params
    request = json.loads((study_dir / "studies" / "e" / f"trial_{expected.number:05d}" / "request.json").read_text())
    assert document["invocation"]["kind"] == "python"
    assert document["invocation"]["kwargs"] == request["settings"], "kwargs are what the worker ran"
    assert document["spread"]["latency_p50_s"] == metric(expected, "latency_p50_s")
    assert document["spread"]["latency_p95_s"] == metric(expected, "latency_p95_s")
    assert document["spread"]["latency_cv"] == metric(expected, "latency_cv")
    baseline = next(t for t in study.trials if t.user_attrs.get("role") == "baseline")
    comparison = document["baseline"]["comparison"]
    assert comparison["speed_metric"] == "latency_p50_s"
    assert comparison["speedup"] == pytest.approx(metric(baseline, "latency_p50_s") / metric(expected, "latency_p50_s"))
    assert comparison["quality_delta"]["psnr_db"]["delta"] == pytest.approx(
        metric(expected, "psnr_db") - metric(baseline, "psnr_db")
    )
    assert document["gpu"] == study.user_attrs["fingerprint"] and document["gpu"]["gpu_type"] == "cpu"
    provenance = document["provenance"]
    assert provenance["study"] == "e" and provenance["spec_hash"] == study.user_attrs["spec_hash"]
    assert provenance["measured_at"] and provenance["exported_at"].endswith("Z")
    assert document["check"]["spec_yaml"] == study.user_attrs["spec_yaml"]
    assert document["check"]["baseline"] == baseline.params


@pytest.mark.slow
def test_profiles_and_knee_come_from_the_front(study_dir: Path) -> None:
    study = load(study_dir, "e")
    front = front_trials(study.trials, ["minimize", "maximize"])
    chosen = {}
    for profile in ("fast", "balanced", "quality"):
        done = tuner("export", "e", "--profile", profile, cwd=study_dir)
        assert done.returncode == 0, done.stderr
        document = yaml.safe_load((study_dir / "studies" / "e" / f"{profile}.yaml").read_text())
        assert document["selection"]["profile"] == profile and document["selection"]["on_front"]
        chosen[profile] = document["provenance"]["trial"]
    by_number = {t.number: t for t in front}
    assert set(chosen.values()) <= set(by_number)
    assert metric(by_number[chosen["fast"]], "latency_p50_s") == min(metric(t, "latency_p50_s") for t in front)
    assert metric(by_number[chosen["quality"]], "psnr_db") == max(metric(t, "psnr_db") for t in front)
    knee = tuner("export", "e", "--policy", "knee", "-o", str(study_dir / "knee.yaml"), cwd=study_dir)
    assert knee.returncode == 0, knee.stderr
    assert yaml.safe_load((study_dir / "knee.yaml").read_text())["provenance"]["trial"] == chosen["balanced"]
    lexicographic = tuner(
        "export",
        "e",
        "--policy",
        "lexicographic max psnr_db, latency_p50_s",
        "-o",
        str(study_dir / "lex.yaml"),
        cwd=study_dir,
    )
    assert lexicographic.returncode == 0, lexicographic.stderr
    feasible = [t for t in study.trials if is_measured_feasible(t)]
    best = min(feasible, key=lambda t: (-metric(t, "psnr_db"), metric(t, "latency_p50_s"), t.number))
    assert yaml.safe_load((study_dir / "lex.yaml").read_text())["provenance"]["trial"] == best.number

    table = tuner("front", "e", cwd=study_dir)
    assert table.returncode == 0, table.stderr
    assert f"{len(front)} on the front of" in " ".join(table.stdout.split())
    listed = {
        line.lstrip("* ").split()[1] for line in table.stdout.splitlines() if line.lstrip("* ").startswith("trial ")
    }
    assert {str(t.number) for t in front} <= listed, table.stdout


@pytest.mark.slow
def test_bad_policies_are_one_clear_line(study_dir: Path) -> None:
    cases = {
        "fastest please": "is not understood",
        "minimize latency_p50_s subject to psnr_db >> 3": "condition",
        "minimize latency_p50_s subject to psnr_db >= 1000": "none of the",
        "minimize no_such_metric": "no_such_metric",
    }
    for policy, message in cases.items():
        done = tuner("export", "e", "--policy", policy, cwd=study_dir)
        assert done.returncode == 2 and message in " ".join(done.stderr.split()) and "Traceback" not in done.stderr, (
            policy,
            done.stderr,
        )
    both = tuner("export", "e", "--policy", "knee", "--profile", "fast", cwd=study_dir)
    assert both.returncode == 2 and "choose one of" in both.stderr


@pytest.mark.slow
def test_a_study_without_a_feasible_trial_gives_a_clear_error(tmp_path: Path) -> None:
    spec = tmp_path / "never.yaml"
    spec.write_text(
        (SPECS / "fake_grid.yaml")
        .read_text()
        .replace("{metric: psnr_db, min: 15}", "{metric: psnr_db, min: 1000}")
        .replace("trials: 6", "trials: 3")
    )
    assert tuner("run", str(spec), "--study-name", "never", "--no-mlflow", cwd=tmp_path).returncode == 0
    done = tuner("export", "never", "--policy", "knee", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no feasible measured trial" in " ".join(done.stderr.split()) and "3 trials recorded" in " ".join(
        done.stderr.split()
    ), done.stderr


@pytest.mark.slow
def test_command_workload_export_is_exactly_the_argv_the_runner_used(tmp_path: Path) -> None:
    script = "import sys; open('answer.txt', 'w').write(' '.join(sys.argv[1:]))"
    spec = {
        "name": "echo_command",
        "workload": {
            "timeout_s": 60,
            "device": "cpu",
            "command": {
                "argv": [
                    sys.executable,
                    "-c",
                    script,
                    "--steps",
                    "{steps}",
                    {"flag": "--fast", "when": "fast"},
                    "--label",
                    "{label}",
                ],
                "outputs": {"text": "answer.txt"},
            },
        },
        "parameters": {
            "steps": {"type": "int", "low": 1, "high": 4},
            "fast": {"type": "bool"},
            "label": {"type": "categorical", "choices": ["two words", "semi;colon $(x)"]},
        },
        "objectives": [{"metric": "latency_p50_s", "direction": "minimize"}],
        "measurement": {"warmup": 0, "min_repeats": 2, "max_repeats": 2},
        "sampler": {"name": "random"},
        "budget": {"trials": 4},
    }
    (tmp_path / "echo.yaml").write_text(yaml.safe_dump(spec))
    done = tuner("run", str(tmp_path / "echo.yaml"), "--study-name", "echo", "--no-mlflow", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    exported = tuner(
        "export", "echo", "--policy", "minimize latency_p50_s", "-o", str(tmp_path / "echo_out.yaml"), cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    document = load_config(tmp_path / "echo_out.yaml").to_document()
    trial = load(tmp_path, "echo").trials[document["provenance"]["trial"]]
    assert document["invocation"]["kind"] == "command"
    assert document["invocation"]["argv"] == trial.user_attrs["invocation"]["argv"]
    assert document["invocation"]["argv"][4] == str(trial.params["steps"])
    assert ("--fast" in document["invocation"]["argv"]) == trial.params["fast"]
