"""How a chosen setting is run natively by its workload, outside the tuner.

:func:`render_invocation` turns a spec and one setting (parameters plus
derived values) into the form a user pastes into production, used by
``tuner export`` (issue 5) and filled in per adapter (issue 6):

* ``class:`` workloads (Python classes run by the worker) and the ``python``
  adapter: ``{"kind": "python", "target": "module:Name", "kwargs": {...}}``;
* the ``command`` adapter: ``{"kind": "command", "argv": [...], "env": {...},
  "cwd": ...}`` — ``argv`` exactly as the runner passes it to ``execve``;
* the ``http`` adapter: ``{"kind": "http", "url": ..., "body": {...}}``.

This module runs in the coordinator process: it never imports the workload
(nor torch). Values are plain YAML-safe types.
"""

from __future__ import annotations

from typing import Any, Mapping

from tuner.spec import StudySpec


def render_invocation(spec: StudySpec, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The native invocation of ``settings`` (parameters and derived values) for ``spec``'s workload.

    The result is a YAML-safe mapping whose ``kind`` says how to read it (see
    module docs). Raises ``ValueError`` when ``settings`` lacks a value the
    workload's invocation needs, naming it.
    """
    return {"kind": "python", "target": spec.workload.class_path, "kwargs": dict(settings)}
