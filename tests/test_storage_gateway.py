"""One storage gateway: only it names Optuna's attributes and private members (issue 25).

Trial and study attributes are read and written through :mod:`tuner.study.attributes`
(every name, the readers of a stored trial), :mod:`tuner.study.records` (typed records)
and :mod:`tuner.study.store` (typed writes, every Optuna internal). Every other module of
``tuner/`` is scanned here and must not contain:

* ``user_attr`` / ``system_attr`` anywhere on a line (``user_attrs``, ``set_user_attr``,
  ``system_attrs``, ``set_trial_user_attr``, ``get_study_system_attrs`` ..., comments and
  docstrings included: ``grep -rn "user_attrs\\|set_user_attr\\|system_attrs" tuner/``
  finds the gateway only);
* a private Optuna name as an identifier or as a string (``getattr(x, "_backend")``):
  :data:`PRIVATE_NAMES`, any ``_cached_...``;
* an import of a private Optuna module (``optuna.storages._rdb``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

GATEWAY = frozenset({"tuner/study/attributes.py", "tuner/study/records.py", "tuner/study/store.py",
                     "tuner/study/store_rows.py"})

SUBCLASSES_OPTUNA = frozenset({
    "tuner/study/tolerant_storage.py",  # subclasses Optuna's RDBStorage: wraps its methods, named one by one
})

ATTRIBUTE_WORDS = re.compile(r"user_attr|system_attr")
PRIVATE_NAMES = frozenset({"_storage", "_trial_id", "_study_id", "_backend", "_suggest", "_get_stale_trial_ids"})
PRIVATE_PREFIXES = ("_cached_",)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _private(name: str) -> bool:
    return name in PRIVATE_NAMES or name.startswith(PRIVATE_PREFIXES)


def violations(path: Path) -> list[str]:
    """Where ``path`` names Optuna's attributes or private members (``file:line: what``)."""
    text = path.read_text()
    where = _relative(path)
    found = [f"{where}:{number}: {line.strip()[:100]}" for number, line in enumerate(text.splitlines(), 1)
             if ATTRIBUTE_WORDS.search(line)]
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        name = token.string if token.type == tokenize.NAME else None
        if token.type == tokenize.STRING:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):
                value = None
            name = value if isinstance(value, str) else None
        if name is not None and _private(name):
            found.append(f"{where}:{token.start[0]}: Optuna's private {name}")
    for node in ast.walk(ast.parse(text)):
        modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                   else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for module in modules:
            parts = module.split(".")
            if parts[0] == "optuna" and any(part.startswith("_") for part in parts[1:]):
                found.append(f"{where}:{getattr(node, 'lineno', 0)}: imports Optuna's private module {module}")
    return found


def _modules() -> list[Path]:
    return sorted((ROOT / "tuner").rglob("*.py"))


def test_only_the_gateway_names_optuna_attributes_and_internals() -> None:
    found = [line for path in _modules()
             if (relative := _relative(path)) not in GATEWAY | SUBCLASSES_OPTUNA
             for line in violations(path)]
    assert not found, ("read and write attributes through tuner.study.attributes / records / store:\n"
                       + "\n".join(found))


def test_the_gateway_exists_and_is_what_it_says() -> None:
    """The scan is not vacuous: the gateway itself names what others may not; each module stays small."""
    for relative in GATEWAY:
        path = ROOT / relative
        assert path.is_file(), relative
        assert len(path.read_text().splitlines()) < 400, f"{relative}: split it (house style: < ~400 lines)"
    assert violations(ROOT / "tuner/study/store.py"), "store.py is where Optuna's internals are named"


def test_the_scan_catches_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "tuner" / "sample.py"
    sample.parent.mkdir()
    sample.write_text('import optuna.storages._rdb.models\n'
                      'x = trial.user_attrs\n'
                      'storage.set_trial_system_attr(1, "k", 2)\n'
                      'y = getattr(study, "_backend", None)\n'
                      'z = study._study_id\n'
                      'w = trial._cached_frozen_trial\n')
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = violations(sample)
    finally:
        ROOT = saved
    assert [line.split(":")[1] for line in found] == ["2", "3", "4", "5", "6", "1"], found
