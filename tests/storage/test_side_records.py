"""A trial's bulky records live beside its row, not in the user attributes every coordinator loads (issue 27).

A measured trial's ``env``, ``runtime``, ``worker_info`` and ``log_tail`` (:data:`TRIAL_RECORDS`) are written to
tuner's ``tuner_trial_records`` table in the same transaction as its attributes; ``tuner show`` and the export
read them back through :func:`tuner.storage.records.trial_records`. Checked on a real small study: the user
attributes no longer hold them, the table does, show and export still print them; a study whose trials carry them
as user attributes (an older tuner's, in a database without the table) still shows and exports them; and an
in-memory storage keeps them as user attributes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tuner.cli.main import main
from tuner.results import Metric, Outcome, TrialResult
from tuner.ship.export import build_config
from tuner.storage import store, store_rows
from tuner.storage.attributes import ENV, LOG_TAIL, RUNTIME, TRIAL_RECORDS, WORKER_INFO, attributes_of, is_measured
from tuner.storage.records import TrialRecord, full_record, record_feasible, trial_records

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPEC = """\
name: side_demo
description: Simulated workload; one parameter value really runs out of host memory (tests only).
workload:
  class: tuner.workloads.fake:FakeWorkload
  timeout_s: 30
parameters:
  behaviour: {type: categorical, choices: [ok, oom]}
  noise: {type: categorical, choices: [0, 10]}
derived:
  frames: "4"
objectives:
  - {metric: latency_p50_s, direction: minimize}
  - {metric: psnr_db, direction: maximize}
reference: {behaviour: ok, noise: 0}
baseline: {behaviour: ok, noise: 10}
measurement: {warmup: 0, min_repeats: 2, max_repeats: 2}
budget: {trials: 4}
sampler: {name: grid}
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tuner home holding study ``s`` (SQLite), run to its budget (a few seconds); its trial directories are
    removed, so ``tuner show`` reads the log tail from the storage (as on another host)."""
    import tuner

    root = tmp_path_factory.mktemp("side_records")
    spec = root / "side_demo.yaml"
    spec.write_text(SPEC)
    opened = tuner.create_study(spec, study_name="s", storage=f"sqlite:///{root / 's.db'}", home=root)
    tuner.run_study(opened, home=root, use_mlflow=False)
    for trial_dir in (root / "s").glob("trial_*"):
        shutil.rmtree(trial_dir)
    return root


def load(home: Path, name: str = "s", db: str = "s.db") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{home / db}")


def cli(home: Path, capsys: pytest.CaptureFixture[str], db: str, *args: str) -> tuple[int, str, str]:
    """Run ``tuner ARGS --home HOME --storage <HOME/db>``: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main([*args, "--home", str(home), "--storage", f"sqlite:///{home / db}"])
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


def shown(home: Path, capsys: pytest.CaptureFixture[str], db: str, study: str, number: int) -> dict[str, Any]:
    status, out, err = cli(home, capsys, db, "show", study, str(number), "--json")
    assert status == 0, err
    return json.loads(out)


def measured_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if is_measured(t)]


def test_side_records_leave_the_user_attributes_for_the_side_table(home: Path) -> None:
    study = load(home)
    measured = measured_trials(study)
    assert len(measured) >= 3
    side = store_rows.stored_records(study)
    assert set(side) == {t.number for t in measured}, "a row set for every measured trial, none for the others"
    for trial in measured:
        assert not set(trial.user_attrs) & set(TRIAL_RECORDS), sorted(trial.user_attrs)
        assert {ENV, RUNTIME, WORKER_INFO, LOG_TAIL} <= set(side[trial.number]), sorted(side[trial.number])
        assert isinstance(side[trial.number][ENV], dict) and side[trial.number][ENV]
        assert "metrics" in trial.user_attrs and "cost" in trial.user_attrs, "what coordinators read stays"
    assert trial_records(study, measured) == {n: side[n] for n in side}


