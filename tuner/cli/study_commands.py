"""The study commands of ``tuner``: validate, run, resume, status, schema.

Registered on :data:`tuner.cli.app.app` when imported (by :mod:`tuner.cli.main`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from tuner.cli.app import (
    DeviceHoursOption,
    HomeOption,
    MlflowOption,
    StorageOption,
    WallTimeOption,
    app,
    counted,
    err,
    fail,
    finite,
    out,
)
from tuner.errors import StudyError
from tuner.search.guards import measurement_settings
from tuner.spec.loading import load_spec
from tuner.spec.models import SamplerName, SpecError, spec_json_schema
from tuner.storage import attributes as names
from tuner.storage.opening import storage_url, tuner_home
from tuner.storage.records import StudyRecord
from tuner.study.studies import load_study

if TYPE_CHECKING:
    from tuner.session.run import RunOptions
    from tuner.study.studies import OpenStudy

MemoryModelOption = typer.Option(
    True,
    "--memory-model/--no-memory-model",
    help="Skip settings predicted to run out of memory (from the OOMs and memory peaks "
    "measured so far, and a warm start's), recorded SKIPPED_PREDICTED_OOM.",
)
GpuHourOption = typer.Option(
    None,
    "--gpu-hour-usd",
    min=0.0,
    metavar="USD",
    help="Price of one GPU-hour for the cost metrics (cost_per_output_usd...): replaces "
    "the spec's cost block for this run, as TUNER_GPU_HOUR_USD does.",
)
CpuHourOption = typer.Option(
    None,
    "--cpu-hour-usd",
    min=0.0,
    metavar="USD",
    help="Price of one CPU slot-hour for the cost metrics of a CPU study, as TUNER_CPU_HOUR_USD does.",
)
WarmStartStorageOption = typer.Option(
    None, "--warm-start-storage", metavar="URL", help="Storage of the --warm-start study (default: this run's storage)."
)


def _finish(opened: OpenStudy, options: RunOptions) -> None:
    """Run the session and exit: 0 when the study ran (whatever its trials' outcomes), 3 when it
    stopped early because continuing would waste its budget, 130 when interrupted."""
    from tuner.cli.session import run_in_terminal

    try:
        summary = run_in_terminal(opened, options, out, err)
    except StudyError as error:
        fail(str(error))
    raise typer.Exit(3 if summary.failure is not None else 130 if summary.interrupted else 0)


def _load_runnable(spec_path: Path, sampler: str | None = None, host: bool = True) -> tuple[Any, str, str]:
    """(spec, text, device) of a spec a run can start on this host; else one line and exit 2.

    ``validate`` and ``run`` both come through here, so what validate passes, run starts.
    """
    from tuner.spec.loading import key_line
    from tuner.spec.quality.reference_shape import shape_warning
    from tuner.study.preflight import check_runnable

    if sampler is not None and sampler not in ("tpe", "nsga2", "gp", "random", "grid"):
        fail(f"--sampler: unknown sampler '{sampler}' (use tpe, nsga2, gp, random or grid)")
    try:
        spec = load_spec(spec_path)
        text = spec_path.read_text()
        device = check_runnable(spec, text, str(spec_path), sampler, host)  # type: ignore[arg-type]
    except SpecError as error:
        fail(str(error))
    warning = shape_warning(spec, spec.measured_metrics)
    if warning is not None:
        typer.echo(
            f"{spec_path}:{key_line(text, ('reference_shape',)) if spec.reference_shape else 1}: warning: {warning}",
            err=True,
        )
    return spec, text, device


def _resolve_device(requested: str) -> str:
    from tuner.gpu import resolve_device

    try:
        return resolve_device(requested)
    except ValueError as error:
        fail(f"workload.device: {error}")
        raise


@app.command()
def validate(
    spec_path: Path = typer.Argument(..., help="Spec YAML file."),
    spec_only: bool = typer.Option(
        False,
        "--spec-only",
        help="Check the file alone, not this host (device, workload import): e.g. a GPU spec on a laptop.",
    ),
) -> None:
    """Check a spec as 'tuner run' would on this host (sampler, workload import, device); runs nothing."""
    spec, _, device = _load_runnable(spec_path, host=not spec_only)
    where = "spec only" if spec_only else f"device {device}"
    counts = ", ".join(
        counted(len(items), noun)
        for items, noun in (
            (spec.parameters, "parameter"),
            (spec.objectives, "objective"),
            (spec.constraints, "constraint"),
            (spec.rules, "rule"),
        )
    )
    out.print(f"{spec_path}: ok ({where}) — {counts}")
    out.print(f"proposals: {escape(spec.sampler.summary())}")


@app.command()
def run(
    spec_path: Path = typer.Argument(..., help="Spec YAML file."),
    storage: str | None = StorageOption,
    study_name: str | None = typer.Option(None, "--study-name", help="Default: <spec>-<gpu>-<time>."),
    trials: int | None = typer.Option(None, "--trials", min=1, help="Trials to measure (overrides the spec)."),
    device_hours: float | None = DeviceHoursOption,
    sampler: str | None = typer.Option(None, "--sampler", help="tpe | nsga2 | gp | random | grid."),
    workers: int = typer.Option(1, "--workers", min=1, help="Trials in parallel (one per GPU / CPU share)."),
    wall_time: float | None = WallTimeOption,
    mlflow_uri: str | None = MlflowOption,
    no_mlflow: bool = typer.Option(False, "--no-mlflow", help="Do not log to MLflow."),
    home: Path | None = HomeOption,
    memory_model: bool = MemoryModelOption,
    warm_start: str | None = typer.Option(
        None,
        "--warm-start",
        metavar="STUDY",
        help="A finished study of the same spec on other hardware: its "
        "front runs first, its memory evidence informs the memory model.",
    ),
    warm_start_storage: str | None = WarmStartStorageOption,
    gpu_hour_usd: float | None = GpuHourOption,
    cpu_hour_usd: float | None = CpuHourOption,
) -> None:
    """Create a study from SPEC and run it until its budget is spent."""
    _price_override(gpu_hour_usd, cpu_hour_usd)
    from tuner.gpu import gpu_type
    from tuner.search.warm_start import enqueue_front, open_source
    from tuner.session.run import RunOptions
    from tuner.storage.store import set_study_attribute
    from tuner.study.studies import create_study, default_study_name, study_attributes

    started = time.monotonic()  # the wall-time budget counts from here: the whole command keeps it
    spec, text, device = _load_runnable(spec_path, sampler)
    root = tuner_home(home)
    url = storage_url(storage, root)
    source_url = storage_url(warm_start_storage, root) if warm_start_storage else url
    try:
        source = open_source(source_url, warm_start, spec) if warm_start is not None else None
    except StudyError as error:
        fail(str(error))
    kind = gpu_type() if device == "cuda" else "cpu"
    name = study_name or default_study_name(spec, kind)
    chosen: SamplerName = sampler or spec.sampler.name  # type: ignore[assignment]
    attributes = study_attributes(spec, text, device, kind)
    try:
        opened = create_study(spec, text, url, name, chosen, trials, attributes, device_hours=device_hours)
    except StudyError as error:
        fail(str(error))
    if wall_time is not None:
        set_study_attribute(opened.study, names.BUDGET_WALL_TIME_S, wall_time or None)
    _say(
        f"study [bold]{escape(name)}[/] in {escape(_shown(url))} — sampler {chosen}, device {device}, workers {workers}"
    )
    _say(f"proposals: {escape(spec.sampler.summary(chosen))}")
    if source is not None:
        record = enqueue_front(opened.study, opened.spec, opened.storage_url, source)
        _say(
            f"warm start from [bold]{escape(source.study_name)}[/]: {record['front_enqueued']} front setting(s) "
            f"queued after the reference and baseline ({record['dropped']} outside this spec's space, "
            f"{record['already_queued']} already queued); {record['observations']} memory observations"
        )
    _finish(
        opened,
        RunOptions(
            root,
            device,
            workers,
            None if no_mlflow else mlflow_uri,
            not no_mlflow,
            {},
            memory_model=memory_model,
            warm_start_storage=source_url if warm_start_storage else None,
            started=started,
        ),
    )


def _price_override(gpu_hour_usd: float | None, cpu_hour_usd: float | None) -> None:
    """``--gpu-hour-usd`` / ``--cpu-hour-usd``: the prices every worker of this run reads
    (:data:`tuner.spec.measure.price.GPU_PRICE_ENV`, :data:`~tuner.spec.measure.price.CPU_PRICE_ENV`)."""
    import os

    from tuner.spec.measure.price import CPU_PRICE_ENV, GPU_PRICE_ENV

    for name, value in ((GPU_PRICE_ENV, gpu_hour_usd), (CPU_PRICE_ENV, cpu_hour_usd)):
        if value is not None:
            os.environ[name] = repr(float(value))


@app.command()
def resume(
    study: str = typer.Argument(..., help="Study name."),
    storage: str | None = StorageOption,
    trials: int | None = typer.Option(None, "--trials", min=1, help="New total of measured trials."),
    device_hours: float | None = DeviceHoursOption,
    sampler: str | None = typer.Option(None, "--sampler"),
    workers: int = typer.Option(1, "--workers", min=1),
    wall_time: float | None = WallTimeOption,
    mlflow_uri: str | None = MlflowOption,
    no_mlflow: bool = typer.Option(False, "--no-mlflow"),
    home: Path | None = HomeOption,
    timeout: float | None = typer.Option(
        None, "--timeout", min=1, callback=finite, help="Seconds per trial from now on (replaces workload.timeout_s)."
    ),
    warmup: int | None = typer.Option(None, "--warmup", min=0, help="Untimed calls before timing (measurement)."),
    min_repeats: int | None = typer.Option(None, "--min-repeats", min=1, help="Fewest timed repeats."),
    max_repeats: int | None = typer.Option(None, "--max-repeats", min=1, help="Most timed repeats."),
    cv_target: float | None = typer.Option(None, "--cv-target", min=0.0001, help="Stop repeating below this CV."),
    memory_model: bool = MemoryModelOption,
    warm_start_storage: str | None = WarmStartStorageOption,
    gpu_hour_usd: float | None = GpuHourOption,
    cpu_hour_usd: float | None = CpuHourOption,
) -> None:
    """Continue a study (after a crash or kill, with a larger --trials, or a larger --timeout)."""
    _price_override(gpu_hour_usd, cpu_hour_usd)
    from tuner.session.run import RunOptions

    started = time.monotonic()  # the wall-time budget counts from here
    root = tuner_home(home)
    url = storage_url(storage, root)
    try:
        opened = load_study(url, study, sampler)  # type: ignore[arg-type]
    except (StudyError, SpecError) as error:
        fail(str(error))
    overrides: dict[str, Any] = {}
    if trials is not None:
        overrides[names.BUDGET_TRIALS] = trials
    if wall_time is not None:
        overrides[names.BUDGET_WALL_TIME_S] = wall_time or None
    if device_hours is not None:
        overrides[names.BUDGET_DEVICE_HOURS] = device_hours
    if timeout is not None:
        overrides[names.TIMEOUT_OVERRIDE] = timeout
    measurement = {
        key: value
        for key, value in (
            ("warmup", warmup),
            ("min_repeats", min_repeats),
            ("max_repeats", max_repeats),
            ("cv_target", cv_target),
        )
        if value is not None
    }
    stored = StudyRecord.of(opened.study)
    if measurement:
        merged = {**stored.measurement_overrides, **measurement}
        try:
            measurement_settings(opened.spec, {names.MEASUREMENT_OVERRIDES: merged})
        except ValueError as error:
            fail(str(error))
        overrides[names.MEASUREMENT_OVERRIDES] = merged
    device = stored.device or _resolve_device(opened.spec.workload.device)
    _say(f"resuming [bold]{escape(study)}[/] in {escape(_shown(url))}")
    source_url = storage_url(warm_start_storage, root) if warm_start_storage else None
    _finish(
        opened,
        RunOptions(
            root,
            device,
            workers,
            None if no_mlflow else mlflow_uri,
            not no_mlflow,
            overrides,
            memory_model=memory_model,
            warm_start_storage=source_url,
            started=started,
        ),
    )


@app.command()
def status(
    study: str | None = typer.Argument(None, help="Study name (omit to list studies)."),
    storage: str | None = StorageOption,
    home: Path | None = HomeOption,
    sort: str | None = typer.Option(
        None,
        "--sort",
        metavar="COLUMN",
        help="Order by number, outcome, role, front, an objective or metric (best "
        "first), or a parameter; '-' before it reverses (e.g. --sort=-psnr_db).",
    ),
    outcome: list[str] | None = typer.Option(
        None,
        "--outcome",
        metavar="OUTCOME",
        help="Only trials with this outcome (OK, OOM, TIMEOUT, CRASH, INVALID, "
        "SKIPPED_PREDICTED_OOM, RUNNING, ...); repeat it or give a comma list.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print every trial (or study) as JSON, nothing cut."),
) -> None:
    """List studies, or show one study's trials: one line a trial (objectives with units, front marker, params)."""
    from tuner.cli.status_view import aligned, render_status, study_list_entries

    url = storage_url(storage, tuner_home(home))
    try:
        if study is None:
            studies = study_list_entries(url)
            if as_json:
                typer.echo(json.dumps(studies, indent=2))
                return
            rows = [["study", "trials", "used", "wasted"]] + [
                [
                    entry["study"],
                    str(entry["trials"]),
                    f"{entry['used_device_h']:.4g} {entry['unit']}",
                    f"{entry['wasted_device_h']:.4g} {entry['unit']}",
                ]
                for entry in studies
            ]
            for line in aligned(rows, {1, 2, 3}):
                out.print(line, markup=False, highlight=False, soft_wrap=True)
            return
        opened = load_study(url, study, read_only=True)
        lines = render_status(opened, sort, outcome, as_json, out.width)
    except (StudyError, SpecError, ValueError) as error:
        fail(str(error))
    if as_json:
        typer.echo(lines[0])
        return
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def schema(output: Path = typer.Option(Path("search_spaces/schema.json"), "--output", "-o")) -> None:
    """Write the spec's JSON Schema (for editors)."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(spec_json_schema(), indent=2) + "\n")
    except OSError as error:
        fail(f"cannot write the schema to {output}: {error.strerror or error}")
    out.print(f"wrote {output}")


def _say(markup: str) -> None:
    """One line of rich ``markup`` on ``out``, broken between words at its width without trailing blanks."""
    from rich.text import Text

    from tuner.cli.session import fitted_text

    for line in fitted_text(Text.from_markup(markup), out):
        out.print(line, soft_wrap=True)


def _shown(url: str) -> str:
    from tuner.secrets import redact_url

    return redact_url(url)
