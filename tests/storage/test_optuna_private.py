"""tuner.storage.optuna_private: the installed Optuna is one it was checked against, and each private name it
uses still does what its docstring says (real Optuna, a real SQLite RDB storage; issue 36).

The gateway test (``tests/test_storage_gateway.py``) holds that no other module of tuner uses Optuna's private API.
"""

from __future__ import annotations

import datetime
import inspect
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import optuna.version
import pytest
from optuna.distributions import FloatDistribution
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial

from tuner.search.samplers import AskTellGridSampler
from tuner.storage import optuna_private
from tuner.storage.optuna_private import (
    CHECKED_OPTUNA,
    MODULE,
    RDB_PRIVATE_METHODS,
    RDB_STORAGE_MODULE,
    UncheckedOptunaWarning,
    backend_of,
    backend_of_storage,
    grid_exhausted,
    hooked_tpe_class,
    live_trial_cache,
    rdb_models,
    rdb_session,
    stale_trial_ids,
    storage_of,
    study_id,
    trial_id,
    unchecked_optuna,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_installed_optuna_is_one_the_private_api_module_was_checked_against() -> None:
    problem = unchecked_optuna()
    assert problem is None, problem
    assert ".".join(optuna.__version__.split(".")[:2]) in CHECKED_OPTUNA


def test_another_optuna_is_refused_with_the_module_to_recheck() -> None:
    assert unchecked_optuna("5.0.7") is None
    problem = unchecked_optuna("5.1.0")
    assert problem is not None
    assert "optuna 5.1.0" in problem and MODULE in problem and "CHECKED_OPTUNA" in problem
    assert unchecked_optuna("4.5.0") is not None and unchecked_optuna("50.0.1") is not None


def test_an_unchecked_optuna_warns_once_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed version is the one boundary faked here: the pin keeps any other off this machine."""
    study = optuna.create_study()
    monkeypatch.setattr(optuna.version, "__version__", "5.1.0")
    monkeypatch.setattr(optuna_private, "_VERDICT", [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            storage_of(study)
        live_trial_cache(study.ask())
    assert [type(w.message) for w in caught] == [UncheckedOptunaWarning], [str(w.message) for w in caught]
    assert MODULE in str(caught[0].message) and "5.1.0" in str(caught[0].message)


@pytest.mark.filterwarnings("ignore:Argument ``heartbeat_interval``", "ignore:Heartbeat of storage")
def test_the_study_and_trial_internals_on_a_real_rdb_storage(tmp_path: Path) -> None:
    storage = RDBStorage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval=60)
    study = optuna.create_study(storage=storage, study_name="s")
    assert backend_of(study) is storage and backend_of_storage(storage_of(study)) is storage
    assert type(storage_of(study)).__name__ == "_CachedStorage" and backend_of_storage(storage) is storage
    assert study_id(study) == storage.get_study_id_from_name("s")
    assert [study_id(s) for s in storage.get_all_studies()] == [study_id(study)]
    fresh, old = study.ask(), study.ask()
    assert trial_id(old) == storage.get_trial_id_from_study_id_trial_number(study_id(study), old.number)
    cached = live_trial_cache(old)
    assert isinstance(cached, FrozenTrial) and cached.number == old.number
    assert live_trial_cache(study.trials[0]) is None, "a FrozenTrial has no storage behind it"
    assert trial_id(study.trials[1]) == trial_id(old)

    models = rdb_models()
    storage.record_heartbeat(trial_id(fresh))
    with rdb_session(storage) as session:
        session.add(models.TrialHeartbeatModel(trial_id=trial_id(old), heartbeat=datetime.datetime(2000, 1, 1)))
    with rdb_session(storage) as session:
        assert session.query(models.TrialModel).count() == 2
    assert stale_trial_ids(storage_of(study), study_id(study)) == [trial_id(old)]
    for name in (
        "StudyModel",
        "StudyUserAttributeModel",
        "TrialModel",
        "TrialParamModel",
        "TrialValueModel",
        "TrialUserAttributeModel",
        "TrialSystemAttributeModel",
        "TrialHeartbeatModel",
    ):
        assert hasattr(models, name), name


def test_the_rdb_storage_names() -> None:
    for name in RDB_PRIVATE_METHODS:
        assert callable(getattr(RDBStorage, name, None)), f"RDBStorage.{name} is gone: re-check {MODULE}"
    assert RDBStorage.__module__ == RDB_STORAGE_MODULE, "the logger tolerant_storage filters and the worker's import"


def test_grid_exhausted_after_the_last_point() -> None:
    """On tuner's ask/tell grid sampler (Optuna's own would ``study.stop()``, refused outside ``optimize``)."""
    sampler = AskTellGridSampler({"x": [0, 1]}, seed=0)
    study = optuna.create_study(sampler=sampler)
    seen = []
    for _ in range(2):
        assert not grid_exhausted(sampler, study) and not sampler.exhausted  # type: ignore[attr-defined]
        trial = study.ask()
        seen.append(trial.suggest_categorical("x", [0, 1]))
        study.tell(trial, 0.0)
    assert sorted(seen) == [0, 1] and grid_exhausted(sampler, study)


def test_the_hooked_tpe_calls_its_hooks_and_uses_the_adjusted_acquisition() -> None:
    """Each adjusted acquisition prefers the smallest candidate: TPE proposes exactly that candidate."""
    calls: list[str] = []
    candidates: list[np.ndarray] = []

    class Smallest(hooked_tpe_class()):  # type: ignore[misc]
        def before_sample(self, study: optuna.Study, search_space: dict[str, Any]) -> None:
            calls.append(f"before {sorted(search_space)}")

        def after_sample(self) -> None:
            calls.append("after")

        def adjust_acquisition(self, samples: dict[str, np.ndarray], values: np.ndarray) -> np.ndarray:
            candidates.append(np.asarray(samples["x"]).copy())
            return -np.asarray(samples["x"])

    sampler = Smallest(seed=3, n_startup_trials=2)
    assert sampler.n_startup_trials == 2 and isinstance(sampler.random_state, np.random.RandomState)
    study = optuna.create_study(sampler=sampler)
    distribution = FloatDistribution(0.0, 1.0)
    for number in range(5):
        trial = study.ask({"x": distribution})
        study.tell(trial, (trial.params["x"] - 0.5) ** 2)
        if number >= 2:
            chosen = distribution.to_internal_repr(trial.params["x"])
            assert chosen == pytest.approx(float(candidates[-1].min())), "the adjusted acquisition chose"
    assert len(candidates) == 3 and calls == ["before ['x']", "after"] * 3


def test_the_hooks_are_no_names_of_optunas_sampler() -> None:
    """The public hooks must not shadow anything TPESampler has (they would change Optuna's behaviour)."""
    hooks = {name for name, _ in inspect.getmembers(hooked_tpe_class()) if not name.startswith("_")}
    assert hooks - set(dir(optuna.samplers.TPESampler)) == {
        "before_sample",
        "after_sample",
        "adjust_acquisition",
        "n_startup_trials",
        "random_state",
    }
