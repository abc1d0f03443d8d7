"""Exhaustive tables of measured settings, the hardware types they stand for, and replay specs.

A table is a CSV written by ``bench/tables/build_tables.py`` (its docstring has the format): one
row per setting of a search space, columns the spec's parameter names, ``outcome``, ``reason``,
``latency_p50_s``, ``latency_repeats``, ``peak_rss_gb``, then quality metrics. Cells are text
(``True`` / ``False``, ``fp32``, numbers); they are parsed to the types of the spec's parameters.
A JSON sidecar next to the CSV (same name, ``.json``) names the spec, the parameters held
``fixed`` and the spec ``inputs`` it overrode (``inputs_override``, e.g. a cheaper proxy of the
workload); while a table is still being measured the sidecar may be missing, and the declaration
in ``hardware_types.yaml`` stands in for it (when both exist they must agree).

**Hardware types** (``bench/tables/hardware_types.yaml``): each table stands for a hardware type
with a *declared* host memory, ``memory_cap_gb`` (GB = 1e9 bytes): the replay pretends to run on
a host with that much memory, so a setting whose measured ``peak_rss_gb`` is above the cap is an
OOM there (the measuring host itself had more). The caps are choices of the benchmark, not facts
of the host; :func:`over_cap_fraction` says what share of a table a cap makes OOM. A cap of
``null`` declares no memory limit: nothing replays as OOM and the replay spec has no memory
constraint (for tables whose ``peak_rss_gb`` is not per setting: sidecar
``"peak_rss_per_setting": false`` — such a column is not replayed at all, so a replayed study
records no peak it could pass on, e.g. to a warm start's memory model).

**Feasible** (the exhaustive front's population): the recorded outcome is OK, the peak is within
the cap, both objectives are available and every non-memory constraint of the spec holds —
judged by :func:`tuner.search.objectives.judge` on the replayed result, so the front computed
here is exactly the one a replayed study can reach.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import InputError
from tuner.replay.hypervolume import nondominated
from tuner.results import Direction, Metric, Outcome, TrialResult
from tuner.search.objectives import judge, plan_constraints
from tuner.spec.candidate import canonical_key
from tuner.spec.loading import load_spec, parse_spec
from tuner.spec.metrics import catalogue_entry
from tuner.spec.models import SamplerName, StudySpec
from tuner.spec.space import grid

HARDWARE_TYPES_PATH = Path(__file__).resolve().parents[2] / "bench" / "tables" / "hardware_types.yaml"
FIXED_COLUMNS = ("outcome", "reason", "latency_p50_s", "latency_repeats", "peak_rss_gb")
MEMORY_METRIC = "peak_rss_gb"
DROPPED_CONSTRAINT_PREFIXES = ("peak_vram", MEMORY_METRIC)  # replaced by the declared cap on peak_rss_gb
NOT_IN_TABLE = "not in table"


class TableError(InputError):
    """A table, sidecar or hardware-type file that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class HardwareType:
    """A declared host a table stands for: ``table`` (the space) measured as ``name`` (e.g. ``cpu1t``)
    at ``table_path``, with ``memory_cap_gb`` of host memory (declared, see the module docstring);
    ``fixed`` parameters and overridden spec ``inputs`` as the table was measured."""

    table: str
    name: str
    table_path: Path
    memory_cap_gb: float | None
    spec_path: Path
    fixed: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.table}:{self.name}"


def load_hardware_types(path: Path = HARDWARE_TYPES_PATH) -> dict[str, HardwareType]:
    """Every declared hardware type in ``path``, keyed by ``<table>:<hardware>`` (e.g. ``avqa:cpu2t``).

    Table paths are relative to the file's directory; spec paths to it or any directory above it.
    """
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise TableError(f"{path}: cannot read hardware types: {error}") from None
    if not isinstance(data, dict):
        raise TableError(f"{path}: expected a mapping of table name -> {{spec, fixed, hardware}}")
    types: dict[str, HardwareType] = {}
    for table, entry in data.items():
        try:
            spec_path = _find(path.parent, str(entry["spec"]))
            fixed = dict(entry.get("fixed") or {})
            inputs = dict(entry.get("inputs") or {})
            for name, hardware in dict(entry["hardware"]).items():
                kind = HardwareType(
                    str(table),
                    str(name),
                    path.parent / str(hardware["table"]),
                    _cap(hardware["memory_cap_gb"]),
                    spec_path,
                    fixed,
                    inputs,
                )
                types[kind.label] = kind
        except (KeyError, TypeError, ValueError) as error:
            raise TableError(f"{path}: table {table!r}: {type(error).__name__}: {error}") from None
    return types


