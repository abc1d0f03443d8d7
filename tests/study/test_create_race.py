"""Two ``tuner run --study-name X`` started together: the loser gets one line and exit 2 (issue 24).

``create_study`` checks that the name is free, then creates the study; another run may
create it in between. The race is made deterministic here: the existence check sees the
storage as it was, and the study is created from a second storage handle right after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

import tuner.study.studies as studies
from tuner.cli.main import main
from tuner.errors import StudyError
from tuner.spec.loading import load_spec
from tuner.storage.opening import open_storage

SPEC = Path(__file__).resolve().parents[1] / "specs" / "fake_ok.yaml"


def lose_the_race(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make ``create_study``'s storage see no study ``name``, which another handle then creates."""
    real_open = studies.open_storage

    def open_after_the_check(url: str, *args: Any, **kwargs: Any) -> Any:
        storage = real_open(url, *args, **kwargs)
        before = storage.get_all_studies()
        optuna.create_study(storage=open_storage(url), study_name=name)  # the other run wins

        def stale_listing() -> Any:
            storage.get_all_studies = real_listing  # type: ignore[method-assign]
            return before

        real_listing = storage.get_all_studies
        storage.get_all_studies = stale_listing  # type: ignore[method-assign]
        return storage

    monkeypatch.setattr(studies, "open_storage", open_after_the_check)


def test_a_study_created_between_the_check_and_the_create_is_a_study_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = load_spec(SPEC)
    lose_the_race(monkeypatch, "x")
    with pytest.raises(StudyError) as info:
        studies.create_study(spec, SPEC.read_text(), url, "x", "tpe", None, {})
    message = str(info.value)
    assert "\n" not in message and "skip-if-exists" not in message, message
    assert "study 'x' already exists" in message and "'tuner resume x'" in message, message
    assert "another run" in message, message
    winner = optuna.load_study(study_name="x", storage=url)
    assert winner.user_attrs == {} and winner.trials == [], "the winner's study is left as it was"


def test_tuner_run_losing_the_race_says_resume_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    lose_the_race(monkeypatch, "x")
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit) as info:
        main(["run", str(SPEC), "--study-name", "x", "--home", str(home), "--no-mlflow"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert info.value.code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error: study 'x' already exists"), captured.err
    assert "tuner resume x" in lines[0] and "internal error" not in lines[0], lines[0]
