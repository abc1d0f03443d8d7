"""tuner: auto-tuning of the inference settings of video-generation and audio-visual models.

The names a script needs (see :mod:`tuner.api`)::

    import tuner
    opened = tuner.create_study("search_spaces/avatar_demo.yaml", study_name="demo")
    summary = tuner.run_study(opened)
    tuner.export_config(opened, "best.yaml", profile="balanced")

Everything is imported lazily: ``import tuner`` loads nothing heavy, so worker
processes and the CLI pay only for what they use. The package layout (one
folder per step of a trial's path) is drawn in ``docs/design.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # the names import tuner offers, loaded on first use (__getattr__); aliased as themselves: re-exported
    from tuner.api import create_study as create_study
    from tuner.api import export_config as export_config
    from tuner.api import load_study as load_study
    from tuner.api import run_study as run_study
    from tuner.errors import StudyError as StudyError
    from tuner.ship.export import ExportError as ExportError
    from tuner.spec.loading import load_spec as load_spec
    from tuner.spec.models import SpecError as SpecError
    from tuner.spec.models import StudySpec as StudySpec
    from tuner.study.listeners import Summary as Summary
    from tuner.study.studies import OpenStudy as OpenStudy

_PUBLIC: dict[str, str] = {
    "load_spec": "tuner.spec.loading",
    "StudySpec": "tuner.spec.models",
    "SpecError": "tuner.spec.models",
    "create_study": "tuner.api",
    "load_study": "tuner.api",
    "run_study": "tuner.api",
    "export_config": "tuner.api",
    "OpenStudy": "tuner.study.studies",
    "Summary": "tuner.study.listeners",
    "StudyError": "tuner.storage.opening",
    "ExportError": "tuner.ship.export",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
