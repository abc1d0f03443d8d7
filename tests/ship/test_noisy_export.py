"""``tuner export`` and ``tuner front`` on a real study with noisy trials (real processes, FakeWorkload).

Every setting sleeps 0.04 s (long enough that a busy machine does not make the stable ones
noisy); half of them add latency noise of CV 0.3 (the FakeWorkload parameter ``jitter_cv``),
three replicas each, so noisy and stable trials sit at equal nominal latency and the noisy
ones often measure the lowest median. The baseline is noisy too. Whatever the noise drew,
the export must never ship a noisy trial while a stable one is within its spread, and must
warn when it ships a noisy one or compares with a noisy baseline.
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

from tuner.front.choice import within_spread
from tuner.storage.records import TrialRecord, record_feasible

ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
ENV.pop("TUNER_FAKE_LATENCY_CV", None)
ENV.pop("TUNER_FAKE_EXTRA_SLEEP_S", None)
SPEC: dict[str, Any] = {
    "name": "fake_noisy",
    "description": "Noisy and stable FakeWorkload settings at equal latency.",
    "workload": {"class": "tuner.workloads.fake:FakeWorkload", "timeout_s": 60, "device": "cpu"},
    "inputs": {"note": "simulated"},
    "parameters": {
        "sleep_s": {"type": "categorical", "choices": [0.04]},
        "jitter_cv": {"type": "categorical", "choices": [0.0, 0.3]},
        "replica": {"type": "categorical", "choices": [1, 2, 3]},
    },
    "objectives": [
        {"metric": "latency_p50_s", "direction": "minimize"},
        {"metric": "psnr_db", "direction": "maximize"},
    ],
    "reference": {"sleep_s": 0.04, "jitter_cv": 0.0, "replica": 1},
    "baseline": {"sleep_s": 0.04, "jitter_cv": 0.3, "replica": 1},
    "measurement": {"warmup": 1, "min_repeats": 10, "max_repeats": 10},
    "sampler": {"name": "grid", "skip_dominated": None},  # every setting of the grid is measured
    "budget": {"trials": 6},
}
SELECTIONS: dict[str, tuple[list[str], list[tuple[str, str]]]] = {  # CLI options, the keys the selection ranks on
    "default": ([], [("latency_p50_s", "minimize"), ("psnr_db", "maximize")]),  # the knee
    "policy": (["--policy", "minimize latency_p50_s"], [("latency_p50_s", "minimize")]),
    "fast": (["--profile", "fast"], [("latency_p50_s", "minimize"), ("psnr_db", "maximize")]),
    "knee": (["--policy", "knee"], [("latency_p50_s", "minimize"), ("psnr_db", "maximize")]),
}


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=400, env=ENV
    )


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("noisy")
    (cwd / "noisy.yaml").write_text(yaml.safe_dump(SPEC, sort_keys=False))
    done = tuner("run", str(cwd / "noisy.yaml"), "--study-name", "n", "--no-mlflow", cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return cwd


def records(cwd: Path) -> dict[int, TrialRecord]:
    study = optuna.load_study(study_name="n", storage=f"sqlite:///{cwd / 'studies' / 'studies.db'}")
    return {t.number: TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)}


@pytest.mark.slow
@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_export_never_ships_noisy_over_stable_without_a_warning(study_dir: Path, selection: str) -> None:
    options, keys = SELECTIONS[selection]
    out = study_dir / f"{selection}.yaml"
    done = tuner("export", "n", *options, "-o", str(out), cwd=study_dir)
    assert done.returncode == 0, done.stderr
    document = yaml.safe_load(out.read_text())
    stored = records(study_dir)
    shipped = stored[document["provenance"]["trial"]]
    feasible = [r for r in stored.values() if record_feasible(r)]
    assert any(r.noisy for r in feasible) and any(not r.noisy for r in feasible), "the study has both kinds"
    warnings, stderr = " ".join(document["warnings"]), flat(done.stderr)
    assert document["spread"]["noisy"] == shipped.noisy
    if shipped.noisy:
        assert f"the shipped trial (trial {shipped.number}) is noisy" in warnings
        assert f"warning: the shipped trial (trial {shipped.number}) is noisy" in stderr
        rivals = [r.number for r in feasible if not r.noisy and within_spread(r, shipped, keys)]
        assert rivals == [], f"stable trials {rivals} are within the spread of noisy trial {shipped.number}"
    replaced = document["selection"]["replaced_noisy_trial"]
    if replaced is not None:
        assert stored[replaced].noisy and not shipped.noisy and within_spread(shipped, stored[replaced], keys)
        assert f"the policy picked trial {replaced}, which is noisy" in flat(done.stdout)
    baseline = next(r for r in stored.values() if r.role == "baseline")
    assert baseline.noisy == (f"the baseline (trial {baseline.number}) is noisy" in warnings)
    assert (f"warning: the baseline (trial {baseline.number}) is noisy" in stderr) == baseline.noisy
    assert document["baseline"]["spread"]["noisy"] == baseline.noisy


@pytest.mark.slow
def test_an_explicit_noisy_trial_is_shipped_with_a_warning(study_dir: Path) -> None:
    stored = records(study_dir)
    noisy = next(r for r in stored.values() if record_feasible(r) and r.noisy and r.role == "search")
    out = study_dir / "explicit.yaml"
    done = tuner("export", "n", "--trial", str(noisy.number), "-o", str(out), cwd=study_dir)
    assert done.returncode == 0, done.stderr
    document = yaml.safe_load(out.read_text())
    assert document["provenance"]["trial"] == noisy.number and document["selection"]["replaced_noisy_trial"] is None
    assert any(f"the shipped trial (trial {noisy.number}) is noisy: latency CV" in w for w in document["warnings"])
    assert f"warning: the shipped trial (trial {noisy.number}) is noisy" in flat(done.stderr)


@pytest.mark.slow
def test_front_marks_noisy_trials(study_dir: Path) -> None:
    done = tuner("front", "n", cwd=study_dir)
    assert done.returncode == 0, done.stderr
    blocks: dict[int, list[str]] = {}  # each listed trial's lines, as the closing front prints them
    current = None
    for line in done.stdout.splitlines():
        words = line.lstrip("* ").split()
        if len(words) > 1 and words[0] == "trial" and words[1].isdigit():
            current = int(words[1])
            blocks[current] = []
        elif not line.startswith(" "):
            current = None
        if current is not None:
            blocks[current].append(line)
    stored = records(study_dir)
    shown = {n: "NOISY" if "NOISY" in " ".join(lines) else "-" for n, lines in blocks.items()}
    assert shown, done.stdout
    assert shown == {n: "NOISY" if stored[n].noisy else "-" for n in shown}
    noisy = sum(stored[n].noisy for n in shown)
    assert (f"{noisy} of them NOISY" in flat(done.stdout)) == (noisy > 0)