def _cap(value: Any) -> float | None:
    return None if value is None else float(value)


def _find(base: Path, relative: str) -> Path:
    """``relative`` resolved against ``base`` or the nearest directory above it where it exists."""
    if Path(relative).is_absolute():
        return Path(relative)
    for directory in (base, *base.resolve().parents):
        if (directory / relative).exists():
            return directory / relative
    raise TableError(f"{relative} not found from {base} or any directory above it")


@dataclass(frozen=True)
class MeasuredRow:
    """One measured setting: typed ``params``, the recorded outcome and reason, and the metric
    cells (``None`` where the cell is empty)."""

    params: Mapping[str, Any]
    outcome: Outcome
    reason: str
    values: Mapping[str, float | None]


@dataclass(frozen=True)
class MeasuredTable:
    """A loaded table: its hardware type, the space's spec, and the rows by canonical key."""

    hardware: HardwareType
    spec: StudySpec
    spec_text: str
    parameter_names: tuple[str, ...]
    metric_names: tuple[str, ...]
    rows: Mapping[str, MeasuredRow]
    space_size: int
    sidecar: Mapping[str, Any] = field(default_factory=dict)

    @property
    def memory_cap_gb(self) -> float | None:
        return self.hardware.memory_cap_gb

    @property
    def complete(self) -> bool:
        """Every setting of the (fixed-narrowed) space has a row."""
        return len(self.rows) >= self.space_size

    def lookup(self, params: Mapping[str, Any]) -> MeasuredRow | None:
        """The row of the setting ``params`` (extra keys, e.g. derived values, are ignored)."""
        return self.rows.get(canonical_key({name: params[name] for name in self.parameter_names if name in params}))

    def result(self, params: Mapping[str, Any]) -> TrialResult:
        """What a run of ``params`` on this hardware type records (see :func:`replayed_result`)."""
        return replayed_result(self.lookup(params), self.memory_cap_gb, self.metric_names)


def replayed_result(row: MeasuredRow | None, cap_gb: float | None, metric_names: Sequence[str]) -> TrialResult:
    """The table's record as a TrialResult: OK with the row's metrics; OOM when the measured peak is
    above the declared cap; INVALID / CRASH / OOM / TIMEOUT as recorded; CRASH when not in the table."""
    if row is None:
        return TrialResult(Outcome.CRASH, reason=f"replayed: {NOT_IN_TABLE}")
    peak = row.values.get(MEMORY_METRIC)
    if row.outcome is not Outcome.OK:
        return TrialResult(row.outcome, reason=row.reason or f"replayed: recorded {row.outcome.value}")
    if peak is not None and cap_gb is not None and peak > cap_gb:
        return TrialResult(Outcome.OOM, reason=f"replayed: measured peak {peak:g} GB > declared cap {cap_gb:g} GB")
    metrics: dict[str, Metric] = {}
    for name in metric_names:
        unit, direction = metric_unit(name)
        value = row.values.get(name)
        metrics[name] = (
            Metric(name, value, unit, direction)
            if value is not None
            else Metric.unavailable(name, unit, direction, "not recorded in the table")
        )
    return TrialResult(Outcome.OK, metrics=metrics)


def metric_unit(name: str) -> tuple[str, Direction]:
    """(unit, direction) of a metric name from the catalogue (:func:`tuner.spec.metrics.catalogue_entry`)."""
    entry = catalogue_entry(name)
    if entry is None:
        raise TableError(f"unknown metric column {name!r} (not in tuner.spec.metrics)")
    return entry


