"""What a study cost, as ``tuner serve`` shows it over real HTTP (issue 26): the study list's device-hours
used, the summary's ``cost`` (used / wasted / avoided, with counts) and each trial's ``device_s``.

A small study is really run into the service's storage (a simulated workload on the CPU: a grid of 4
settings, 2 of which run out of memory for real, and the copies the grid repeats); the service's
figures must add up to the trials' stored ``cost.device_s`` and agree with ``tuner status --json``'s.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from service_harness import Service, service, storage_url  # noqa: F401 - service and storage_url are fixtures

from tuner.cli.status_view import status_document, status_trials
from tuner.storage.cost import SECONDS_PER_HOUR
from tuner.storage.records import TrialRecord
from tuner.study.studies import load_study

SPEC = """\
name: cost_service_demo
description: Simulated workload; one parameter value really runs out of host memory (tests only).
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 30
parameters:
  behaviour: {type: categorical, choices: [ok, oom]}
  noise: {type: categorical, choices: [0, 10]}
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {behaviour: ok, noise: 0}
baseline: {behaviour: ok, noise: 10}
measurement: {warmup: 0, min_repeats: 2, max_repeats: 2}
budget: {trials: 4}
sampler: {name: grid}
"""


@pytest.fixture
def ran(service: Service, tmp_path: Path) -> list[TrialRecord]:  # noqa: F811 - the fixture
    """Study ``s`` run to its budget in the service's storage; its stored trials."""
    import tuner

    spec = tmp_path / "cost_service_demo.yaml"
    spec.write_text(SPEC)
    opened = tuner.create_study(spec, study_name="s", storage=service.storage_url, home=tmp_path)
    tuner.run_study(opened, home=tmp_path, use_mlflow=False)
    study = optuna.load_study(study_name="s", storage=service.storage_url)
    return [TrialRecord.from_trial(t) for t in study.get_trials(deepcopy=False)]


def test_the_service_shows_used_wasted_avoided_adding_up_to_the_trials_device_seconds(
    service: Service,  # noqa: F811 - the fixture
    ran: list[TrialRecord],
) -> None:
    recorded = sum(r.device_s or 0.0 for r in ran)
    ooms = sum(1 for r in ran if r.outcome == "OOM")
    assert recorded > 0 and ooms == 2
    answer = service.request("GET", "/api/studies/s")
    assert answer.status == 200, answer.text
    cost = answer.json()["cost"]
    assert cost["recorded_device_h"] * SECONDS_PER_HOUR == pytest.approx(recorded, abs=0.01)
    assert cost["used_device_h"] + cost["wasted_device_h"] == pytest.approx(cost["recorded_device_h"], abs=2e-6)
    assert cost["wasted_trials"] == {"OOM": 2}, "both runs out of memory are wasted"
    assert cost["used_trials"] == {"OK": sum(1 for r in ran if r.outcome == "OK" and r.device_s is not None)}
    assert cost["avoided_trials"] == {"copy": sum(1 for r in ran if r.duplicate_of is not None)}
    assert cost["unit"] == "CPU-h" and cost["budget_device_hours"] is None
    opened = load_study(service.storage_url, "s", read_only=True)
    every = status_trials(opened)
    assert cost == {k: v for k, v in status_document(opened, every, every)["cost"].items() if k in cost}, (
        "the service and tuner status --json show the same figures"
    )

    page = service.request("GET", "/api/studies/s/trials?limit=100").json()
    assert {t["number"]: t["device_s"] for t in page["trials"]} == {r.number: r.device_s for r in ran}
    (entry,) = service.request("GET", "/api/studies").json()["studies"]
    assert entry["used_device_h"] == cost["used_device_h"] and entry["unit"] == "CPU-h"


def test_the_openapi_schema_describes_the_cost(service: Service) -> None:  # noqa: F811 - the fixture
    schemas = service.request("GET", "/openapi.json").json()["components"]["schemas"]
    cost = schemas["CostSummary"]["properties"]
    assert {"used_device_h", "wasted_device_h", "avoided_device_h", "recorded_device_h", "unit"} <= set(cost)
    assert "estimate" in cost["avoided_device_h"]["description"]
    assert (
        "device_s" in schemas["TrialEntry"]["properties"] and "used_device_h" in schemas["StudyListEntry"]["properties"]
    )
