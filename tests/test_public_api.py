"""The names users script against are pinned, resolve, and cost nothing to import."""

from __future__ import annotations

import subprocess
import sys

import tuner

PUBLIC = [
    "ExportError",
    "OpenStudy",
    "SpecError",
    "StudyError",
    "StudySpec",
    "Summary",
    "create_study",
    "export_config",
    "load_spec",
    "load_study",
    "run_study",
]


def test_public_names_are_pinned() -> None:
    assert tuner.__all__ == PUBLIC


def test_every_public_name_resolves() -> None:
    for name in PUBLIC:
        value = getattr(tuner, name)
        assert value.__name__ == name


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        tuner.no_such_name  # noqa: B018 - the lookup is the test
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("tuner.no_such_name resolved")


def test_import_tuner_is_light() -> None:
    code = "import sys, tuner; print(sorted(m for m in ('optuna', 'torch', 'mlflow', 'pydantic') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_study_scripted_end_to_end(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """load a spec, create a study, run it, load it again, export: the CLI's path as functions."""
    from pathlib import Path

    import yaml

    spec_path = Path(__file__).parent / "specs" / "fake_ok.yaml"
    assert tuner.load_spec(spec_path).name == "fake_demo"
    opened = tuner.create_study(spec_path, study_name="scripted", home=tmp_path, trials=4)
    summary = tuner.run_study(opened, home=tmp_path, use_mlflow=False)
    assert summary.study_name == "scripted" and summary.measured == 4
    assert (tmp_path / "scripted" / "best.yaml").is_file()
    again = tuner.load_study("scripted", home=tmp_path)
    assert len(again.study.trials) == summary.recorded
    path = tuner.export_config(again, tmp_path / "knee.yaml", policy="knee")
    document = yaml.safe_load(path.read_text())
    assert document["schema"] == "tuner.config/v1" and document["provenance"]["study"] == "scripted"
    try:
        tuner.create_study(spec_path, study_name="scripted", home=tmp_path)
    except tuner.StudyError as error:
        assert "already exists" in str(error)
    else:
        raise AssertionError("a second study of the same name was created")
