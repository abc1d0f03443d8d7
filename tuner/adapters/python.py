"""The ``python`` adapter: a user's model behind ``module:factory``, loaded once, run per call.

The factory (``workload.python.factory``, called with ``workload.python.kwargs``)
returns an object with two methods::

    load(static_params: dict) -> None          # weights, compile, offload...; not timed
    run(params: dict, inputs: dict) -> Output  # one request / batch; timed

``Output`` is a :class:`~tuner.workloads.base.WorkloadOutput` or a mapping with
its field names (``video``, ``audio``, ``audio_rate``, ``text``, ``items``,
``counters``). ``static_params`` holds the values of ``reload_on`` (parameters
such as precision, CPU offload or torch.compile that need a new load); the
adapter calls ``load`` only when they differ from the loaded ones, so a warm
worker (:class:`~tuner.runner.warm.WarmRunner`) keeps the model across trials.
An optional ``unload()`` is called before a reload and at teardown, an optional
``synchronize()`` replaces the default torch CUDA sync. Timing is in-process
with device synchronisation, and allocator peaks are read by the worker.

An optional ``warmup_calls(params) -> int`` asks for untimed calls first (compiling a new shape);
``knows_warmup = True`` on the model says that count is exact (``measurement.warmup: auto`` then skips the
warm-up of a setting already warm: :mod:`tuner.runner.measure.warmup`); an optional
``warmup_settings(params) -> dict | None`` gives a cheaper call that warms the same things (the warm-up
calls are made with it).

An optional ``declared_weights(inputs) -> {name: path}`` names the weight files
the model reads; the worker records their sha256 with each trial (export provenance).
An optional ``weights_identity(inputs) -> str`` says which weights ran:
``random:<preset>:<seed>`` for a network built from its config with seeded random
weights, ``path:<dir>`` for a weights directory; recorded as ``runtime.weights_identity``.
Optional ``call_spans()`` and ``call_structure()`` report the last ``run``'s spans and cost structure
(:mod:`tuner.evaluators.runtime.spans`, :mod:`tuner.evaluators.runtime.structure`).

Counters ``adapter_loads`` (loads by this process so far) and ``adapter_calls``
are added to every output, so a study shows how often its model was loaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.workloads.base import InvalidSetting, RunContext, Workload, WorkloadOutput

_OUTPUT_FIELDS = ("video", "audio", "audio_rate", "text", "items", "counters")


def load_factory(path: str) -> Any:
    """Import ``module:callable``; errors name the path."""
    module_name, _, name = path.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module '{module_name}' has no attribute '{name}' (workload.python.factory)") from None


def as_output(value: Any, factory: str) -> WorkloadOutput:
    """A model's ``run`` result as a WorkloadOutput (TypeError naming the factory when it is neither)."""
    if isinstance(value, WorkloadOutput):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - set(_OUTPUT_FIELDS)
        if unknown:
            raise TypeError(
                f"{factory}: run() returned unknown output keys {sorted(unknown)} (use {', '.join(_OUTPUT_FIELDS)})"
            )
        fields = dict(value)
        fields.setdefault("counters", {})
        fields["counters"] = dict(fields["counters"])
        return WorkloadOutput(**fields)
    raise TypeError(f"{factory}: run() returned {type(value).__name__}, not a WorkloadOutput or a mapping")


def python_invocation(
    factory: str,
    factory_kwargs: Mapping[str, Any],
    reload_on: list[str],
    settings: Mapping[str, Any],
    inputs: Mapping[str, Any],
    seed: int,
    device: str,
) -> dict[str, Any]:
    """How production runs this setting of a factory, as plain data (``tuner.config/v1`` ``invocation``)::

        model = factory(**factory_kwargs); model.load(load_params); model.run(kwargs, inputs)

    ``load_params`` are the ``reload_on`` values of ``settings`` (parameters plus derived
    values), ``kwargs`` all of them. ``seed`` and ``device`` are the study's and the trial's;
    the adapter does not pass them to the model (its ``factory_kwargs`` carry them, if it takes them).
    """
    return {
        "kind": "python",
        "interface": "factory",
        "target": factory,
        "factory_kwargs": dict(factory_kwargs),
        "reload_on": list(reload_on),
        "load_params": {name: settings[name] for name in reload_on if name in settings},
        "kwargs": dict(settings),
        "inputs": dict(inputs),
        "seed": seed,
        "device": device,
    }


