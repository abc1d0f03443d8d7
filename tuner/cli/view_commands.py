"""The view commands of ``tuner``: front, export, check, ui, sync-mlflow.

Registered on :data:`tuner.cli.app.app` when imported (by :mod:`tuner.cli.main`). Same
rules as there: a user-facing failure is one clear line on stderr and exit
status 2; ``tuner check`` exits 1 on a regression (a CI gate).
"""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from tuner.cli.app import HomeOption, MlflowOption, StorageOption, app, err, fail, listen_port, out
from tuner.errors import StudyError
from tuner.secrets import redact_url
from tuner.spec.models import SpecError
from tuner.storage.opening import storage_url, tuner_home
from tuner.study.studies import load_study

if TYPE_CHECKING:
    from tuner.storage.records import TrialRecord

VRAM_METRICS = (
    "peak_vram_device_gb",
    "peak_vram_gb",
    "peak_vram_nvml_gb",
)  # device memory: what decides an OOM first (first with values)


@app.command()
def front(
    study: str = typer.Argument(..., help="Study name."),
    storage: str | None = StorageOption,
    home: Path | None = HomeOption,
) -> None:
    """Print the study's Pareto front: objectives with units, key metrics measured here, the speed-up, the
    trial its export rule chooses marked *, varying params under each trial (as the run's closing front)."""
    from dataclasses import replace

    from tuner.cli.session import ConsoleSession
    from tuner.session.finish import choose_export, front_summary
    from tuner.spec.metrics import objective_units
    from tuner.storage.records import NOISY_CV, TrialRecord, record_feasible
    from tuner.tracking.views import ranks_of

    url = storage_url(storage, tuner_home(home))
    try:
        opened = load_study(url, study, read_only=True)
    except (StudyError, SpecError) as error:
        fail(str(error))
    records = [TrialRecord.from_trial(t) for t in opened.study.get_trials(deepcopy=False)]
    names = opened.spec.objective_names
    ranks = ranks_of(records, [o.direction for o in opened.spec.objectives])
    on_front = [n for n, rank in ranks.items() if rank == 0]
    summary = front_summary(opened.spec, records, on_front, choose_export(opened.study))
    extra = _extra_columns(list(summary.front), names)
    units = {**summary.units, **objective_units(extra, (r.metrics for r in records))}
    ConsoleSession(out, err).on_front(replace(summary, extra_metrics=tuple(extra), units=units))
    feasible = sum(1 for r in records if record_feasible(r))
    noisy = sum(1 for r in summary.front if r.noisy)
    said = f"{len(summary.front)} on the front of {feasible} feasible measured trials ({len(records)} recorded)" + (
        f"; {noisy} of them NOISY (latency CV > {NOISY_CV:g}): their latencies are not facts" if noisy else ""
    )
    for line in textwrap.wrap(said, max(out.width, 40), break_long_words=False):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def _extra_columns(front: list[TrialRecord], names: list[str]) -> list[str]:
    """The metric columns ``tuner front`` adds after the objectives: p95 latency, latency CV, memory,
    throughput — each only when some front trial has a value for it (never a column of dashes).

    Memory is what this host measured: the device peak (``peak_vram_device_gb``, else ``peak_vram_gb`` or ``peak_vram_nvml_gb``)
    on a GPU, and the host's ``peak_rss_gb`` (on a CPU the only figure; on a GPU it shows offloading).
    """

    def measured(metric: str) -> bool:
        return any(record.metric_value(metric) is not None for record in front)

    vram = next((m for m in VRAM_METRICS if measured(m)), None)
    wanted = ("latency_p95_s", "latency_cv", *((vram,) if vram else ()), "peak_rss_gb", "throughput_items_per_s")
    return [m for m in wanted if m not in names and measured(m)]


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"