def load_table(hardware: HardwareType) -> MeasuredTable:
    """Read ``hardware``'s CSV and sidecar; cells parsed to the spec's parameter types."""
    path = hardware.table_path
    sidecar = _sidecar(hardware)
    spec = load_spec(hardware.spec_path)
    values = grid(spec)
    for name, value in hardware.fixed.items():
        if name not in spec.parameters or not spec.parameters[name].contains(value):
            raise TableError(f"{hardware.label}: fixed {name}={value!r} is not a value of the spec's parameter")
        values[name] = [value]
    names = tuple(spec.parameters)
    try:
        handle = path.open(newline="")
    except OSError as error:
        raise TableError(f"{path}: cannot read table: {error.strerror or error}") from None
    with handle:
        reader = csv.DictReader(handle)
        header = tuple(reader.fieldnames or ())
        missing = [c for c in (*names, *FIXED_COLUMNS) if c not in header]
        if missing:
            raise TableError(f"{path}: missing column(s) {missing}")
        metrics = tuple(c for c in header if c not in names and c not in ("outcome", "reason", "latency_repeats"))
        for name in metrics:
            metric_unit(name)
        if sidecar.get("peak_rss_per_setting") is False:  # the measuring process's history: not replayed
            metrics = tuple(m for m in metrics if m != MEMORY_METRIC)
        rows: dict[str, MeasuredRow] = {}
        for line, cells in enumerate(reader, start=2):
            if any(cells.get(c) is None for c in (*names, "outcome")):
                continue  # a row still being written (the table is measured while it is read)
            params = {name: _parse_cell(spec, name, cells[name], f"{path}:{line}") for name in names}
            for name, value in hardware.fixed.items():
                if params[name] != value:
                    raise TableError(f"{path}:{line}: {name}={params[name]!r}, but the table holds it at {value!r}")
            try:
                outcome = Outcome(cells["outcome"])
            except ValueError:
                raise TableError(f"{path}:{line}: unknown outcome {cells['outcome']!r}") from None
            row = MeasuredRow(
                params,
                outcome,
                cells.get("reason") or "",
                {m: _number(cells.get(m), f"{path}:{line}: {m}") for m in metrics},
            )
            rows.setdefault(canonical_key(params), row)
    return MeasuredTable(
        hardware,
        spec,
        hardware.spec_path.read_text(),
        names,
        metrics,
        rows,
        math.prod(len(v) for v in values.values()),
        sidecar,
    )


def _sidecar(hardware: HardwareType) -> dict[str, Any]:
    """The JSON sidecar (``{}`` while the table is being measured), checked against the declaration."""
    path = hardware.table_path.with_suffix(".json")
    if not path.exists():
        return {}
    try:
        sidecar = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise TableError(f"{path}: cannot read sidecar: {error}") from None
    named = str(sidecar.get("spec", ""))
    if named and not (Path(named) == hardware.spec_path or hardware.spec_path.as_posix().endswith(named)):
        raise TableError(f"{path}: the sidecar names spec {named}, the hardware types declare {hardware.spec_path}")
    if dict(sidecar.get("fixed") or {}) != dict(hardware.fixed):
        raise TableError(
            f"{path}: the sidecar fixes {sidecar.get('fixed')}, the hardware types declare {dict(hardware.fixed)}"
        )
    if dict(sidecar.get("inputs_override") or {}) != dict(hardware.inputs):
        raise TableError(
            f"{path}: the sidecar overrides inputs {sidecar.get('inputs_override')}, the hardware "
            f"types declare {dict(hardware.inputs)}"
        )
    return dict(sidecar)


def _parse_cell(spec: StudySpec, name: str, cell: str, where: str) -> Any:
    parameter = spec.parameters[name]
    try:
        if parameter.type == "int":
            return int(cell)
        if parameter.type == "float":
            return float(cell)
        if parameter.type == "bool":
            if cell.lower() in ("true", "false"):
                return cell.lower() == "true"
        else:
            for choice in parameter.choices:
                if str(choice) == cell:
                    return choice
    except ValueError:
        pass
    raise TableError(f"{where}: {name}={cell!r} is not a value of the spec's parameter")


