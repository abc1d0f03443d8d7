"""The ``tuner.config/v1`` document: the exported production setting, as pydantic models.

An exported YAML validates against :class:`ConfigV1` and dumps back to the
same document (every key is always written, ``null`` when unknown), so the
schema is the contract production tooling reads
(``ConfigV1.model_json_schema(by_alias=True)`` gives it as JSON Schema). Units: seconds (``_s``), GB (``_gb``), items per
second; ``speedup`` is baseline latency / chosen latency (> 1: faster);
``quality_delta`` is chosen − baseline in the metric's unit.

Noise (issue 11): ``spread.noisy`` is :attr:`tuner.storage.records.TrialRecord.noisy`
(latency CV above :data:`tuner.storage.records.NOISY_CV`); ``warnings`` lists, in
words, why a number in the document is not to be taken as a fact (a noisy shipped
trial, a noisy baseline under the speed-up); ``selection.replaced_noisy_trial`` is
the noisy trial the policy picked and the exporter replaced by this stable one
within its spread. Both were added to v1 with defaults (``[]``, ``null``), so files
exported before them still load; new files always write them.

Runnable exports and full provenance (issue 15), added to v1 the same way: a
``kind: python`` ``invocation`` (:class:`PythonInvocation`) carries the call
production makes -- ``interface``, ``target``, ``factory_kwargs``, ``load_params``,
``kwargs`` (run's params), ``inputs``, ``seed``, ``device``
(:func:`tuner.ship.invocation.runnable_invocation`); ``provenance`` adds ``git``
(:class:`GitState`), ``packages``, ``runtime`` (:class:`Runtime`: Python, torch,
CUDA / cuDNN, driver, threads), ``weights`` (sha256 per declared file) and
``source`` (where they were captured: the trial, or the study's creation when the
trial recorded none); ``env`` is the allow-listed environment the trial ran with
(:mod:`tuner.runner.recorded_env`), secrets masked (``null``: not recorded).

What finding the setting cost (issue 26), added to v1 the same way: ``provenance.cost``
(:class:`CostBlock`, ``null`` in files exported before it): the study's device-hours used /
wasted / avoided at export time (:mod:`tuner.storage.cost`), the trials in each, and the chosen
trial's own device-seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from tuner.errors import InputError

SCHEMA = "tuner.config/v1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricEntry(_Model):
    """One metric: value (null when unavailable), unit, better direction, why unavailable."""

    value: float | None
    unit: str | None
    direction: str | None
    unavailable: str | None


class ObjectiveEntry(_Model):
    value: float
    direction: Literal["minimize", "maximize"]


class Spread(_Model):
    """Latency spread of a trial's repeats (seconds, CV dimensionless; ``noisy``: CV above the noisy threshold)."""

    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_cv: float | None
    repeats: int | None
    noisy: bool | None


class QualityDelta(_Model):
    delta: float | None
    direction: Literal["minimize", "maximize"]


class Comparison(_Model):
    """Chosen against baseline: ``speedup`` = baseline / chosen on ``speed_metric``."""

    speed_metric: str
    speedup: float | None
    quality_delta: dict[str, QualityDelta]


class Baseline(_Model):
    trial: int
    params: dict[str, Any]
    derived: dict[str, Any]
    outcome: str
    metrics: dict[str, MetricEntry]
    spread: Spread
    comparison: Comparison


class Headline(_Model):
    """What the chosen trial's speed-up is stated against (:mod:`tuner.front.headline`): the baseline when it meets
    the export rule, else the reference; ``speedup`` = comparator / chosen on ``speed_metric``; how the baseline
    fails the rule (``baseline_misses``; ``baseline_meets_rule`` null without a baseline)."""

    against: Literal["baseline", "reference"]
    trial: int
    speed_metric: str | None
    speedup: float | None
    text: str
    baseline_meets_rule: bool | None
    baseline_misses: list[str]


class Selection(_Model):
    """How the trial was chosen: the policy text, the rule in words with where it came from (the spec's
    ``export``, the command line, the default; None in files exported before rules), the profile if any,
    what it chose among."""

    policy: str
    rule: str | None = None
    profile: Literal["fast", "balanced", "quality"] | None
    feasible_trials: int
    front_size: int
    on_front: bool
    replaced_noisy_trial: int | None = None
    headline: Headline | None = None  # added to v1 with a default: files exported before it still load


class PythonInvocation(_Model):
    """A ``class:`` or ``python`` workload's setting as production calls it (see module docs).

    ``interface: workload``: ``w = target(); w.setup(kwargs, ctx); w.run(kwargs, ctx)`` with
    ``ctx = RunContext(device, seed, inputs, workdir)``. ``interface: factory``:
    ``m = target(**factory_kwargs); m.load(load_params); m.run(kwargs, inputs)``.
    ``interface`` is null in files exported before it existed (only ``target`` and ``kwargs``).
    """

    kind: Literal["python"]
    target: str
    kwargs: dict[str, Any]
    interface: Literal["workload", "factory"] | None = None
    factory_kwargs: dict[str, Any] = Field(default_factory=dict)
    reload_on: list[str] = Field(default_factory=list)
    load_params: dict[str, Any] | None = None
    inputs: dict[str, Any] | None = None
    seed: int | None = None
    device: str | None = None


