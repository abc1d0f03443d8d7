"""The export rule: a spec's ``export:`` checked at validate, the knee when the spec says nothing, the spec's
rule used by ``tuner run``'s best.yaml, ``tuner export`` without options and the MLflow ``tuner.chosen``
tag; the command line overrides; every export names the rule that chose it.

The end-to-end study runs FakeWorkload (SIMULATED: it sleeps ``sleep_s`` and adds ``noise`` to its
video) over five settings where speed costs quality: the fastest is the noisiest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tuner.front.choice import front_of
from tuner.ship.export import choose
from tuner.spec.loading import parse_spec
from tuner.storage.records import TrialRecord, record_feasible
from tuner.tracking.run_info import StudyRunInfo
from tuner.tracking.views import CHOSEN_TAG, chosen_view

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
DEMO = "".join(
    line
    for line in (ROOT / "search_spaces" / "avatar_demo.yaml").read_text().splitlines(keepends=True)
    if not line.startswith("export:")
)  # the demo without its own rule: each test gives one


def with_export(block: str) -> str:
    return DEMO + block + "\n"


@pytest.mark.parametrize(
    "block, problem",
    [
        (
            'export: {policy: "minimize latency_p50_s subject to stlpips_alex <= -0.1"}',
            "export.policy: stlpips_alex <= -0.1 is impossible: stlpips_alex lies in [0, inf)",
        ),
        (
            'export: {policy: "minimize latency_p50_s subject to ssim >= 1.5"}',
            "export.policy: ssim >= 1.5 is impossible",
        ),
        (
            'export: {policy: "minimize latency_p50_s subject to psnr_db >= 30 and psnr_db < 20"}',
            "psnr_db >= 30 and psnr_db < 20 exclude each other",
        ),
        (
            'export: {policy: "minimize latency_p50_s subject to sharpness <= 1"}',
            "export.policy: unknown metric 'sharpness'",
        ),
        ('export: {policy: "minimize nosuch_s"}', "export.policy: unknown metric 'nosuch_s'"),
        ('export: {policy: "fastest please"}', "export: policy 'fastest please' is not understood"),
        ("export: {policy: knee, profile: fast}", "export: give policy or profile, not both"),
        ("export: {profile: speedy}", "export.profile: Input should be 'fast', 'balanced' or 'quality'"),
    ],
)
def test_a_wrong_export_rule_is_one_line_naming_file_line_and_key(block: str, problem: str, tmp_path: Path) -> None:
    spec = tmp_path / "ruled.yaml"
    spec.write_text(with_export(block))
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "validate", str(spec), "--spec-only"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert done.returncode == 2, done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {spec}:{DEMO.count(chr(10)) + 1}:"), done.stderr
    assert problem in lines[0], lines[0]


def test_a_policy_metric_is_computed_for_every_trial_and_the_rule_names_its_source() -> None:
    spec = parse_spec(with_export('export: {policy: "minimize latency_p50_s subject to lpips_alex <= 0.05"}'))
    assert "lpips_alex" in spec.used_metrics, "a quality metric only the policy names is still computed"
    assert (
        spec.export_rule.describe() == "minimize latency_p50_s subject to lpips_alex <= 0.05 (the spec's export rule)"
    )
    assert parse_spec(DEMO).export_rule.describe().startswith("knee (default")


def _trial(study: optuna.Study, latency: float, distance: float, role: str = "search") -> None:
    metrics = {
        "latency_p50_s": {"value": latency, "unit": "s", "direction": "minimize"},
        "stlpips_alex": {"value": distance, "unit": "1", "direction": "minimize"},
    }
    study.add_trial(
        optuna.trial.create_trial(
            params={},
            distributions={},
            values=[latency, distance],
            user_attrs={"measured": True, "outcome": "OK", "role": role, "metrics": metrics},
        )
    )


def test_without_a_rule_the_export_is_the_knee_never_an_end_of_the_front() -> None:
    study = optuna.create_study(directions=["minimize", "minimize"])
    study.set_user_attr("objectives", ["latency_p50_s", "stlpips_alex"])
    for latency, distance in [(8.0, 0.0), (0.05, 0.20), (0.5, 0.012), (1.0, 0.009), (0.2, 0.08), (3.0, 0.004)]:
        _trial(study, latency, distance)
    chosen = choose(study)
    assert (chosen.record.number, chosen.policy) == (2, "knee")
    assert chosen.rule == "knee (default: the spec has no export rule)"
    assert choose(study, objective="latency_p50_s").record.number == 1, "the fastest, asked for by name"
    assert choose(study, profile="quality").rule == "profile quality (command line)"


def test_the_mlflow_study_run_marks_the_trial_the_rule_chooses() -> None:
    spec = parse_spec(with_export('export: {policy: "minimize latency_p50_s subject to stlpips_alex <= 0.01"}'))
    study = optuna.create_study(directions=["minimize", "minimize"])
    for latency, distance in [(8.0, 0.0), (0.05, 0.20), (0.5, 0.012), (1.0, 0.009), (3.0, 0.004)]:
        _trial(study, latency, distance)
    records = [TrialRecord.from_trial(t) for t in study.trials]
    info = StudyRunInfo(
        "s",
        "avatar_demo @ cpu",
        {},
        {},
        ("latency_p50_s", "stlpips_alex"),
        ("minimize", "minimize"),
        export_rule=spec.export_rule,
    )
    assert chosen_view(records, info) == (
        3,
        "trial 3 by minimize latency_p50_s subject to stlpips_alex <= 0.01 (the spec's export rule)",
    )
    strict = StudyRunInfo(
        "s",
        "e",
        {},
        {},
        info.objective_names,
        info.directions,
        export_rule=parse_spec(
            with_export('export: {policy: "minimize latency_p50_s subject to stlpips_alex < 0.0001"}')
        ).export_rule,
    )
    number, tag = chosen_view(records, strict)
    assert number == 0 and tag.startswith("trial 0 by"), "the reference (distance 0) satisfies any bound"
    assert CHOSEN_TAG == "tuner.chosen"


SPEC: dict[str, Any] = {
    "name": "ruled",
    "description": "Speed against quality: the fastest setting is the noisiest (SIMULATED).",
    "workload": {"class": "tuner.workloads.fake:FakeWorkload", "timeout_s": 60, "device": "cpu"},
    "inputs": {"note": "simulated"},
    "parameters": {"q": {"type": "categorical", "choices": [0, 1, 2, 3, 4]}},
    "derived": {"sleep_s": "0.01 + 0.03 * q", "noise": "48 - 12 * q"},
    "objectives": [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ],
    "reference": {"q": 4},
    "baseline": {"q": 2},
    "measurement": {"warmup": 0, "min_repeats": 3, "max_repeats": 3},
    "sampler": {"name": "grid"},
    "budget": {"trials": 5},
    "export": {"policy": "minimize latency_p50_s subject to ssim >= 0.7"},
}


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**ENV, "COLUMNS": "80"},
    )


@pytest.mark.slow
def test_best_yaml_and_export_follow_the_spec_rule_and_name_it(tmp_path: Path) -> None:
    (tmp_path / "ruled.yaml").write_text(yaml.safe_dump(SPEC, sort_keys=False))
    done = tuner("run", "ruled.yaml", "--study-name", "r", "--no-mlflow", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    study = optuna.load_study(study_name="r", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
    records = [TrialRecord.from_trial(t) for t in study.trials]
    feasible = [r for r in records if record_feasible(r)]
    allowed = [r for r in feasible if (r.metric_value("ssim") or 0.0) >= 0.7]
    assert allowed and len(allowed) < len(feasible), [(r.params, r.metric_value("ssim")) for r in feasible]
    expected = min(allowed, key=lambda r: (r.metric_value("latency_p50_s"), r.number))
    best = yaml.safe_load((tmp_path / "studies" / "r" / "best.yaml").read_text())
    rule = "minimize latency_p50_s subject to ssim >= 0.7 (the spec's export rule)"
    assert best["provenance"]["trial"] == expected.number and best["selection"]["rule"] == rule
    fastest = min(front_of(feasible, ["minimize", "maximize"]), key=lambda r: r.metric_value("latency_p50_s") or 0)
    assert expected.number != fastest.number, "the rule keeps the noisiest setting out"
    assert f"chosen by {rule}: trial {expected.number}" in " ".join(done.stdout.split())
    assert f"* chosen: trial {expected.number} by" in done.stdout and max(map(len, done.stdout.splitlines())) <= 80
    again = tuner("export", "r", "-o", "again.yaml", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert yaml.safe_load((tmp_path / "again.yaml").read_text())["provenance"]["trial"] == expected.number
    fast = tuner("export", "r", "--profile", "fast", "-o", "fast.yaml", cwd=tmp_path)
    document = yaml.safe_load((tmp_path / "fast.yaml").read_text())
    assert fast.returncode == 0 and document["provenance"]["trial"] == fastest.number, fast.stderr
    assert document["selection"]["rule"] == "profile fast (command line)"
