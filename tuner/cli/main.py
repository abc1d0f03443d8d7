"""The ``tuner`` program: the app with every command registered, and its entry point.

Every user-facing failure (bad spec, unknown study, unreachable storage) is
one clear line on stderr and exit status 2 — never a traceback. A study whose
trials crash, run out of memory or hang still completes with status 0.
"""

from __future__ import annotations

import os
import sys

import tuner.cli.study_commands  # noqa: F401 - registers validate, run, resume, status, schema
import tuner.cli.view_commands  # noqa: F401 - registers front, export, check, ui, sync-mlflow
from tuner.cli.app import app, err


def _quiet_library_logs() -> None:
    """Optuna and MLflow log at INFO by default; tuner's own display says what matters."""
    import logging

    for name in ("optuna", "mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    _quiet_library_logs()
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted: trials in flight will be re-run by 'tuner resume'")
        sys.stdout.flush()
        os._exit(130)
