"""Study names are one safe path segment: nothing is written outside the tuner home (issue 12, "Files")."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tuner.errors import StudyError
from tuner.spec.loading import parse_spec
from tuner.storage.opening import check_study_name
from tuner.study.studies import create_study, default_study_name, load_study, study_directory

ROOT = Path(__file__).resolve().parents[2]
FAKE_OK = ROOT / "tests" / "specs" / "fake_ok.yaml"
BAD_NAMES = ["../../x", "/abs", "a/b", ".hidden", "", "x" * 500, "..", ".", "a b", "a\nb", "x\\..\\y", "ü"]


def tree(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_bad_study_names_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(StudyError) as caught:
        check_study_name(name)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300, message
    assert message.endswith(
        "is not allowed: use letters, digits, '_', '-', '.' (at most 128 characters, not starting with '.')"
    ), message


@pytest.mark.parametrize("name", ["demo", "fake_demo-cpu-20260101-000000", "v1.2", "x" * 128, "-x", "_"])
def test_good_study_names_pass(name: str) -> None:
    assert check_study_name(name) == name


@pytest.mark.parametrize("name", ["../../x", "/abs", "a/b", ".hidden", "", "x" * 500])
def test_create_and_load_refuse_a_bad_name_before_touching_the_storage(tmp_path: Path, name: str) -> None:
    spec_text = FAKE_OK.read_text()
    db = tmp_path / "store" / "studies.db"
    url = f"sqlite:///{db}"
    with pytest.raises(StudyError, match="is not allowed"):
        create_study(parse_spec(spec_text), spec_text, url, name, "random", 1, {})
    with pytest.raises(StudyError, match="is not allowed"):
        load_study(url, name)
    assert not (tmp_path / "store").exists(), "refused before the storage was opened"


def test_study_directory_stays_inside_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert study_directory(home, "demo") == home / "demo"
    with pytest.raises(StudyError, match="is not allowed"):
        study_directory(home, "../../x")
    (tmp_path / "elsewhere").mkdir()
    (home / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StudyError, match="resolves outside the tuner home"):
        study_directory(home, "linked")


@pytest.mark.parametrize(
    "spec_name, gpu",
    [("fake_demo", "NVIDIA H200"), ("..", "NVIDIA GeForce RTX 4090 / 24GB"), ("a" * 300, "x" * 300), ("fake.demo", "")],
)
def test_default_study_name_is_always_valid(spec_name: str, gpu: str) -> None:
    spec = parse_spec(FAKE_OK.read_text()).model_copy(update={"name": spec_name})
    name = default_study_name(spec, gpu)
    assert check_study_name(name) == name
    if gpu == "NVIDIA H200":
        assert name.startswith("fake_demo-nvidia_h200-")


def test_tuner_run_with_a_bad_study_name_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TUNER_", "MLFLOW_"))}
    before = tree(tmp_path)
    done = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "tuner"),
            "run",
            str(FAKE_OK),
            "--study-name",
            "../../x",
            "--home",
            str(cwd / "home"),
            "--no-mlflow",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: study name '../../x' is not allowed"), done.stderr
    created = tree(tmp_path) - before
    assert not {path for path in created if not path.startswith(os.path.join("a", "b", "home"))}, created
    assert not (tmp_path / "a" / "x").exists()


def _config(study: str) -> Any:
    from tuner.ship.config_schema import ConfigV1

    spread: dict[str, Any] = {
        "latency_p50_s": None,
        "latency_p95_s": None,
        "latency_cv": None,
        "repeats": None,
        "noisy": None,
    }
    settings = {"sleep_s": 0.02, "noise": 0, "batch_size": 1}
    return ConfigV1.model_validate(
        {
            "schema": "tuner.config/v1",
            "workload": None,
            "params": settings,
            "derived": {},
            "invocation": None,
            "selection": {"policy": "p", "profile": None, "feasible_trials": 1, "front_size": 1, "on_front": True},
            "objectives": {},
            "metrics": {},
            "spread": spread,
            "timing": {},
            "gpu": {},
            "baseline": {
                "trial": 0,
                "params": settings,
                "derived": {},
                "outcome": "OK",
                "metrics": {},
                "spread": spread,
                "comparison": {"speed_metric": "latency_p50_s", "speedup": 1.0, "quality_delta": {}},
            },
            "provenance": {
                "study": study,
                "trial": 3,
                "role": "search",
                "storage": "x",
                "spec_name": None,
                "spec_hash": None,
                "sampler": None,
                "measured_at": None,
                "exported_at": "now",
                "tuner_version": "0",
            },
            "check": {"spec_yaml": FAKE_OK.read_text(), "device": "cpu", "reference": settings, "baseline": settings},
        }
    )


class _Stop(Exception):
    pass


@pytest.mark.parametrize("study", ["../../evil", "/etc/evil", "a/../../b", "..", "x" * 400])
def test_check_work_dir_stays_inside_home_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, study: str) -> None:
    import tuner.runner.base
    from tuner.ship.check import run_check

    def stop(*args: Any, **kwargs: Any) -> Any:
        raise _Stop()  # right after the work dir is made: nothing is measured

    monkeypatch.setattr(tuner.runner.base, "plan_slots", stop)
    home = tmp_path / "a" / "b" / "home"
    home.mkdir(parents=True)
    before = tree(tmp_path)
    with pytest.raises(_Stop):
        run_check(_config(study), home)
    created = tree(tmp_path) - before
    made = [path for path in created if path.count(os.sep) == 4]
    assert len(made) == 1, created
    assert all(path.startswith(os.path.join("a", "b", "home", "checks")) for path in created), created
    assert "-trial3-" in Path(made[0]).name and len(Path(made[0]).name) < 160, made
