"""The ``tuner`` program: the app with every command registered, and its entry point.

Every answer to bad input is one line on stderr — never a traceback:

- a bad spec, unknown study or unreachable storage: ``error: ...``, exit status 2;
- a bad command line (unknown option, missing argument, a value out of range):
  ``error: tuner run: No such option: --bogus (see 'tuner run --help')``, exit 2;
- a module of an extra that is not installed: ``error: tuner serve needs the 'serve' extra
  (no module named 'fastapi'): pip install 'tuner[serve]'``, exit 2 (:mod:`tuner.spec.extras`);
- any other :class:`tuner.errors.TunerError` a command did not catch itself: ``error: <its
  message>``, its ``exit_status`` (2; the tree is drawn in :mod:`tuner.errors`);
- a bug of the tuner itself (any other exception): ``error: internal error: ...`` with a hint to
  rerun with ``TUNER_DEBUG=1`` (which shows the traceback), exit 1.

A study whose trials crash, run out of memory or hang still completes with status 0.
"""

from __future__ import annotations

import os
import sys
import traceback

import typer

import tuner.cli.dashboard_command  # noqa: F401 - registers dashboard
import tuner.cli.fleet_commands  # noqa: F401 - registers serve, submit
import tuner.cli.show_command  # noqa: F401 - registers show
import tuner.cli.study_commands  # noqa: F401 - registers validate, run, resume, status, schema
import tuner.cli.view_commands  # noqa: F401 - registers front, export, check, ui, sync-mlflow
import tuner.cli.worker_command  # noqa: F401 - registers worker
from tuner.cli.app import app, err
from tuner.errors import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, TunerError
from tuner.spec.extras import missing_extra_message

DEBUG_ENV = "TUNER_DEBUG"  # set to 1 to see the traceback of an internal error


def _quiet_library_logs() -> None:
    """Optuna and MLflow log at INFO by default; tuner's own display says what matters."""
    import logging

    for name in ("optuna", "mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")


def _one_line(message: str) -> None:
    from rich.markup import escape

    from tuner.secrets import redact_text

    err.print(f"[bold red]error:[/] {escape(redact_text(' '.join(message.split())))}", highlight=False, soft_wrap=True)


def _command(argv: list[str] | None) -> str:
    """``tuner <command>`` as typed (the first word that is not an option), or ``tuner``."""
    words = sys.argv[1:] if argv is None else argv
    return " ".join(["tuner", *[w for w in words if not w.startswith("-")][:1]])


def error_answer(error: Exception, command: str) -> tuple[str, int]:
    """The one line and the exit status for ``error`` reaching the entry point of ``command``
    (``tuner run``): a missing extra's install line (2), a :class:`~tuner.errors.TunerError`'s own
    message and ``exit_status`` (2), else an internal error (1)."""
    missing = missing_extra_message(error, command)
    if missing is not None:  # not a bug: an extra this command needs is not installed
        return missing, EXIT_USER_ERROR
    if isinstance(error, TunerError):  # a failure the tuner recognises, said in one line
        return str(error), error.exit_status
    return (
        f"internal error: {type(error).__name__}: {error} (rerun with {DEBUG_ENV}=1 for the traceback and "
        "please report it)"
    ), EXIT_INTERNAL_ERROR


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning every exception into one line and a status."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    _quiet_library_logs()
    try:
        status = app(args=argv, prog_name="tuner", standalone_mode=False)
    except typer.TyperException as error:  # the command line itself is wrong (click's usage errors)
        context = getattr(error, "ctx", None)
        if type(error).__name__ == "NoArgsIsHelpError":  # plain 'tuner': the help, as before
            err.print(error.format_message(), highlight=False, markup=False)
            status = 2
        else:
            where = context.command_path if context is not None else "tuner"
            _one_line(f"{where}: {error.format_message()} (see '{where} --help')")
            status = 2 if getattr(error, "ctx", None) is not None or error.exit_code == 2 else error.exit_code
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted: trials in flight will be re-run by 'tuner resume'")
        sys.stdout.flush()
        os._exit(130)
    except Exception as error:  # noqa: BLE001 - one line (and a status) for every error, unless asked for more
        if os.environ.get(DEBUG_ENV):
            from tuner.secrets import redact_text

            print(redact_text(traceback.format_exc()), end="", file=sys.stderr, flush=True)  # no password either
        message, status = error_answer(error, _command(argv))
        _one_line(message)
    sys.exit(status if isinstance(status, int) else 0)
