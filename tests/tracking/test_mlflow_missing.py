"""A host without MLflow: one line naming the package and its install command, never a traceback fragment.

The working directory of a checkout has a folder ``mlflow/`` (the default local store), which
imports as an empty namespace package when the real MLflow is not installed — the import then
fails one level down (``No module named 'mlflow.tracking'``). Here the real MLflow is hidden from
the tuner's own processes by a ``sitecustomize`` on ``PYTHONPATH`` that looks ``mlflow`` up
outside the site-packages only, so the folder in the working directory is what it finds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.spec.extras import core_requirement, is_installed

SPEC = Path(__file__).parents[1] / "specs" / "fake_ok.yaml"
OUTSIDE_SITE_PACKAGES = '''
"""Test support: 'mlflow' is looked up outside the site-packages only (the real one looks not installed)."""
import importlib.machinery
import sys


class _OutsideSitePackages:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] != "mlflow":
            return None
        if name == "mlflow":
            path = [entry for entry in sys.path if "-packages" not in entry]
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


sys.meta_path.insert(0, _OutsideSitePackages())
'''


def _python(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    hider = cwd.parent / "hide_mlflow"
    hider.mkdir(exist_ok=True)
    (hider / "sitecustomize.py").write_text(OUTSIDE_SITE_PACKAGES)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hider), os.environ.get("PYTHONPATH", "")]),
        "MLFLOW_TRACKING_URI": "",
        "TUNER_STORAGE": "",
        "TUNER_HOME": "",
        "TUNER_DEBUG": "",
    }
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env, check=False
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A working directory like a checkout's: an empty ``mlflow/`` folder in it."""
    cwd = tmp_path / "checkout"
    (cwd / "mlflow").mkdir(parents=True)
    return cwd


def _clean(text: str) -> None:
    for fragment in ("Traceback", "ModuleNotFoundError", "mlflow.tracking", "internal error"):
        assert fragment not in text, text[-3000:]


def test_the_folder_imports_as_a_namespace_package_and_counts_as_not_installed(checkout: Path) -> None:
    done = _python(
        checkout,
        "-c",
        "import mlflow, tuner.spec.extras as e; "
        "print(mlflow.__spec__.origin, getattr(mlflow, '__file__', None), e.is_installed('mlflow'))",
    )
    assert done.stdout.split() == ["None", "None", "False"], done.stdout + done.stderr[-2000:]
    assert is_installed("mlflow") and is_installed("json"), "here (no hider) it is installed"
    assert core_requirement("mlflow") == "mlflow<4,>=3.0", "named as the tuner's core requires it"
    assert core_requirement("no-such-distribution") == "no-such-distribution"


def test_a_study_without_mlflow_runs_and_says_so_in_one_line(checkout: Path) -> None:
    done = _python(checkout, "-m", "tuner", "run", str(SPEC), "--study-name", "s", "--trials", "1")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    _clean(said)
    message = (
        "MLflow logging needs the 'mlflow' package, a requirement of the tuner's core (no module named "
        "'mlflow'): pip install 'mlflow<4,>=3.0'; the study runs without it (rebuild its views later "
        "with 'tuner sync-mlflow s')"
    )
    flat = " ".join(said.split())  # one notice, wrapped between words at the console's width (issue 41)
    assert flat.count("MLflow logging needs") == 1 and message in flat, said
    assert flat.count("pip install") == 1, said


@pytest.mark.parametrize("command", [["sync-mlflow", "s"], ["ui", "s"]])
def test_sync_and_ui_without_mlflow_stop_with_one_line(checkout: Path, command: list[str]) -> None:
    ran = _python(checkout, "-m", "tuner", "run", str(SPEC), "--study-name", "s", "--trials", "1", "--no-mlflow")
    assert ran.returncode == 0, ran.stderr[-3000:]
    done = _python(checkout, "-m", "tuner", *command)
    _clean(done.stdout + done.stderr)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: tuner {command[0]} needs the 'mlflow' package, a requirement of the tuner's core (no module "
        "named 'mlflow'): pip install 'mlflow<4,>=3.0'"
    ], (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
