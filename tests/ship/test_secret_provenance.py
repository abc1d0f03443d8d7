"""Views of the storage name it without its password: export provenance, MLflow tags, the UI's run URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.runner.base import Slot
from tuner.search.objectives import plan_constraints
from tuner.ship.export import build_config
from tuner.spec.loading import parse_spec
from tuner.storage.records import TrialRecord, record_feasible
from tuner.study.coordinator import Coordinator
from tuner.study.studies import OpenStudy, create_study
from tuner.testing.inline_runner import InlineRunner
from tuner.tracking.run_info import study_run_info
from tuner.tracking.ui import StudyLocation, run_url

SPEC_TEXT = (Path(__file__).parents[1] / "specs" / "fake_ok.yaml").read_text().replace("trials: 8", "trials: 3")
SECRET = "s3cretPW"
SECRET_URLS = [
    (f"postgresql://:{SECRET}@db.example:5432/studies", "postgresql://:***@db.example:5432/studies"),
    (
        f"postgresql+psycopg://tuner@db.example/studies?sslmode=require&password={SECRET}",
        "postgresql+psycopg://tuner@db.example/studies?sslmode=require&password=***",
    ),
    (
        f"postgresql://tuner:{SECRET}@db.example/studies?password={SECRET}2",
        "postgresql://tuner:***@db.example/studies?password=***",
    ),
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[OpenStudy, TrialRecord]:
    """A small finished study (fake workload, in-process) and one of its feasible trials."""
    home = tmp_path_factory.mktemp("secret_provenance")
    spec = parse_spec(SPEC_TEXT)
    opened = create_study(
        spec,
        SPEC_TEXT,
        f"sqlite:///{home / 'studies.db'}",
        "s",
        "random",
        None,  # type: ignore[arg-type]
        {"spec_name": spec.name},
    )
    plan = plan_constraints(spec, {"gpu_memory_gb": None, "host_memory_gb": 24.0})
    Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=InlineRunner(),
        slots=[Slot(0, None, 1)],
        home=home,
        device="cpu",
        plan=plan,
        budget_trials=opened.study.user_attrs["budget_trials"],
        wall_time_s=None,
    ).run()
    records = [TrialRecord.from_trial(t) for t in opened.study.get_trials(deepcopy=False)]
    return opened, next(r for r in records if record_feasible(r))


@pytest.mark.parametrize(("url", "shown"), SECRET_URLS)
def test_an_export_names_the_storage_without_its_password(
    finished: tuple[OpenStudy, TrialRecord], url: str, shown: str
) -> None:
    opened, record = finished
    document: dict[str, Any] = build_config(opened.study, record, url, None, None)
    assert SECRET not in yaml.safe_dump(document)
    assert document["provenance"]["storage"] == shown


@pytest.mark.parametrize(("url", "shown"), SECRET_URLS)
def test_mlflow_tags_name_the_storage_without_its_password(
    finished: tuple[OpenStudy, TrialRecord], url: str, shown: str
) -> None:
    opened, _ = finished
    info = study_run_info(opened.study, opened.spec, url)
    assert info.tags["tuner.storage"] == shown
    assert not any(SECRET in str(value) for value in [*info.tags.values(), *info.params.values()])


def test_the_ui_run_url_carries_no_credentials() -> None:
    url = run_url(f"https://admin:{SECRET}@mlflow.example:5000/", StudyLocation("3", "e", "abc"))
    assert url == "https://admin:***@mlflow.example:5000/#/experiments/3/runs/abc"
