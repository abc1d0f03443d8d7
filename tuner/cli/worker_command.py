"""``tuner worker``: this host's slots join the studies of a shared storage.

Registered on :data:`tuner.cli.app.app` when imported (by :mod:`tuner.cli.main`).
The loop (which study, run it, the next, wait) is :func:`tuner.fleet.worker.run_worker`;
this command parses the options, installs the SIGTERM handler for the waits between
studies, renders what the worker says on the terminal and exits with its status.
"""

from __future__ import annotations

import signal
from pathlib import Path

import typer

from tuner.cli.app import HomeOption, MlflowOption, StorageOption, app, err, fail, out
from tuner.errors import StudyError
from tuner.spec.models import SpecError
from tuner.storage.opening import storage_url, tuner_home


def _parse_gpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        gpus = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        gpus = []
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        fail(f"--gpus {text!r}: give distinct GPU indices separated by commas, e.g. --gpus 0,1")
    return gpus


def _stop_on_sigterm() -> None:
    """SIGTERM (a fleet scheduler's stop) ends the worker like Ctrl-C. While a study runs, the session's
    handler takes over (:func:`tuner.session.signals.stop_on_signals`: trials in flight recorded INTERRUPTED
    and queued again, the same words as Ctrl-C, exit 130); between studies it ends the wait at once — or at
    the next look when the handler ran inside a finalizer, where its exception is dropped
    (:func:`tuner.fleet.worker.request_stop`)."""
    from tuner.fleet.worker import request_stop

    def on_term(signum: int, frame: object) -> None:
        request_stop()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)


@app.command()
def worker(
    study: str | None = typer.Argument(None, help="Study to join (omit: any open study for this host's GPUs)."),
    storage: str | None = StorageOption,
    gpus: str | None = typer.Option(
        None,
        "--gpus",
        help="GPUs this worker uses, e.g. 0,1 (default: all "
        "visible; one slot each). On a CPU study they only name its shares.",
    ),
    mlflow_uri: str | None = MlflowOption,
    no_mlflow: bool = typer.Option(False, "--no-mlflow", help="Do not log to MLflow."),
    once: bool = typer.Option(False, "--once", help="Exit when no open study is left instead of waiting."),
    poll: float = typer.Option(5.0, "--poll", min=0.1, help="Seconds between looks for a new study."),
    home: Path | None = HomeOption,
) -> None:
    """Run trials of a shared study (or of every open study for this host) on this host's slots."""
    from tuner.cli.session import ConsoleSession
    from tuner.fleet.worker import WorkerOptions, run_worker
    from tuner.storage.opening import check_study_name

    chosen = _parse_gpus(gpus)
    root = tuner_home(home)
    if study is not None:
        try:
            check_study_name(study)
        except StudyError as error:
            fail(str(error))
    _stop_on_sigterm()
    options = WorkerOptions(
        storage_url(storage, root), root, study, chosen, None if no_mlflow else mlflow_uri, not no_mlflow, once, poll
    )
    try:
        status = run_worker(options, ConsoleSession(out, err))
    except (StudyError, SpecError) as error:
        fail(str(error))
    raise typer.Exit(status)
