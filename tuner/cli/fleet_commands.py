"""The fleet commands of ``tuner``: serve (the HTTP API over the storage) and submit (its client).

Registered on :data:`tuner.cli.app.app` when imported (by :mod:`tuner.cli.main`). Same rules as
there: a user-facing failure is one line on stderr (``error: ...``) and exit status 2; the
bearer token is never printed and URLs only redacted.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import typer

from tuner.cli.app import DeviceHoursOption, HomeOption, StorageOption, app, err, fail, out
from tuner.errors import StudyError
from tuner.secrets import redact_url
from tuner.spec.models import SpecError
from tuner.storage.opening import storage_url, tuner_home

TokenFileOption = typer.Option(None, "--token-file", help="File holding the bearer token (else env TUNER_TOKEN).")


def _token(token_file: Path | None) -> str | None:
    from tuner.fleet.auth import AuthError, load_token

    try:
        return load_token(token_file)
    except AuthError as error:
        fail(str(error))
        raise


@app.command()
def serve(
    storage: str | None = StorageOption,
    home: Path | None = HomeOption,
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (default: localhost only)."),
    port: int = typer.Option(8700, "--port", min=0, max=65535, help="Port (0: a free one)."),
    token_file: Path | None = TokenFileOption,
    insecure_localhost: bool = typer.Option(
        False, "--insecure-localhost", help="Serve without a token (on a loopback address only)."
    ),
    allow_command_workloads: bool = typer.Option(
        False,
        "--allow-command-workloads",
        help="Accept specs with a command or python workload (they run code the spec names on every worker).",
    ),
) -> None:
    """Serve the HTTP API over the study storage: submit, list, cancel, export (see docs/serve.md)."""
    from tuner.fleet.auth import AuthError, check_bind
    from tuner.fleet.service import create_app, listening_socket, run_server, service_url

    token = _token(token_file)
    try:
        check_bind(host, token, insecure_localhost)
    except AuthError as error:
        fail(str(error))
    url = storage_url(storage, tuner_home(home))
    try:
        sock = listening_socket(host, port)
    except OSError as error:
        fail(
            f"--host {host} --port {port}: cannot listen there ({error.strerror or error}); use an address of "
            "this host, e.g. 127.0.0.1"
        )
    try:
        application = create_app(url, token, allow_command_workloads)
    except StudyError as error:
        sock.close()
        fail(str(error))
    _log_to_stderr()
    stopped: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:  # uvicorn re-raises the signal after its shutdown
        stopped.append(signum)

    for kind in (signal.SIGINT, signal.SIGTERM):
        signal.signal(kind, note)
    access = "token required" if token is not None else "NO TOKEN (insecure, localhost only)"
    code = "command workloads allowed" if allow_command_workloads else "command workloads refused"
    out.print(
        f"tuner serve: {service_url(sock)} — storage {redact_url(url)}; {access}; {code}",
        highlight=False,
        soft_wrap=True,
    )
    sys.stdout.flush()
    run_server(application, sock)
    err.print("tuner serve: stopped", highlight=False)


def _log_to_stderr() -> None:
    """The service's own log lines (``tuner.serve``) on stderr, one per event."""
    logger = logging.getLogger("tuner.serve")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tuner serve: %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


@app.command()
def submit(
    spec_path: Path = typer.Argument(..., help="Spec YAML file."),
    server: str = typer.Option(..., "--server", help="Address of 'tuner serve', e.g. http://127.0.0.1:8700."),
    token_file: Path | None = TokenFileOption,
    name: str | None = typer.Option(None, "--name", help="Study name (default: <spec>-<gpu type>-<time>)."),
    trials: int | None = typer.Option(None, "--trials", min=1, help="Trials to measure (overrides the spec)."),
    device_hours: float | None = DeviceHoursOption,
    gpu_type: str | None = typer.Option(
        None, "--gpu-type", help="GPU type the study targets, as workers report it (e.g. 'NVIDIA H200'), or 'cpu'."
    ),
    sampler: str | None = typer.Option(None, "--sampler", help="tpe | nsga2 | gp | random | grid."),
) -> None:
    """Submit SPEC to a 'tuner serve' service: it creates a study that workers of its GPU type pick up."""
    from tuner.fleet.client import ServiceError, call
    from tuner.spec.loading import load_spec

    try:
        load_spec(spec_path)  # a bad spec is one line naming this file, before any network call
        text = spec_path.read_text(encoding="utf-8")
    except SpecError as error:
        fail(str(error))
    token = _token(token_file)
    body: dict[str, Any] = {
        "spec_yaml": text,
        "name": name,
        "trials": trials,
        "gpu_type": gpu_type,
        "sampler": sampler,
        "device_hours": device_hours,
    }
    try:
        answer = call(server, "POST", "/api/studies", token, body)
    except ServiceError as error:
        fail(str(error).replace("submitted spec:", f"{spec_path}:", 1))
    if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
        fail(f"{redact_url(server)}: unexpected answer (is this 'tuner serve'?)")
    out.print(
        f"submitted study {answer['name']} to {redact_url(server)}: gpu type {answer.get('gpu_type')}, "
        f"budget {answer.get('budget_trials')} trials, sampler {answer.get('sampler')}",
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        f"workers on '{answer.get('gpu_type')}' hosts pick it up; follow it at "
        f"{redact_url(server.rstrip('/'))}/api/studies/{answer['name']}",
        highlight=False,
        soft_wrap=True,
    )
