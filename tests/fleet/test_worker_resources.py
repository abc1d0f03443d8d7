"""What many workers starting at once share, and what a waiting worker holds (defects the sleep-bound fleet
bench found, issue 27):

* workers that load one study at the same moment must not propose the same settings (each seeds its sampler
  with its own identity, not only with the study's size);
* a worker polling for open studies must not leave a database connection behind per poll (a 32-host fleet
  ran PostgreSQL out of connections while waiting for its study);
* two processes creating the storage's tables at the same moment: the one whose CREATE waited on the other's
  opens the storage all the same (a guard: the fleet bench once saw a worker's start fail with Optuna's
  "during the commit" error at a fresh database; this interleaving, replayed here, does not fail).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from tuner.testing.noop_spec import noop_spec


def test_workers_loading_one_study_at_once_propose_different_settings(tmp_path: Path) -> None:
    import tuner
    from tuner.study.studies import load_study

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    spec = tmp_path / "seeds.yaml"
    spec.write_text(noop_spec("seeds", trials=10))
    tuner.create_study(spec, study_name="seeds", storage=url, home=tmp_path / "creator")

    def first_settings(*identities: str) -> list[int]:
        """Each identity loads the study at the same moment (same trials stored), then each asks once."""
        studies = [load_study(url, "seeds", seed_salt=identity).study for identity in identities]
        settings = []
        for study in studies:
            trial = study.ask()
            settings.append(trial.suggest_int("x", 0, 1_000_000_000))
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return settings

    host_a, host_b = first_settings("hostA:101", "hostB:202")
    assert host_a != host_b
    again_a, again_a_too = first_settings("hostA:101", "hostA:101")  # one identity at one state: reproducible
    assert again_a == again_a_too


@pytest.fixture
def gc_off() -> Iterator[None]:
    """No cyclic garbage collection: a storage left unclosed keeps its connections, as it did in a long-lived
    worker until a full collection happened to run."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def test_a_polling_worker_holds_no_connection_per_poll(postgres_url: str, gc_off: None) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    from tuner.fleet.worker import open_studies
    from tuner.storage.opening import driver_url, open_storage

    open_storage(postgres_url).engine.dispose()  # the tables exist: every poll below reads only
    database = postgres_url.rsplit("/", 1)[-1]
    probe = create_engine(driver_url(postgres_url), poolclass=NullPool)

    def connections() -> int:
        with probe.connect() as connection:
            return int(
                connection.execute(
                    text("select count(*) from pg_stat_activity where datname = :d"), {"d": database}
                ).scalar_one()
            )

    before = connections()
    for _ in range(20):
        assert open_studies(postgres_url, "cpu") == []
    assert connections() - before <= 1


def test_a_storage_whose_tables_another_process_creates_at_once_opens(postgres_url: str) -> None:
    """Another process creates the tables while this one does: this one's CREATE waits on the other's
    transaction, then fails on the catalog's unique key once that commits (PostgreSQL's "duplicate key value
    violates unique constraint"). Replayed in order: the other transaction holds an uncommitted CREATE TABLE
    of Optuna's first table, this process opens the storage in a thread until its CREATE waits on a lock,
    then the other commits. The open must succeed (a look again finds the tables), not say the storage is
    broken."""
    import threading

    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    from tuner.storage.opening import driver_url, open_storage

    other = create_engine(driver_url(postgres_url), poolclass=NullPool)
    watcher = create_engine(driver_url(postgres_url), poolclass=NullPool)
    outcome: dict[str, object] = {}

    def open_here() -> None:
        try:
            outcome["studies"] = open_storage(postgres_url).get_all_studies()
        except Exception as error:  # noqa: BLE001 - the test reports it
            outcome["error"] = error

    with other.connect() as connection:
        transaction = connection.begin()
        connection.execute(
            text("CREATE TABLE studies (study_id INTEGER PRIMARY KEY, study_name VARCHAR(512) NOT NULL UNIQUE)")
        )
        opener = threading.Thread(target=open_here, daemon=True)
        opener.start()
        with watcher.connect() as look:
            for _ in range(6000):  # until the opener's CREATE waits on the other's lock (at most ~60 s)
                waiting = look.execute(
                    text(
                        "select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
                        "and query like '%CREATE TABLE studies%'"
                    )
                ).scalar_one()
                look.rollback()  # pg_stat_activity is read once per transaction: a new one for each look
                if waiting or not opener.is_alive():
                    break
                threading.Event().wait(0.01)
        assert opener.is_alive(), outcome
        transaction.commit()
    opener.join(timeout=120)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["studies"] == []
