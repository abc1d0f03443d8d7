"""The ``tuner`` Typer app and what every command shares: consoles, common
options, and :func:`fail` (one clear line on stderr, exit status 2)."""

from __future__ import annotations

import math
from typing import Any, NoReturn

import typer
from rich.console import Console

from tuner.errors import EXIT_USER_ERROR
from tuner.secrets import redact_text


def _flags_show_no_type() -> None:
    """Typer's rich help prints a type after every option, ``<bool>`` after a flag too (``--help <bool>``,
    ``--no-mlflow <bool>``), though a flag takes no value: a flag's type column is left empty (options that
    take a value keep theirs). Applied once, when the app is built."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "tuner_flags_untyped", False):
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag and self.metavar is None else shown(self, ctx)

    display_type_rich.tuner_flags_untyped = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_show_no_type()
app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Auto-tune inference settings of video and audio-visual models."
)
out = Console()
err = Console(stderr=True)


def finite(value: float | None) -> float | None:
    """An option callback refusing ``inf`` and ``nan`` (a time limit that never ends is 0, or no option)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number (got {value})")
    return value


StorageOption = typer.Option(
    None, "--storage", help="Optuna storage URL (env TUNER_STORAGE); default: SQLite under the tuner home."
)
HomeOption = typer.Option(
    None, "--home", help="Directory for the default storage and trial files (env TUNER_HOME; default ./studies)."
)
WallTimeOption = typer.Option(
    None,
    "--wall-time",
    min=0,
    callback=finite,
    help="Seconds this invocation may run (overrides the spec; 0: no limit).",
)
DeviceHoursOption = typer.Option(
    None,
    "--device-hours",
    min=0.000001,
    callback=finite,
    help="Device-hours (GPU-hours; CPU-slot hours on a CPU) the study's runs may "
    "hold, every host together (overrides the spec's budget.device_hours).",
)
MlflowOption = typer.Option(
    None, "--mlflow-uri", help="MLflow tracking URI (env MLFLOW_TRACKING_URI; default sqlite under ./mlflow)."
)


def counted(count: int, noun: str) -> str:
    """``1 rule``, ``2 rules``, ``0 rules``: ``count`` and ``noun`` (its plural by ``s``)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with status 2 (a user-facing failure).

    The message goes through :func:`tuner.secrets.redact_text` first: no CLI error prints a
    password, a token or a secret URL parameter, whatever the caller put in it.
    """
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(redact_text(message))}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_USER_ERROR)


def listen_port(host: str, port: int) -> int:
    """``port`` (a server's ``--port``), else a port free on ``host`` now (:func:`tuner.host.free_port`);
    :func:`fail` when ``host`` is not an address of this machine."""
    from tuner.host import free_port

    try:
        return port or free_port(host)
    except OSError as error:
        fail(
            f"--host {host}: cannot listen there ({error.strerror or error}); use an address of this host, "
            "e.g. 127.0.0.1 or 0.0.0.0"
        )
