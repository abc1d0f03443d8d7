"""``tuner check``: passes on the build that was tuned, fails when the workload was made slower.

The slowdown is the simulated FakeWorkload's test hook ``TUNER_FAKE_EXTRA_SLEEP_S``: a fixed
cost added to every run, as a regression in a build would add.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuner.workloads.fake import EXTRA_SLEEP_ENV

SPECS = Path(__file__).parents[1] / "specs"
ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
ENV.pop(EXTRA_SLEEP_ENV, None)


def tuner(*args: str, cwd: Path, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=400, env=env)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("check")
    done = tuner("run", str(SPECS / "fake_grid.yaml"), "--study-name", "g", "--no-mlflow", cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    exported = tuner("export", "g", "--policy", "minimize latency_p50_s", "-o", str(cwd / "g.yaml"), cwd=cwd)
    assert exported.returncode == 0, exported.stderr
    document = yaml.safe_load((cwd / "g.yaml").read_text())
    assert document["params"]["sleep_s"] == 0.002 and document["baseline"]["params"]["sleep_s"] == 0.03
    return cwd / "g.yaml"


@pytest.mark.slow
def test_check_passes_on_the_same_build(config: Path) -> None:
    done = tuner("check", str(config), "--min-speedup", "1.3", "--max-quality-drop", "0", cwd=config.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check passed" in " ".join(done.stdout.split())
    assert len(list((config.parent / "studies" / "checks").glob("*/*_baseline"))) == 3, "three baseline runs"


@pytest.mark.slow
def test_check_fails_when_the_workload_was_made_slower(config: Path) -> None:
    slower = {**ENV, EXTRA_SLEEP_ENV: "0.1"}
    gated = tuner("check", str(config), "--min-speedup", "1.3", cwd=config.parent, env=slower)
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "below --min-speedup 1.3x" in " ".join(gated.stderr.split())
    spread = tuner("check", str(config), cwd=config.parent, env=slower)
    assert spread.returncode == 1, spread.stdout + spread.stderr
    assert "beyond the spread" in " ".join(spread.stderr.split())


def test_check_refuses_a_file_that_is_not_a_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: tuner.config/v1\nparams: {}\n")
    done = tuner("check", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and str(bad) in done.stderr and "Traceback" not in done.stderr, done.stderr
