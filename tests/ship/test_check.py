"""``tuner check``: passes on the build that was tuned, fails when the workload was made slower — also when noisy.

Real processes on the simulated FakeWorkload. Its test hooks: ``TUNER_FAKE_EXTRA_SLEEP_S`` adds
a fixed cost to every run (a regression of the build), ``TUNER_FAKE_LATENCY_CV`` makes every
run's latency noisy (lognormal, mean 1, that coefficient of variation — a noisy machine), and
``TUNER_FAKE_NOISE_SEED`` draws that noise from a seed: the noisy checks see the same simulated
noise on every invocation, so their outcome does not depend on the luck of the draw.

The study is tuned on a quiet machine (baseline sleeps 0.04 s, the exported setting 0.02 s: a
speed-up near 2x, measured from 25 repeats per run). The check then re-measures it
unchanged, or with an extra cost chosen so that the speed-up falls 1.3x.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.results import Metric, Outcome, TrialResult
from tuner.ship.check import _record
from tuner.ship.check_sides import SideMeasurement, quality_drops
from tuner.ship.config_schema import load_config
from tuner.workloads.fake import EXTRA_SLEEP_ENV, LATENCY_CV_ENV, NOISE_SEED_ENV

ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
ENV.pop(EXTRA_SLEEP_ENV, None)
ENV.pop(LATENCY_CV_ENV, None)
ENV.pop(NOISE_SEED_ENV, None)
NOISE_SEED = "20240611"  # the simulated noise of the noisy checks: one fixed draw
SPEC: dict[str, Any] = {
    "name": "fake_check",
    "description": "FakeWorkload at two speeds, for tuner check.",
    "workload": {"class": "tuner.workloads.fake:FakeWorkload", "timeout_s": 60, "device": "cpu"},
    "inputs": {"note": "simulated"},
    "parameters": {
        "sleep_s": {"type": "categorical", "choices": [0.02, 0.04]},
        "noise": {"type": "categorical", "choices": [0, 10]},
    },
    "objectives": [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ],
    "constraints": [{"metric": "psnr_db", "min": 15}],
    "reference": {"sleep_s": 0.04, "noise": 0},
    "baseline": {"sleep_s": 0.04, "noise": 10},
    "measurement": {"warmup": 1, "min_repeats": 25, "max_repeats": 25},
    "sampler": {"name": "grid"},
    "budget": {"trials": 4},
}


def tuner(*args: str, cwd: Path, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=400, env=env
    )


def flat(text: str) -> str:
    return " ".join(text.split())


def rounds_of(done: subprocess.CompletedProcess[str]) -> int:
    found = re.search(r"(\d+) rounds;", flat(done.stdout))
    assert found, done.stdout
    return int(found.group(1))


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("check")
    (cwd / "fake_check.yaml").write_text(yaml.safe_dump(SPEC, sort_keys=False))
    done = tuner("run", str(cwd / "fake_check.yaml"), "--study-name", "c", "--no-mlflow", cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    exported = tuner("export", "c", "--policy", "minimize latency_p50_s", "-o", str(cwd / "c.yaml"), cwd=cwd)
    assert exported.returncode == 0, exported.stderr
    document = yaml.safe_load((cwd / "c.yaml").read_text())
    assert document["params"]["sleep_s"] == 0.02 and document["baseline"]["params"]["sleep_s"] == 0.04
    return cwd / "c.yaml"


def slowdown_env(config: Path, factor: float, cv: float | None = None) -> dict[str, str]:
    """The environment under which the speed-up falls by ``factor``: an extra cost s with (b + s) / (c + s) = (b / c) / factor."""
    document = load_config(config)
    assert document.baseline is not None
    b, c = document.baseline.spread.latency_p50_s, document.spread.latency_p50_s
    assert b is not None and c is not None
    target = (b / c) / factor
    extra = (b - c * target) / (target - 1)
    noisy = {LATENCY_CV_ENV: str(cv), NOISE_SEED_ENV: NOISE_SEED} if cv is not None else {}
    return {**ENV, EXTRA_SLEEP_ENV: f"{extra:.6f}", **noisy}


@pytest.mark.slow
def test_check_passes_on_the_same_build(config: Path) -> None:
    done = tuner("check", str(config), "--min-speedup", "1.3", "--max-quality-drop", "0", cwd=config.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check passed" in flat(done.stdout)
    rounds = rounds_of(done)
    assert 4 <= rounds <= 16, "at least --rounds (default 4), at most --max-rounds (default 16)"
    runs = list((config.parent / "studies" / "checks").glob("*/*_baseline"))
    assert len(runs) >= rounds, "every round ran a baseline in a worker of its own"


@pytest.mark.slow
def test_check_fails_when_the_workload_was_made_slower(config: Path) -> None:
    slower = {**ENV, EXTRA_SLEEP_ENV: "0.01"}  # 0.05 / 0.03: the speed-up falls from ~2x to ~1.67x
    gated = tuner("check", str(config), "--min-speedup", "1.8", cwd=config.parent, env=slower)
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "is below --min-speedup 1.8x" in flat(gated.stderr) and "beyond the margin" in flat(gated.stderr)


@pytest.mark.slow
def test_noisy_check_passes_the_same_build(config: Path) -> None:
    done = tuner(
        "check", str(config), cwd=config.parent, env={**ENV, LATENCY_CV_ENV: "0.3", NOISE_SEED_ENV: NOISE_SEED}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check passed" in flat(done.stdout)


@pytest.mark.slow
def test_noisy_check_fails_a_1_3x_slowdown(config: Path) -> None:
    done = tuner("check", str(config), cwd=config.parent, env=slowdown_env(config, 1.3, cv=0.3))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "beyond the margin" in flat(done.stderr), done.stderr


def test_check_refuses_a_file_that_is_not_a_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: tuner.config/v1\nparams: {}\n")
    done = tuner("check", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and str(bad) in done.stderr and "Traceback" not in done.stderr, done.stderr


def _run(psnr: float | None) -> TrialResult:
    metrics = {
        "latency_p50_s": Metric("latency_p50_s", 0.02, "s", "minimize"),
        "psnr_db": (
            Metric("psnr_db", psnr, "dB", "maximize")
            if psnr is not None
            else Metric.unavailable("psnr_db", "dB", "maximize", "output shapes differ")
        ),
    }
    return TrialResult(outcome=Outcome.OK, metrics=metrics)


@pytest.mark.slow
def test_a_quality_metric_missing_on_either_side_fails(config: Path) -> None:
    document = load_config(config)
    for missing_side in ("baseline", "chosen"):
        sides = {"baseline": SideMeasurement("baseline"), "chosen": SideMeasurement("chosen")}
        for label, side in sides.items():
            for psnr in (30.0, None if label == missing_side else 30.0):
                _record(side, _run(psnr), "latency_p50_s", ["psnr_db"])
        failures: list[str] = []
        assert quality_drops(document, sides["baseline"], sides["chosen"], ["psnr_db"], 1.0, failures) == {}
        assert failures == [f"psnr_db: quality objective missing on the {missing_side} side (output shapes differ)"]
    failures = []
    measured = {label: SideMeasurement(label) for label in ("baseline", "chosen")}
    for side in measured.values():
        _record(side, _run(30.0), "latency_p50_s", ["psnr_db"])
    assert quality_drops(document, measured["baseline"], measured["chosen"], ["psnr_db"], 1.0, failures) == {
        "psnr_db": 0.0
    }
    assert failures == []
