"""How a chosen setting is run natively by its workload, outside the tuner.

:func:`render_invocation` turns a spec and one setting (parameters plus
derived values) into the form a user pastes into production, used by
``tuner export`` (issue 5) and filled in per adapter (issue 6):

* ``class:`` workloads (Python classes run by the worker) and the ``python``
  adapter: ``{"kind": "python", "target": "module:Name", "kwargs": {...}}``;
* the ``command`` adapter: ``{"kind": "command", "argv": [...], "env": {...},
  "cwd": ...}`` — ``argv`` exactly as the runner passes it to ``execve``;
* the ``http`` adapter: ``{"kind": "http", "url": ..., "body": {...}}``.

:func:`runnable_invocation` (what ``tuner export`` writes) adds, for the two
python kinds, everything a production script needs to run the setting from the
YAML alone (``docs/examples/run_exported.py``): ``interface`` (``workload``: a
:class:`~tuner.workloads.base.Workload` class built with no arguments, then
``setup(kwargs, context)`` and ``run(kwargs, context)`` with
``context = RunContext(device, seed, inputs, workdir)``; ``factory``:
``model = target(**factory_kwargs); model.load(load_params); model.run(kwargs, inputs)``),
``factory_kwargs``, ``reload_on``, ``load_params``, ``inputs``, ``seed`` and ``device``.
``kwargs`` stays the setting (parameters plus derived values) run() receives. A spec with several inputs
(``cases``) renders its first input's (one request).

This module runs in the coordinator process: it never imports the workload
(nor torch). Values are plain YAML-safe types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.adapters.http_request import body_template, http_concurrency, http_request_values
from tuner.adapters.python import python_invocation
from tuner.adapters.template import TemplateError, render_command, render_text, render_value
from tuner.spec.models import StudySpec
from tuner.spec.quality.cases import first_input_values


def render_invocation(spec: StudySpec, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The native invocation of ``settings`` (parameters and derived values) for ``spec``'s workload.

    The result is a YAML-safe mapping whose ``kind`` says how to read it (see
    module docs). Raises ``ValueError`` when ``settings`` lacks a value the
    workload's invocation needs, naming it.
    """
    work = spec.workload
    if work.command is not None:
        try:
            rendered = render_command(work.options, settings, first_input_values(spec), spec.seed)
        except TemplateError as error:
            raise ValueError(f"cannot render the command: {error}") from None
        return {"kind": "command", **rendered}
    if work.http is not None:
        values = {**first_input_values(spec), **dict(settings)}
        request = http_request_values(work.http.model_dump(mode="json"), first_input_values(spec), settings, 0)
        try:
            return {
                "kind": "http",
                "url": render_text(work.http.url, values, "url"),
                "api": work.http.api,
                "body": render_value(body_template(work.http.model_dump(mode="json")), request),
                "concurrency": http_concurrency(work.http.concurrency, values),
            }
        except TemplateError as error:
            raise ValueError(f"cannot render the http request: {error}") from None
    if work.python is not None:
        return {
            "kind": "python",
            "target": work.python.factory,
            "factory_kwargs": dict(work.python.kwargs),
            "reload_on": list(work.python.reload_on),
            "kwargs": dict(settings),
        }
    return {"kind": "python", "target": work.target, "kwargs": dict(settings)}


def runnable_invocation(spec: StudySpec, settings: Mapping[str, Any], device: str) -> dict[str, Any]:
    """:func:`render_invocation`, and for ``class:`` and ``python`` workloads every argument of the
    calls that run it (see module docs): ``device`` is where the trial ran (``cpu`` / ``cuda``).
    Raises ``ValueError`` like :func:`render_invocation`."""
    work = spec.workload
    if work.python is not None:
        return python_invocation(
            work.python.factory,
            work.python.kwargs,
            list(work.python.reload_on),
            settings,
            first_input_values(spec),
            spec.seed,
            device,
        )
    if work.adapter is None:
        return {
            "kind": "python",
            "interface": "workload",
            "target": work.target,
            "factory_kwargs": {},
            "reload_on": [],
            "load_params": None,
            "kwargs": dict(settings),
            "inputs": first_input_values(spec),
            "seed": spec.seed,
            "device": device,
        }
    return render_invocation(spec, settings)