class PythonAdapterWorkload(Workload):
    """Runs the spec's ``python`` block (see module docs). ``options`` = the block as plain data."""

    loads_in_process = 0  # class-wide: every load by this process, whatever the instance

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.factory_path = str(options["factory"])
        self.kwargs = dict(options.get("kwargs", {}))
        self.reload_on = list(options.get("reload_on", []))
        self.model: Any = None
        self.loaded_static: dict[str, Any] | None = None
        self.invocation: dict[str, Any] | None = None
        self._calls = 0

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        """Build the model once; ``load`` it again only when the ``reload_on`` values change."""
        missing = [name for name in self.reload_on if name not in params]
        if missing:
            raise InvalidSetting(f"reload_on names {missing}, which the setting lacks")
        static = {name: params[name] for name in self.reload_on}
        if self.model is None:
            self.model = load_factory(self.factory_path)(**self.kwargs)
            for method in ("load", "run"):
                if not callable(getattr(self.model, method, None)):
                    raise TypeError(
                        f"{self.factory_path} returned {type(self.model).__name__}, which has no {method}() method"
                    )
        if static != self.loaded_static:
            if self.loaded_static is not None and callable(getattr(self.model, "unload", None)):
                self.model.unload()
            self.loaded_static = None
            self.model.load(dict(static))
            self.loaded_static = static
            PythonAdapterWorkload.loads_in_process += 1
        self.invocation = python_invocation(
            self.factory_path, self.kwargs, self.reload_on, params, context.inputs, context.seed, context.device
        )

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        if self.model is None or self.loaded_static != {name: params.get(name) for name in self.reload_on}:
            self.setup(params, context)
        self._calls += 1
        output = as_output(self.model.run(dict(params), dict(context.inputs)), self.factory_path)
        output.counters["adapter_loads"] = float(PythonAdapterWorkload.loads_in_process)
        output.counters["adapter_calls"] = float(self._calls)
        return output

    def synchronize(self) -> None:
        custom = getattr(self.model, "synchronize", None)
        if callable(custom):
            custom()
        else:
            super().synchronize()

    def warmup_calls(self, params: Mapping[str, Any]) -> int:
        """The model's ``warmup_calls(params)``, when it has one; else 0."""
        needed = getattr(self.model, "warmup_calls", None)
        return int(needed(dict(params))) if callable(needed) else 0

    def knows_warmup(self) -> bool:
        """The model's ``knows_warmup`` (a bool: its ``warmup_calls`` is exact), when it has one; else False."""
        return bool(getattr(self.model, "knows_warmup", False))

    def warmup_settings(self, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The model's ``warmup_settings(params)`` (a cheaper call that warms the same things), when it has one;
        else None."""
        light = getattr(self.model, "warmup_settings", None)
        found = light(dict(params)) if callable(light) else None
        return dict(found) if found is not None else None

    def call_spans(self) -> Mapping[str, float] | None:
        """The model's ``call_spans()`` (seconds of its last ``run`` by span), when it has one; else None."""
        spans = getattr(self.model, "call_spans", None)
        return dict(spans()) if callable(spans) else None

    def call_structure(self) -> Mapping[str, Any] | None:
        """The model's ``call_structure()`` (phases and per-step seconds of its last ``run``), when it has one;
        else None."""
        structure = getattr(self.model, "call_structure", None)
        return dict(structure()) if callable(structure) else None

    def declared_weights(self, context: RunContext) -> Mapping[str, Path]:
        """The model's ``declared_weights(inputs)``, when it has one; else none."""
        declare = getattr(self.model, "declared_weights", None)
        if not callable(declare):
            return {}
        return {str(name): Path(path) for name, path in dict(declare(dict(context.inputs))).items()}

    def weights_identity(self, context: RunContext) -> str | None:
        """The model's ``weights_identity(inputs)`` (``random:<preset>:<seed>`` or ``path:<dir>``), when it
        has one; else None."""
        identify = getattr(self.model, "weights_identity", None)
        return str(identify(dict(context.inputs))) if callable(identify) else None

    def teardown(self) -> None:
        if self.model is not None and callable(getattr(self.model, "unload", None)):
            self.model.unload()
        self.model = None
        self.loaded_static = None