def _number(cell: str | None, where: str) -> float | None:
    if cell is None or cell.strip() == "":
        return None
    try:
        value = float(cell)
    except ValueError:
        raise TableError(f"{where}: {cell!r} is not a number") from None
    return value if math.isfinite(value) else None


def over_cap_fraction(table: MeasuredTable) -> float:
    """The share of the table's OK rows whose measured peak is above the declared cap."""
    peaks = [r.values.get(MEMORY_METRIC) for r in table.rows.values() if r.outcome is Outcome.OK]
    known = [p for p in peaks if p is not None]
    cap = table.memory_cap_gb
    return sum(1 for p in known if p > cap) / len(known) if known and cap is not None else 0.0


# ------------------------------------------------------------------ replay spec and front
def replay_spec(
    table: MeasuredTable,
    budget_trials: int,
    sampler: SamplerName = "tpe",
    options: Mapping[str, Any] | None = None,
    seed: int = 0,
    skip_dominated: Mapping[str, Any] | None = None,
    reload_lookahead: int | None = None,
    predicted_gain: Mapping[str, Any] | None = None,
) -> tuple[StudySpec, str]:
    """The spec (and its YAML text) a replayed study runs: the table's spec with the fixed parameters
    narrowed to their one value, the table's overridden inputs, its quality constraints plus
    ``peak_rss_gb <= memory_cap_gb`` when a cap is declared (GPU-memory constraints dropped), a budget of ``budget_trials``
    trials (no wall time), the named sampler with ``options``, ``skip_dominated`` (None: off, whatever the
    spec's default), ``reload_lookahead`` (None: the spec's default) and ``predicted_gain`` (None: off), and
    ``seed``.
    No MLflow is involved."""
    data = yaml.safe_load(table.spec_text)
    for name, value in table.hardware.fixed.items():
        data["parameters"][name] = {"type": "categorical", "choices": [value]}
    if table.hardware.inputs:
        data["inputs"] = {**(data.get("inputs") or {}), **table.hardware.inputs}
    kept = [c for c in data.get("constraints") or [] if not str(c["metric"]).startswith(DROPPED_CONSTRAINT_PREFIXES)]
    memory = [{"metric": MEMORY_METRIC, "max": table.memory_cap_gb}] if table.memory_cap_gb is not None else []
    data["constraints"] = [*kept, *memory]
    data["budget"] = {"trials": budget_trials}
    data["sampler"] = {"name": sampler, "options": dict(options or {})}
    data["sampler"]["skip_dominated"] = dict(skip_dominated) if skip_dominated is not None else None
    data["sampler"]["predicted_gain"] = dict(predicted_gain) if predicted_gain is not None else None
    if reload_lookahead is not None:
        data["sampler"]["reload_lookahead"] = reload_lookahead
    data["seed"] = seed
    text = yaml.safe_dump(data, sort_keys=False)
    return parse_spec(text, source=f"replay of {table.hardware.label}"), text


def feasible_values(table: MeasuredTable) -> dict[str, tuple[float, ...]]:
    """Canonical key -> objective values of every feasible setting (see the module docstring)."""
    spec, _ = replay_spec(table, budget_trials=1)
    plan = plan_constraints(spec, {})
    feasible: dict[str, tuple[float, ...]] = {}
    for key, row in table.rows.items():
        verdict = judge(spec, plan, table.result(row.params), [])
        if verdict.feasible and verdict.values is not None:
            feasible[key] = tuple(verdict.values)
    return feasible


def exhaustive_front(table: MeasuredTable) -> dict[str, tuple[float, ...]]:
    """Canonical key -> objective values of the settings on the table's feasible Pareto front."""
    feasible = feasible_values(table)
    front = nondominated(feasible, [o.direction for o in table.spec.objectives])
    return {key: feasible[key] for key in front}