@app.command()
def export(
    study: str = typer.Argument(..., help="Study name."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Default: <home>/<study>/<profile or best>.yaml."),
    policy: str | None = typer.Option(
        None,
        "--policy",
        help="e.g. 'minimize latency_p50_s subject to "
        "stlpips_alex <= 0.15 and peak_vram_gb <= 40', 'knee', "
        "'lexicographic latency_p50_s, psnr_db'.",
    ),
    profile: str | None = typer.Option(None, "--profile", help="fast | balanced | quality (from the front)."),
    objective: str | None = typer.Option(
        None, "--objective", help="Pick the best on this objective (default: the spec's export rule, else the knee)."
    ),
    trial: int | None = typer.Option(None, "--trial", help="Export this trial number instead."),
    storage: str | None = StorageOption,
    home: Path | None = HomeOption,
) -> None:
    """Write the chosen trial as a tuner.config/v1 YAML (setting, metrics, baseline comparison, provenance)."""
    from tuner.ship.export import ExportError, build_config, choose, write_config

    root = tuner_home(home)
    url = storage_url(storage, root)
    try:
        opened = load_study(url, study, read_only=True)
        chosen = choose(opened.study, policy=policy, profile=profile, objective=objective, trial_number=trial)
        document = build_config(
            opened.study,
            chosen.record,
            url,
            chosen.policy,
            chosen.profile,
            replaced_noisy=chosen.replaced.number if chosen.replaced else None,
            rule=chosen.rule,
        )
    except (StudyError, SpecError, ExportError) as error:
        fail(str(error))
    path = write_config(document, output or root / study / f"{profile or 'best'}.yaml")
    comparison = (document.get("baseline") or {}).get("comparison") or {}
    speedup = comparison.get("speedup")
    out.print(
        f"exported trial {chosen.record.number} of {study}, chosen by {chosen.rule}, to {path}"
        + (f" — {speedup:.3g}x the baseline's speed on {comparison['speed_metric']}" if speedup else ""),
        highlight=False,
    )
    if chosen.replaced is not None:
        out.print(
            f"note: the policy picked trial {chosen.replaced.number}, which is noisy (latency CV "
            f"{chosen.replaced.latency_cv or 0:.2g}); shipped stable trial {chosen.record.number} instead, "
            f"within its spread",
            highlight=False,
        )
    for warning in document["warnings"]:
        err.print(f"[bold yellow]warning:[/] {warning}", highlight=False)


@app.command()
def check(
    config: Path = typer.Argument(..., help="A tuner.config/v1 YAML written by 'tuner export'."),
    min_speedup: float | None = typer.Option(None, "--min-speedup", help="Fail below this speed-up over the baseline."),
    max_quality_drop: float | None = typer.Option(
        None,
        "--max-quality-drop",
        help="Fail when a quality objective is worse than the baseline's by more than this (metric units).",
    ),
    rounds: int = typer.Option(
        4, "--rounds", min=1, help="Rounds of baseline and chosen runs (alternating) always run."
    ),
    max_rounds: int | None = typer.Option(
        None, "--max-rounds", min=1, help="Most rounds run while the test is undecided (default: 16)."
    ),
    home: Path | None = HomeOption,
) -> None:
    """Re-measure an exported setting and its baseline; exit 1 on a regression (a statistical test of the speed-up)."""
    from tuner.ship.check import CheckError, run_check
    from tuner.ship.config_schema import ConfigError, load_config

    try:
        document = load_config(config)
        report = run_check(
            document,
            tuner_home(home),
            rounds,
            min_speedup,
            max_quality_drop,
            progress=lambda step: err.print(f"check: {step}", highlight=False),
            max_rounds=max_rounds,
        )
    except (ConfigError, CheckError, SpecError) as error:
        fail(str(error))
    table = Table(
        "setting", f"{report.speed_metric} per round", "median", "CV", "quality", title=f"tuner check {config}"
    )
    for side in (report.baseline, report.chosen):
        table.add_row(
            side.label,
            ", ".join(f"{v:.4g}" for v in side.p50_s),
            f"{side.median_s:.4g} s",
            _number(side.cv),
            ", ".join(f"{k}={v:.4g}" for k, v in side.quality.items()),
        )
    (out if out.is_terminal else Console(width=240)).print(table)
    expected = f"{report.expected_speedup:.3g}x" if report.expected_speedup is not None else "unknown"
    low, high = report.ci
    floors = ", ".join(f"{f.name} floor {f.value:.3g}x" for f in report.floors) or "no floor"
    out.print(
        f"speed-up {report.speedup:.3g}x (95 % CI {low:.3g}x–{high:.3g}x, {report.rounds} rounds; exported "
        f"{expected}, margin {report.margin:.3g}; {floors})"
        + "".join(f"; {k} drop {v:.4g}" for k, v in report.quality_drops.items()),
        highlight=False,
    )
    for note in report.notes:
        err.print(f"[bold yellow]note:[/] {note}", highlight=False)
    if report.failures:
        for failure in report.failures:
            err.print(f"[bold red]regression:[/] {failure}", highlight=False)
        raise typer.Exit(1)
    out.print("[green]check passed[/]")


@app.command("sync-mlflow")
def sync_mlflow(
    study: str = typer.Argument(..., help="Study name."),
    mlflow_uri: str | None = MlflowOption,
    storage: str | None = StorageOption,
    home: Path | None = HomeOption,
) -> None:
    """Rebuild every MLflow view of STUDY from the storage (after an outage, or for an old study)."""
    from tuner.cli.session import mlflow_reachable
    from tuner.tracking.live import mlflow_missing, tracking_uri

    missing = mlflow_missing("tuner sync-mlflow")
    if missing is not None:
        fail(missing)
    from tuner.tracking.sync import sync_study

    uri = tracking_uri(mlflow_uri)
    url = storage_url(storage, tuner_home(home))
    try:
        opened = load_study(url, study, read_only=True)
    except (StudyError, SpecError) as error:
        fail(str(error))
    problem = mlflow_reachable(uri)
    if problem is not None:
        fail(f"MLflow at {redact_url(uri)} is not reachable: {problem}")
    try:
        report = sync_study(opened, uri)
    except Exception as error:  # noqa: BLE001 - any tracking failure is one line for the user
        fail(f"MLflow at {redact_url(uri)}: {type(error).__name__}: {str(error)[:500]}")
    out.print(
        f"synced {study} to {redact_url(uri)} — experiment '{report.experiment_name}', run "
        f"{report.parent_run_id}: {report.logged} trial runs logged, {report.replaced} replaced, "
        f"{report.kept} kept, {report.removed} removed beside a kept one; {report.front_size} on the front"
    )


@app.command()
def ui(
    study: str | None = typer.Argument(None, help="Study whose run URL to print (default: the latest)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (default: localhost only)."),
    port: int = typer.Option(0, "--port", min=0, help="Port (0: a free one)."),
    mlflow_uri: str | None = MlflowOption,
    storage: str | None = StorageOption,
    home: Path | None = HomeOption,
    startup_timeout: float = typer.Option(120.0, "--startup-timeout", help="Seconds to wait for the server."),
) -> None:
    """Start the MLflow UI on the configured store and print the study run's URL and its trials' comparison view
    (Ctrl-C stops it)."""
    from tuner.storage.opening import list_studies
    from tuner.tracking.live import mlflow_missing, tracking_uri
    from tuner.tracking.run_info import study_run_info
    from tuner.tracking.ui import UiError, compare_url, locate_study, run_url, start_server, stop_server, wait_healthy

    missing = mlflow_missing("tuner ui")
    if missing is not None:
        fail(missing)
    uri = tracking_uri(mlflow_uri)
    root = tuner_home(home)
    url = storage_url(storage, root)
    location = None
    try:
        names = [name for name, _ in list_studies(url)]
        name = study or (names[-1] if names else None)
        if name is not None:
            opened = load_study(url, name, read_only=True)
            info = study_run_info(opened.study, opened.spec, opened.storage_url)
            location = locate_study(uri, info.experiment_name, name)
    except (StudyError, SpecError) as error:
        fail(str(error))
    if uri.startswith(("http://", "https://")):
        out.print(run_url(uri, location) if location else redact_url(uri), highlight=False, soft_wrap=True)
        if location is not None and name is not None:
            out.print(compare_url(uri, location, name), highlight=False, soft_wrap=True)
        return
    chosen_port = listen_port(host, port)
    base = f"http://{host}:{chosen_port}"
    try:
        process = start_server(uri, host, chosen_port, root / "mlflow-ui.log")
    except (UiError, OSError) as error:
        fail(
            f"{error} (give --mlflow-uri sqlite:///<path>.db for a local store, or the http(s):// address "
            "of a running MLflow server)"
        )
    signal.signal(signal.SIGTERM, _interrupt)  # a terminated 'tuner ui' stops its server too
    try:
        wait_healthy(base, startup_timeout, process)
        out.print(f"MLflow UI on {redact_url(uri)}: {base}", highlight=False, soft_wrap=True)
        if location is None:
            out.print(
                f"no MLflow run for study {name!r} in this store (rebuild it with 'tuner sync-mlflow')"
                if name
                else "no study in the storage yet",
                highlight=False,
            )
        out.print(
            f"study run: {run_url(base, location)}"
            if location and location.run_id
            else f"experiment: {run_url(base, location)}"
            if location
            else "",
            highlight=False,
            soft_wrap=True,
        )
        if location is not None and name is not None:
            out.print(f"comparison of its trials: {compare_url(base, location, name)}", highlight=False, soft_wrap=True)
        import sys

        sys.stdout.flush()
        process.wait()
        err.print(f"mlflow server exited with status {process.returncode} (log: {root / 'mlflow-ui.log'})")
    except UiError as error:
        fail(f"{error} (log: {root / 'mlflow-ui.log'})")
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(process)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
