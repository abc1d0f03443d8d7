"""One exception tree: every exception class in tuner/ derives from TunerError, and the CLI maps it.

The classes are found by importing each module that defines a class with an exception-like
base (parsed with :mod:`ast` first, so nothing heavy is imported for modules without one).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from tuner.cli.main import error_answer
from tuner.errors import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, InputError, StudyError, TunerError, WorkloadError

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("tuner.workloads.avatar_dit", "tuner.workloads.avqa", "tuner.adapters.factories")  # torch at import


def _modules_defining_classes() -> list[str]:
    names = []
    for path in sorted((ROOT / "tuner").rglob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.ClassDef) and node.bases for node in tree.body):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_exception_class_of_the_tuner_is_a_tuner_error() -> None:
    found: list[type[BaseException]] = []
    for name in _modules_defining_classes():
        if name.startswith(HEAVY):
            pytest.importorskip("torch")
        module = importlib.import_module(name)
        found += [
            kind
            for _, kind in inspect.getmembers(module, inspect.isclass)
            if issubclass(kind, BaseException)
            and not issubclass(kind, Warning)  # a warning is no error
            and kind.__module__ == module.__name__
        ]
    assert len(found) >= 30, [kind.__name__ for kind in found]
    strays = [f"{kind.__module__}.{kind.__name__}" for kind in found if not issubclass(kind, TunerError)]
    assert strays == [], f"derive these from tuner.errors.TunerError (a category of it): {strays}"


def test_the_spec_error_is_part_of_the_tree() -> None:
    from tuner.spec.models import SpecError

    assert issubclass(SpecError, InputError)
    assert issubclass(SpecError, ValueError) and issubclass(StudyError, RuntimeError), "builtin bases kept"


def test_the_cli_maps_the_tree_to_its_exit_statuses() -> None:
    from tuner.spec.extras import MissingExtra
    from tuner.workloads.base import InvalidSetting

    assert error_answer(StudyError("no study 'x' in this storage"), "tuner status") == (
        "no study 'x' in this storage",
        EXIT_USER_ERROR,
    )
    assert error_answer(InvalidSetting("steps must be even"), "tuner run") == ("steps must be even", EXIT_USER_ERROR)
    assert isinstance(InvalidSetting("x"), WorkloadError)
    line, status = error_answer(MissingExtra("fastapi", "serve", "tuner serve"), "tuner serve")
    assert status == EXIT_USER_ERROR and "pip install" in line
    line, status = error_answer(KeyError("bug"), "tuner run")
    assert status == EXIT_INTERNAL_ERROR and line.startswith("internal error: KeyError")
