"""CI requires the components the suite tests for real: ``python -m tuner.testing.components`` names each
missing one in one line, and under ``TUNER_REQUIRE_COMPONENTS=1`` the root conftest fails a skip whose
reason is not CUDA / GPU / NVML (tuner/testing/components.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.testing.components import REQUIRE_ENV, skip_allowed

CONFTEST = Path(__file__).parent / "conftest.py"
CHROMIUM_NAMES = {"chromium", "chromium-browser", "chromedriver"}


def path_without(names: set[str], folder: Path) -> str:
    """A PATH of one folder of symlinks to every program on the current PATH except ``names``."""
    folder.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name not in names and not os.path.lexists(link):
                link.symlink_to(entry.path)
    return str(folder)


def check_components(path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner.testing.components"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        timeout=120,
    )


def test_a_machine_without_chromium_fails_the_check_with_one_line_naming_it(tmp_path: Path) -> None:
    here = check_components(os.environ.get("PATH", ""))
    assert here.returncode == (1 if here.stdout else 0), here
    others = [line for line in here.stdout.splitlines() if "chromium" not in line]

    without = check_components(path_without(CHROMIUM_NAMES, tmp_path / "bin"))
    assert without.returncode == 1, without
    lines = without.stdout.splitlines()
    named = [line for line in lines if "chromium" in line]
    assert len(named) == 1, lines
    assert named[0].startswith("missing: chromium (the MLflow UI browser test, tests/tracking/test_browser.py): ")
    assert "chromium-driver" in named[0]
    assert [line for line in lines if line not in named] == others, "nothing else changes"
    assert all(line.startswith("missing: ") for line in lines) and without.stderr == ""


def test_the_allow_list_takes_cuda_gpu_nvml_and_chattr_only() -> None:
    for reason in (
        "needs CUDA",
        "no CUDA device",
        "a GPU is listed here: the script would run its GPU checks",
        "NVML works on this machine",
        "chattr +i is not available on this filesystem",
    ):
        assert skip_allowed(reason), reason
    for reason in (
        "espeak-ng not on PATH",
        "could not import 'torch': No module named 'torch'",
        "PostgreSQL is not installed: no initdb/pg_ctl (Debian: apt-get install postgresql)",
        "headless browser test needs the Debian packages chromium and chromium-driver",
    ):
        assert not skip_allowed(reason), reason


TESTS = """
import pytest

def test_needs_a_component():
    pytest.skip("{reason}")

def test_runs():
    assert True
"""


XDIST = ["-n", "2", "--dist", "loadfile"]
"""How ``.ci/run`` and the README run the suite: two pytest-xdist workers, a test file to a worker."""


def run_pytest(
    tmp_path: Path, body: str, required: bool, extra: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """pytest in a child, on one test file beside a copy of the root conftest (``extra``: more pytest options)."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    shutil.copy(CONFTEST, project / "conftest.py")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_tiny.py").write_text(body)
    env = {key: value for key, value in os.environ.items() if key != REQUIRE_ENV}
    if required:
        env[REQUIRE_ENV] = "1"
    basetemp = tmp_path / f"basetemp-{required}"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            f"--basetemp={basetemp}",
            *(extra or []),
            "test_tiny.py",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_component_skip_fails_under_the_variable_and_only_there(tmp_path: Path) -> None:
    body = TESTS.format(reason="espeak-ng not on PATH")
    failed = run_pytest(tmp_path, body, required=True)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 failed, 1 passed" in failed.stdout, failed.stdout
    assert "espeak-ng not on PATH" in failed.stdout and REQUIRE_ENV in failed.stdout

    passed = run_pytest(tmp_path, body, required=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 passed, 1 skipped" in passed.stdout
    assert "SKIPPED [1] test_tiny.py:5: espeak-ng not on PATH" in passed.stdout, "-rs prints the reason"


@pytest.mark.parametrize("workers", ["serial", "xdist"])
@pytest.mark.parametrize("where", ["setup", "collection"])
def test_a_fixture_or_module_skip_fails_as_well(tmp_path: Path, where: str, workers: str) -> None:
    """Also under xdist, where the workers collect and the controller sums up (a module skipped in a worker's
    collection must still fail the run)."""
    extra = XDIST if workers == "xdist" else []
    if where == "setup":
        body = (
            'import pytest\n\n@pytest.fixture\ndef cluster():\n    pytest.skip("PostgreSQL is not installed")\n\n'
            "def test_store(cluster):\n    pass\n"
        )
    else:
        body = 'import pytest\n\npytest.importorskip("no_such_module_here")\n\ndef test_store():\n    pass\n'
    failed = run_pytest(tmp_path, body, required=True, extra=extra)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    reason = "PostgreSQL is not installed" if where == "setup" else "no_such_module_here"
    assert reason in failed.stdout.split("skips only for CUDA/GPU/NVML", 1)[-1], failed.stdout
    quiet = run_pytest(tmp_path, body, required=False, extra=extra)  # a skipped module alone: "no tests ran"
    assert quiet.returncode == (0 if where == "setup" else pytest.ExitCode.NO_TESTS_COLLECTED), quiet.stdout
    assert "1 skipped" in quiet.stdout


def test_a_cuda_skip_passes_under_the_variable(tmp_path: Path) -> None:
    passed = run_pytest(tmp_path, TESTS.format(reason="needs a CUDA device"), required=True)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 passed, 1 skipped" in passed.stdout
    assert "needs a CUDA device" in passed.stdout
