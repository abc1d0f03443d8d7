"""A real worker and a real command program never see the tuner's secrets (tuner.secrets.child_environment).

The parent environment carries the storage URL with its password, MLflow credentials and
``PGPASSWORD``; every runner starts its worker (and fork server, warm worker, reaper) without them,
and the command adapter starts its program without them even when the workload runs in-process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tuner.results import Outcome
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.runner.subprocess import SubprocessRunner, slot_environment
from tuner.runner.warm import WarmRunner
from tuner.spec.adapters import CommandSpec, PythonSpec
from tuner.testing.inline_runner import InlineRunner

SECRET = "s3cretPW"
DUMP_ENV = "import json, os; json.dump(dict(os.environ), open('env.json', 'w')); open('answer.txt', 'w').write('ok')"
PROBE = """
import json, os


class Probe:
    def __init__(self, path):
        self.path = path

    def load(self, static_params):
        pass

    def run(self, params, inputs):
        with open(self.path, "w") as handle:
            json.dump(dict(os.environ), handle)
        return {"text": "ok"}


def make(path):
    return Probe(path)
"""


@pytest.fixture
def secret_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The parent's environment holds every kind of tuner secret; the probe module is importable."""
    monkeypatch.setenv("TUNER_STORAGE", f"postgresql://u:{SECRET}@h/db")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", SECRET + "-token")
    monkeypatch.setenv("PGPASSWORD", SECRET)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"https://admin:{SECRET}@mlflow.example")
    monkeypatch.setenv("TUNER_SECRETS_VISIBLE", "yes")
    probe = tmp_path / "probe_pkg"
    probe.mkdir()
    (probe / "secrets_probe.py").write_text(PROBE)
    monkeypatch.setenv("PYTHONPATH", f"{probe}:{Path(__file__).resolve().parents[2]}")
    return tmp_path


def _request(workdir: Path, options: dict[str, Any]) -> TrialRequest:
    workload = (
        "tuner.adapters.command:CommandWorkload"
        if options["adapter"] == "command"
        else "tuner.adapters.python:PythonAdapterWorkload"
    )
    return TrialRequest(
        study_name="t",
        trial_number=0,
        workload_class=workload,
        settings={},
        inputs={},
        seed=0,
        device="cpu",
        measurement={"warmup": 0, "min_repeats": 1, "max_repeats": 1},
        timeout_s=120,
        workdir=str(workdir),
        quality_metrics=[],
        workload_options=options,
    )


def command_request(workdir: Path, env: dict[str, str] | None = None) -> TrialRequest:
    block = CommandSpec(argv=[sys.executable, "-c", DUMP_ENV], env=env or {}, outputs={"text": "answer.txt"})
    return _request(workdir, {"adapter": "command", **block.model_dump(mode="json")})


def python_request(workdir: Path) -> TrialRequest:
    block = PythonSpec(factory="secrets_probe:make", kwargs={"path": str(workdir.parent / "worker_env.json")})
    return _request(workdir, {"adapter": "python", **block.model_dump(mode="json")})


def seen(path: Path) -> dict[str, str]:
    text = path.read_text()
    assert SECRET not in text, "a secret reached the child"
    environment: dict[str, str] = json.loads(text)
    return environment


@pytest.fixture(params=["fork", "exec", "warm"])
def runner(request: pytest.FixtureRequest, secret_environment: Path) -> Iterator[Runner]:
    made: Runner = WarmRunner() if request.param == "warm" else SubprocessRunner(request.param)
    try:
        yield made
    finally:
        made.close()  # type: ignore[attr-defined]


def test_a_worker_and_its_command_program_see_no_secret(runner: Runner, secret_environment: Path) -> None:
    worker = runner.run(python_request(secret_environment / "python" / "trial"), Slot(0, None, 1))
    assert worker.outcome is Outcome.OK, (worker.reason, worker.log_tail)
    worker_env = seen(secret_environment / "python" / "worker_env.json")
    assert worker_env["TUNER_SECRETS_VISIBLE"] == "yes" and worker_env["CUDA_VISIBLE_DEVICES"] == ""
    assert "TUNER_PROCESS_TAG" in worker_env, "the reaper still finds the worker"
    assert not {"TUNER_STORAGE", "PGPASSWORD", "MLFLOW_TRACKING_URI"} & set(worker_env)

    program = runner.run(command_request(secret_environment / "command" / "trial"), Slot(0, None, 1))
    assert program.outcome is Outcome.OK, (program.reason, program.log_tail)
    program_env = seen(secret_environment / "command" / "trial" / "run" / "env.json")
    assert program_env["TUNER_SECRETS_VISIBLE"] == "yes" and "TUNER_PROCESS_TAG" in program_env


def test_an_in_process_command_workload_starts_its_program_without_secrets(secret_environment: Path) -> None:
    result = InlineRunner().run(command_request(secret_environment / "trial"), Slot(0, None, 1))
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail)
    assert seen(secret_environment / "trial" / "run" / "env.json")["TUNER_SECRETS_VISIBLE"] == "yes"


def test_a_variable_the_spec_sets_reaches_the_program(secret_environment: Path) -> None:
    """The spec's own ``env`` is the user's decision: it is passed on, even a password."""
    result = InlineRunner().run(
        command_request(secret_environment / "trial", {"PGPASSWORD": "given-by-spec"}), Slot(0, None, 1)
    )
    assert result.outcome is Outcome.OK, (result.reason, result.log_tail)
    assert seen(secret_environment / "trial" / "run" / "env.json")["PGPASSWORD"] == "given-by-spec"


def test_slot_environment_scrubs_an_explicit_base_too() -> None:
    env = slot_environment(
        Slot(0, "1", 2), base={"TUNER_STORAGE": "sqlite:////x.db", "PGPASSWORD": SECRET, "PATH": "/bin"}
    )
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "TUNER_STORAGE" not in env and "PGPASSWORD" not in env
