"""A bug of the tuner itself reaches the user as one line and exit status 1 (``tuner.cli.main``).

No bad input makes the CLI raise anything but a :class:`~tuner.errors.TunerError` (the
bad-input corpus holds it to that), so the bug is planted: a real ``python -m tuner validate``
process whose ``_load_runnable`` raises a ``RuntimeError`` -- run as ``runpy`` runs
``python -m tuner``, with the same ``sys.argv``. Its message spans two lines and names a
storage URL with a password, to show the line is one line and redacted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tuner.cli.main import DEBUG_ENV
from tuner.errors import EXIT_INTERNAL_ERROR
from tuner.secrets import MASK

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "specs" / "fake_ok.yaml"

PLANTED_BUG = """
import runpy, sys
import tuner.cli.study_commands as commands

def _load_runnable(*args, **kwargs):
    raise RuntimeError("planted bug\\nwhile reading postgresql://tuner:s3cret-pw@db:5432/studies")

commands._load_runnable = _load_runnable
sys.argv = ["tuner", "validate", sys.argv[1]]
runpy.run_module("tuner", run_name="__main__", alter_sys=True)
"""

LINE = (
    f"error: internal error: RuntimeError: planted bug while reading postgresql://tuner:{MASK}@db:5432/studies "
    f"(rerun with {DEBUG_ENV}=1 for the traceback and please report it)"
)


def _tuner_with_a_bug(tmp_path: Path, debug: bool) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != DEBUG_ENV}
    if debug:
        env[DEBUG_ENV] = "1"
    return subprocess.run(
        [sys.executable, "-c", PLANTED_BUG, str(SPEC)],
        cwd=tmp_path,
        env={**env, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unexpected_exception_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = _tuner_with_a_bug(tmp_path, debug=False)
    assert done.returncode == EXIT_INTERNAL_ERROR == 1, done.stderr[-3000:]
    assert done.stderr.splitlines() == [LINE], "one line (not wrapped at 80 columns), the password masked"
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_tuner_debug_puts_the_traceback_on_stderr_before_the_line(tmp_path: Path) -> None:
    done = _tuner_with_a_bug(tmp_path, debug=True)
    assert done.returncode == EXIT_INTERNAL_ERROR, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):", lines[:3]
    assert "in _load_runnable" in done.stderr and "RuntimeError: planted bug" in done.stderr
    assert lines[-1] == LINE, "the same one line closes the output"
    assert done.stdout == "" and "s3cret-pw" not in done.stderr, "the traceback is redacted too"
