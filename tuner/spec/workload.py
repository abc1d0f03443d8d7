"""The ``workload`` section of a spec: a ``class`` or exactly one adapter block, and its name checks.

:class:`WorkloadSpec` is the validated section; :func:`check_adapter_names` is the
cross-check ``StudySpec`` runs once parameters, derived values and inputs are
known (every template placeholder, ``when:`` flag and ``reload_on`` name must
exist). The adapter blocks themselves are in :mod:`tuner.spec.adapters`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.spec.adapters import (
    ADAPTER_CLASSES,
    COMMAND_NAMES,
    HTTP_METRICS,
    HTTP_NAMES,
    CommandSpec,
    HttpSpec,
    PythonSpec,
    output_path_problems,
    template_names,
)
from tuner.spec.metrics import STREAMING_METRICS, base_metric
from tuner.spec.outputs import audio_from_input_problem
from tuner.spec.quality.cases import listed_input_values

if TYPE_CHECKING:
    from tuner.spec.models import StudySpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadSpec(_Strict):
    """Which workload to run and how: exactly one of ``class``, ``command``, ``python``, ``http``.

    ``class_path`` is always the ``module:Class`` the worker runs: the ``class``
    given, or the adapter's class (:data:`tuner.spec.adapters.ADAPTER_CLASSES`).
    ``worker``: ``fresh`` (a new process per trial), ``warm`` (one long-lived
    process per slot that keeps the loaded model), ``auto`` (warm for ``python``).
    ``timeout_s`` (seconds per trial; per input of a spec with ``cases``) adapts by default: the reference gets 3x,
    search trials at least 3x the reference's wall time (:mod:`tuner.search.guards`);
    ``timeout_mode: fixed`` pins it.
    ``max_trial_dir_gb``: what a trial may leave in its directory (GB); past it, once the trial's
    result is read, the files the tuner does not need are deleted largest first until it fits
    (``trial_scratch: clean``) or kept (``keep``), and either is named in the trial's reason
    (:mod:`tuner.runner.scratch`).
    """

    class_path: str | None = Field(default=None, alias="class")
    command: CommandSpec | None = None
    python: PythonSpec | None = None
    http: HttpSpec | None = None
    timeout_s: float = Field(default=300.0, gt=0, allow_inf_nan=False)
    timeout_mode: Literal["adaptive", "fixed"] = "adaptive"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    torch_threads: int | None = Field(default=None, ge=1)
    worker: Literal["auto", "fresh", "warm"] = "auto"
    max_trial_dir_gb: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    trial_scratch: Literal["clean", "keep"] = "clean"

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("class_path")
    @classmethod
    def _import_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        module, _, name = value.partition(":")
        if not module or not name or not all(p.isidentifier() for p in module.split(".")) or not name.isidentifier():
            raise ValueError(f"'{value}' is not an import path of the form package.module:ClassName")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> WorkloadSpec:
        given = [
            k
            for k in ("class", "command", "python", "http")
            if (self.class_path if k == "class" else getattr(self, k)) is not None
        ]
        if len(given) != 1:
            raise ValueError(f"give exactly one of class, command, python, http (got {given or 'none'})")
        if self.class_path is None:
            self.__dict__["class_path"] = ADAPTER_CLASSES[self.adapter or ""]
        return self

    @property
    def adapter(self) -> str | None:
        """``command``, ``python``, ``http``, or None for a ``class`` workload."""
        return next((k for k in ("command", "python", "http") if getattr(self, k) is not None), None)

    @property
    def target(self) -> str:
        """The ``module:Class`` the worker runs (never None after validation)."""
        assert self.class_path is not None
        return self.class_path

    @property
    def import_paths(self) -> dict[str, str]:
        """Spec key -> ``module:name`` the worker imports (for an early "cannot find module")."""
        paths = {"workload.class": self.target}
        if self.python is not None:
            paths["workload.python.factory"] = self.python.factory
        return paths

    @property
    def options(self) -> dict[str, Any]:
        """The adapter block as plain data, handed to the adapter's class in the worker."""
        if self.adapter is None:
            return {}
        block = getattr(self, self.adapter)
        return {"adapter": self.adapter, **block.model_dump(mode="json")}

    @property
    def gpus_per_trial(self) -> int:
        return self.command.gpus if self.command is not None else 1

    @property
    def warm(self) -> bool:
        return self.worker == "warm" or (self.worker == "auto" and self.python is not None)

    def declared_metrics(self) -> dict[str, tuple[str, str]]:
        """Metrics the adapter measures: name -> (unit, direction)."""
        if self.command is not None:
            return {m.name: (m.unit, m.direction) for m in self.command.metrics}
        if self.http is not None:
            return dict(HTTP_METRICS)
        return {}


def check_adapter_names(spec: StudySpec) -> None:
    """Every template placeholder and adapter name must be a parameter, derived value or input."""
    known = set(spec.parameters) | set(spec.derived) | spec.input_keys
    work = spec.workload
    block: Any = work.command or work.python or work.http
    extra: tuple[str, ...] = COMMAND_NAMES if work.command else HTTP_NAMES if work.http else ()
    if work.http is not None and work.http.prompts is not None:
        for values in listed_input_values(spec):
            prompts = values.get(work.http.prompts)
            if not isinstance(prompts, list) or not prompts:
                raise ValueError(f"workload.http.prompts: input '{work.http.prompts}' must be a non-empty list")
    for path, text in block.templates() if work.command or work.http else []:
        for name in template_names(text):
            if name not in known and name not in extra:
                raise ValueError(
                    f"workload.{work.adapter}.{path}: placeholder {{{name}}} is not a parameter, "
                    f"derived value or input (known: {sorted(known | set(extra))})"
                )
    if work.command is not None:
        for path, name in work.command.flag_names():
            parameter = spec.parameters.get(name)
            if name not in spec.derived and (parameter is None or parameter.type != "bool"):
                raise ValueError(f"workload.command.{path}: '{name}' must be a bool parameter or a derived value")
        for path, problem in output_path_problems(work.command, spec.input_keys):
            raise ValueError(f"workload.command.{path}: {problem}")
        streamed = sorted({base_metric(name) for name in spec.used_metrics} & set(STREAMING_METRICS))
        if streamed and work.command.chunks is None:
            raise ValueError(
                f"workload.command: the spec names {streamed[0]}, which a command reports from the "
                f"chunk markers it prints: declare chunks: {{pattern: 'chunk ready', output_s: 0.5}}"
            )
        for values in listed_input_values(spec):
            audio_problem = audio_from_input_problem(work.command.outputs, values)
            if audio_problem is not None:
                raise ValueError(f"workload.command.outputs.audio_from_input: {audio_problem}")
    if work.python is not None:
        for name in work.python.reload_on:
            if name not in spec.parameters and name not in spec.derived:
                raise ValueError(f"workload.python.reload_on: '{name}' is not a parameter or derived value")
