"""``tuner worker``: this host's slots join the studies of a shared storage.

Registered on :data:`tuner.cli.app.app` when imported (by :mod:`tuner.cli.main`).
A worker is an ordinary coordinator (:mod:`tuner.study.coordinator`) on the
devices it is given; many workers on many hosts share one study through the
storage (budget, queue, heartbeats). With a STUDY it runs that study until its
budget is spent and exits; without, it takes the oldest open study for this
host's GPU type (:mod:`tuner.fleet.worker`), then the next, and waits for new
ones (``--once``: exit when there is nothing to do).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any, Optional

import typer

from tuner.cli.app import HomeOption, MlflowOption, StorageOption, app, err, fail, out
from tuner.spec.models import SpecError
from tuner.study.storage import StudyError, redact_url, storage_url, tuner_home


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
    handler takes over (:func:`tuner.cli.session._ctrl_c_stops`: trials in flight recorded INTERRUPTED and
    queued again, the same words as Ctrl-C, exit 130); between studies it ends the wait at once."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)


@app.command()
def worker(
    study: Optional[str] = typer.Argument(None, help="Study to join (omit: any open study for this host's GPUs)."),
    storage: Optional[str] = StorageOption,
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPUs this worker uses, e.g. 0,1 (default: all "
                                       "visible; one slot each). On a CPU study they only name its shares."),
    mlflow_uri: Optional[str] = MlflowOption,
    no_mlflow: bool = typer.Option(False, "--no-mlflow", help="Do not log to MLflow."),
    once: bool = typer.Option(False, "--once", help="Exit when no open study is left instead of waiting."),
    poll: float = typer.Option(5.0, "--poll", min=0.1, help="Seconds between looks for a new study."),
    home: Optional[Path] = HomeOption,
) -> None:
    """Run trials of a shared study (or of every open study for this host) on this host's slots."""
    from tuner.cli.session import run_session
    from tuner.fleet.worker import open_studies
    from tuner.gpu import gpu_type
    from tuner.study.heartbeats import HOST
    from tuner.study.studies import check_study_name, load_study

    chosen = _parse_gpus(gpus)
    root = tuner_home(home)
    url = storage_url(storage, root)
    kind = gpu_type()
    if study is not None:
        try:
            check_study_name(study)
        except StudyError as error:
            fail(str(error))
    _stop_on_sigterm()
    out.print(f"worker {HOST} ({kind}) on {redact_url(url)}" + (f", GPUs {gpus}" if gpus else ""),
              highlight=False, soft_wrap=True)
    waited_since: float | None = None
    finished: set[str] = set()  # studies this worker ran to an end (exhausted, stopped early): not again
    while True:
        try:
            names = [study] if study is not None else [s.name for s in open_studies(url, kind)
                                                        if s.name not in finished]
        except StudyError as error:
            fail(str(error))
        if not names:
            if once:
                out.print("no open study for this host: done (--once)")
                return
            if waited_since is None:
                waited_since = time.monotonic()
                out.print(f"no open study for {kind}: waiting (every {poll:g} s; Ctrl-C stops)")
            time.sleep(poll)
            continue
        waited_since = None
        try:
            opened = load_study(url, names[0])
        except (StudyError, SpecError) as error:
            fail(str(error))
        device = str(opened.study.user_attrs.get("device") or "cpu")
        if device == "cuda" and kind == "cpu":
            fail(f"study '{names[0]}' runs on GPUs ({opened.study.user_attrs.get('gpu_type')}) but this host has "
                 "none visible")
        summary: Any = _join(run_session, opened, root, device, mlflow_uri, no_mlflow, chosen)
        if summary.interrupted or study is not None:
            raise typer.Exit(130 if summary.interrupted else 3 if summary.failure is not None else 0)
        finished.add(names[0])
        if summary.failure is not None:
            err.print(f"study {names[0]} stopped early; this worker moves on", highlight=False)


def _join(run_session: Any, opened: Any, root: Path, device: str, mlflow_uri: str | None, no_mlflow: bool,
          gpus: list[int] | None) -> Any:
    try:
        return run_session(opened, root, device, 1, None if no_mlflow else mlflow_uri, not no_mlflow, out, err,
                           {}, gpus)
    except StudyError as error:
        fail(str(error))