def _invocation_kind(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return "python" if kind == "python" else "native"


Invocation = Annotated[
    Annotated[PythonInvocation, Tag("python")] | Annotated[dict[str, Any], Tag("native")],
    Discriminator(_invocation_kind),
]
"""``kind: python`` is a :class:`PythonInvocation`; ``command`` / ``http`` stay their native mapping
(:func:`tuner.ship.invocation.render_invocation`)."""


class GitState(_Model):
    """The git checkout of the workload's source: ``commit`` (``HEAD``) and ``dirty`` (tracked files
    changed), or all null and ``reason`` (not a checkout, no git)."""

    repository: str | None
    commit: str | None
    dirty: bool | None
    reason: str | None


class Runtime(_Model):
    """The interpreter and accelerator stack a trial ran on; a null value's reason is in ``unavailable``.

    ``torch_cuda``: ``torch.version.cuda`` (the CUDA runtime torch was built with);
    ``cudnn``: ``torch.backends.cudnn.version()`` (e.g. 92400 = 9.24.0); ``driver``: the NVIDIA
    driver (NVML); ``torch_threads``: intra-op threads the trial used.
    """

    python: str | None
    platform: str | None
    torch: str | None
    torch_cuda: str | None
    cudnn: int | None
    cuda_available: bool | None
    driver: str | None
    torch_threads: int | None
    unavailable: dict[str, str]


class WeightsFile(_Model):
    """A declared weights file: resolved path, size in bytes, sha256 (hex) of its bytes."""

    path: str
    bytes: int
    sha256: str


class CostBlock(_Model):
    """What finding this setting cost: the study's device time when it was exported (every run, every host).

    ``unit``: ``GPU-h`` (a CUDA study) or ``CPU-h`` (CPU-slot hours). ``used_device_h``: runs measured OK;
    ``wasted_device_h``: runs that ended OOM / TIMEOUT / CRASH / INVALID or were interrupted;
    ``recorded_device_h`` = used + wasted = the trials' recorded device-seconds (``recorded_device_s``,
    ``runs`` of them) in hours; ``avoided_device_h``: an estimate (``avoided_estimate`` says how) of what
    copies, predicted OOMs and refused settings did not spend, never part of the recorded total.
    ``*_trials``: the trials in each sum by outcome (avoided: by kind). ``trial_device_s``: the chosen
    trial's own run (wall seconds x the slot's devices). ``budget_device_hours``: the study's budget, if any.
    """

    unit: str
    device: str
    used_device_h: float
    wasted_device_h: float
    avoided_device_h: float
    recorded_device_h: float
    recorded_device_s: float
    runs: int
    used_trials: dict[str, int]
    wasted_trials: dict[str, int]
    avoided_trials: dict[str, int]
    avoided_estimate: str
    runs_without_cost: int
    trial_device_s: float | None
    budget_device_hours: float | None


class Provenance(_Model):
    study: str
    trial: int
    role: str
    storage: str
    spec_name: str | None
    spec_hash: str | None
    sampler: str | None
    measured_at: str | None
    exported_at: str
    tuner_version: str
    source: Literal["trial", "study"] | None = None
    git: GitState | None = None
    packages: dict[str, str | None] = Field(default_factory=dict)
    runtime: Runtime | None = None
    weights: dict[str, WeightsFile] = Field(default_factory=dict)
    weights_identity: str | None = None
    """Which weights the measuring trial ran: ``random:<preset>:<seed>`` (built from a published config with
    seeded random weights: its quality figures are agreement with the reference setting of an untrained
    network, not output quality) or ``path:<dir>``; None when the workload does not say."""
    cost: CostBlock | None = None
    """What finding this setting cost (:class:`CostBlock`); None in files exported before it was recorded."""


class CheckBlock(_Model):
    """What ``tuner check`` needs to re-measure: the study's spec, device, reference and baseline settings."""

    spec_yaml: str
    device: str
    reference: dict[str, Any] | None
    baseline: dict[str, Any] | None


class ConfigV1(_Model):
    """The exported setting (see module docs)."""

    schema_: Literal["tuner.config/v1"]
    workload: str | None
    selection: Selection
    params: dict[str, Any]
    derived: dict[str, Any]
    invocation: Invocation | None
    objectives: dict[str, ObjectiveEntry]
    metrics: dict[str, MetricEntry]
    spread: Spread
    timing: dict[str, float | None]
    baseline: Baseline | None
    gpu: dict[str, str]
    provenance: Provenance
    check: CheckBlock
    warnings: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=lambda name: "schema" if name == "schema_" else name
    )

    def to_document(self) -> dict[str, Any]:
        """The plain YAML-able document (key ``schema``, every key present)."""
        document: dict[str, Any] = self.model_dump(mode="json", by_alias=True)
        return document


class ConfigError(InputError):
    """A config file that is not a valid ``tuner.config/v1`` document; the message names file and key."""


def validate_config(document: Any, source: str = "<config>") -> ConfigV1:
    """Validate ``document``; raises :class:`ConfigError` naming ``source``, the key and the problem."""
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: not a mapping (got {type(document).__name__})")
    if document.get("schema") != SCHEMA:
        raise ConfigError(f"{source}: schema: expected '{SCHEMA}', found {document.get('schema')!r}")
    try:
        return ConfigV1.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{source}: {where}: {first['msg']} ({error.error_count()} problem(s))") from None


def load_config(path: Path) -> ConfigV1:
    """Read and validate a config YAML file."""
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not YAML: {error}") from None
    return validate_config(document, str(path))