def test_show_and_export_still_print_the_environment_runtime_and_log_tail(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = load(home)
    side = store_rows.stored_records(study)
    oom = next(t for t in measured_trials(study) if t.user_attrs.get("outcome") == "OOM")
    document = shown(home, capsys, "s.db", "s", oom.number)
    assert document["log_tail"]["source"].startswith("the storage"), document["log_tail"]
    assert "MemoryError" in document["log_tail"]["lines"][-1]
    assert document["weights_identity"] == side[oom.number][RUNTIME].get("weights_identity")

    record = next(r for r in (full_record(study, t) for t in study.get_trials()) if record_feasible(r))
    assert record.env == side[record.number][ENV] and record.runtime == side[record.number][RUNTIME]
    config = build_config(study, record, f"sqlite:///{home / 's.db'}")
    assert config["env"] == {str(k): str(v) for k, v in side[record.number][ENV].items()}
    assert config["provenance"]["source"] == "trial" and config["provenance"]["runtime"] is not None
    status, out, err = cli(
        home, capsys, "s.db", "export", "s", "--trial", str(record.number), "--output", str(home / "exported.yaml")
    )
    assert status == 0, err
    exported = yaml.safe_load((home / "exported.yaml").read_text())
    assert exported["env"] == config["env"] and exported["provenance"]["source"] == "trial"


def test_a_study_an_older_tuner_wrote_still_shows_and_exports_them(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trials carrying their records as user attributes, in a database without the side table."""
    study = load(home)
    side = store_rows.stored_records(study)
    old = optuna.create_study(study_name="old", storage=f"sqlite:///{home / 'old.db'}", directions=study.directions)
    for key, value in study.user_attrs.items():
        old.set_user_attr(key, value)
    for trial in study.get_trials(deepcopy=True):
        old.add_trial(
            optuna.trial.create_trial(
                state=trial.state,
                values=trial.values,
                params=trial.params,
                distributions=trial.distributions,
                user_attrs={**trial.user_attrs, **side.get(trial.number, {})},
                system_attrs=trial.system_attrs,
            )
        )
    assert store_rows.stored_records(old) == {}, "no table: no side records"
    old_trials = old.get_trials(deepcopy=False)
    assert {n: found for n, found in trial_records(old, old_trials).items() if found} == side

    oom = next(t for t in old_trials if t.user_attrs.get("outcome") == "OOM")
    document = shown(home, capsys, "old.db", "old", oom.number)
    assert document["log_tail"]["source"].startswith("the storage")
    assert "MemoryError" in document["log_tail"]["lines"][-1]
    record = next(r for r in (TrialRecord.from_trial(t) for t in old_trials) if record_feasible(r))
    assert record.env == side[record.number][ENV], "from_trial reads an older trial's own attributes"
    config = build_config(old, record, f"sqlite:///{home / 'old.db'}")
    assert config["env"] == {str(k): str(v) for k, v in side[record.number][ENV].items()}
    assert config["provenance"]["source"] == "trial"


def test_an_in_memory_storage_keeps_them_as_user_attributes() -> None:
    study = optuna.create_study()
    trial = study.ask()
    result = TrialResult(
        outcome=Outcome.OK,
        metrics={"latency_p50_s": Metric("latency_p50_s", 0.25, "s", "minimize")},
        log_tail="the end\n",
        wall_time_s=1.5,
        eval_time_s=0.5,
        samples={"frame": "f.png"},
        info={
            "env": {"OMP_NUM_THREADS": "2"},
            "runtime": {"python": "3.11"},
            "repeats": 2,
            "cut_short": "2 of 5 repeats",
        },
    )
    store.record_result(trial, result, "cpu0", False)
    study.tell(trial, 0.25)
    frozen = study.get_trials()[-1]
    attrs = attributes_of(frozen)
    assert attrs[ENV] == {"OMP_NUM_THREADS": "2"} and attrs[RUNTIME] == {"python": "3.11"}
    assert attrs[WORKER_INFO] == {"repeats": 2, "cut_short": "2 of 5 repeats"} and attrs[LOG_TAIL] == "the end\n"
    assert attrs["cut_short"] == "2 of 5 repeats", "the one small field views need stays a user attribute"
    assert store_rows.stored_records(study) == {}
    assert trial_records(study, [frozen]) == {
        frozen.number: {
            ENV: attrs[ENV],
            RUNTIME: attrs[RUNTIME],
            WORKER_INFO: attrs[WORKER_INFO],
            LOG_TAIL: "the end\n",
        }
    }
    record = full_record(study, frozen)
    assert (record.env, record.runtime, record.log_tail, record.cut_short) == (
        {"OMP_NUM_THREADS": "2"},
        {"python": "3.11"},
        "the end\n",
        "2 of 5 repeats",
    )


def test_a_deleted_study_takes_its_side_records_along(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    study = optuna.create_study(study_name="d", storage=url)
    trial = study.ask()
    store.set_trial_attributes(trial, {"measured": True}, side={ENV: {"A": "1"}})
    assert store_rows.stored_records(study) == {trial.number: {ENV: {"A": "1"}}}
    assert ENV not in study.get_trials()[-1].user_attrs
    storage = optuna.storages.RDBStorage(url)
    try:
        [summary] = storage.get_all_studies()
        store.delete_study(storage, summary)
        again = optuna.create_study(study_name="e", storage=storage)
        assert store_rows.stored_records(again) == {}, "a reused study id finds no one else's records"
    finally:
        storage.engine.dispose()
