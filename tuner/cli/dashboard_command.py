"""``tuner dashboard``: optuna-dashboard on a view of the studies whose best trials are ``tuner front``.

Registered on :data:`tuner.cli.app.app` when imported (by :mod:`tuner.cli.main`). The view
(:mod:`tuner.tracking.dashboard`) is rebuilt from the storage at start, then the real
``optuna-dashboard`` serves it (:mod:`tuner.tracking.dashboard_server`) while the view is
brought up to date every ``--interval`` seconds (trials a running study adds appear; a
failed refresh is one warning line, the server keeps serving). ``--refresh-only`` writes
the view and exits. Every bad input is one line (``error: ...``, exit 2).
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from tuner.cli.app import HomeOption, StorageOption, app, err, fail, listen_port, out
from tuner.errors import StudyError
from tuner.secrets import redact_text, redact_url
from tuner.storage.opening import list_studies, storage_url, tuner_home

if TYPE_CHECKING:
    from tuner.tracking.dashboard import ViewReport

ViewOption = typer.Option(
    None, "--view-storage", help="Optuna storage URL of the view (default: sqlite:///<home>/dashboard.db)."
)


@app.command()
def dashboard(
    study: str | None = typer.Argument(None, help="Study to show (default: every study in the storage)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (default: localhost only)."),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="Port (0: a free one)."),
    storage: str | None = StorageOption,
    home: Path | None = HomeOption,
    view_storage: str | None = ViewOption,
    refresh_only: bool = typer.Option(False, "--refresh-only", help="Write the view and exit (no server)."),
    interval: float = typer.Option(5.0, "--interval", min=1.0, help="Seconds between refreshes while serving."),
    startup_timeout: float = typer.Option(60.0, "--startup-timeout", min=1.0, help="Seconds to wait for the server."),
) -> None:
    """Open optuna-dashboard on a view of STUDY (or every study) where best trials are tuner's front (Ctrl-C stops it)."""
    from tuner.storage.opening import check_study_name
    from tuner.tracking.dashboard import default_view_url

    root = tuner_home(home)
    url = storage_url(storage, root)
    view_url = view_storage or default_view_url(root)
    try:
        names = [name for name, _ in list_studies(url)]
        if study is not None:
            check_study_name(study)
            if study not in names:
                fail(f"no study '{study}' in {redact_url(url)} (latest: {', '.join(names[-5:]) or 'none'})")
        elif not names:
            fail(f"no study in {redact_url(url)} yet: run one first, or check --home / --storage")
        chosen = [study] if study is not None else names
        reports = [_refresh(url, name, view_url, rebuild=True) for name in chosen]
    except StudyError as error:
        fail(str(error))
    # from here a terminated 'tuner dashboard' stops cleanly, with its server: SIGTERM sets a flag checked
    # while the server starts and between refreshes (an exception raised inside a refresh could be caught
    # on its way out and leave it running)
    terminated = threading.Event()
    if not refresh_only:
        signal.signal(signal.SIGTERM, lambda signum, frame: terminated.set())
    for report in reports:
        out.print(
            f"view of {report.study_name}: {report.trials} trials ({report.complete} on the dashboard as "
            f"COMPLETE, {report.pruned} PRUNED, {report.failed} FAIL, {report.unfinished} unfinished); "
            f"tuner front: {list(report.front)}",
            highlight=False,
            soft_wrap=True,
        )
    out.print(f"view storage: {redact_url(view_url)}", highlight=False, soft_wrap=True)
    if refresh_only:
        return
    _serve(
        url,
        chosen,
        view_url,
        host,
        port,
        root,
        interval,
        startup_timeout,
        reports[0].study_id if len(reports) == 1 else None,
        terminated,
    )


def _refresh(url: str, name: str, view_url: str, rebuild: bool = False) -> ViewReport:
    from tuner.tracking.dashboard import refresh_view

    return refresh_view(url, name, view_url, rebuild=rebuild)


def _serve(
    url: str,
    names: list[str],
    view_url: str,
    host: str,
    port: int,
    root: Path,
    interval: float,
    startup_timeout: float,
    study_id: int | None,
    terminated: threading.Event,
) -> None:
    """Run optuna-dashboard on ``view_url`` until Ctrl-C or ``terminated`` is set (SIGTERM), refreshing
    the views every ``interval`` s."""
    from tuner.tracking.dashboard_server import DashboardError, start_dashboard, study_page, wait_ready
    from tuner.tracking.ui import stop_server

    chosen_port = listen_port(host, port)
    base = f"http://{host}:{chosen_port}"
    log_path = root / "dashboard.log"
    if terminated.is_set():
        return
    try:
        process = start_dashboard(view_url, host, chosen_port, log_path)
    except OSError as error:
        fail(f"cannot start optuna-dashboard: {error}")
    try:
        if not wait_ready(base, startup_timeout, process, stop=terminated):
            return  # terminated while the server started: the finally clause stops it
        out.print(
            f"optuna-dashboard: {study_page(base, study_id) if study_id is not None else base}",
            highlight=False,
            soft_wrap=True,
        )
        sys.stdout.flush()
        while process.poll() is None and not terminated.wait(interval):
            for name in names:
                try:
                    _refresh(url, name, view_url)
                except Exception as error:  # noqa: BLE001 - the server keeps serving the last view
                    err.print(
                        f"[yellow]view of {name} not refreshed: {escape(redact_text(str(error))[:300])}[/]",
                        highlight=False,
                        soft_wrap=True,
                    )
        if not terminated.is_set():
            err.print(f"optuna-dashboard exited with status {process.returncode} (log: {log_path})")
    except DashboardError as error:
        fail(f"{error} (log: {log_path})")
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(process)
