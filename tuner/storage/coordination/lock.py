"""One live coordinator per study and device of a host: lock rows in the study's own storage.

Many coordinators may share a study (``tuner worker`` on every host of a fleet:
trials are claimed through the storage and a dead host's trials are found by
their stale heartbeats, :mod:`tuner.storage.coordination.heartbeats`). What must not happen is
two coordinators booking the same device — two ``tuner resume`` of one study on
one host would disturb each other's latencies — so a coordinator locks each of
its resources: ``<study>@<host>#gpu<i>`` per GPU, or ``<study>@<host>#cpu`` for
the CPU. A second coordinator wanting any of them is refused with one line
naming the holder. The rows live in a table of tuner's own
(``tuner_study_locks``) in the Optuna storage's database — SQLite or PostgreSQL
alike — taken by atomic inserts, so two coordinators started at the same instant
cannot both win. The holder refreshes ``heartbeat`` every :data:`HEARTBEAT_S`
seconds from a daemon thread (a beat missed while the storage is away is simply skipped); taking
a lock rides through a storage outage (:mod:`tuner.storage.outage`).

A lock whose holder is gone is taken over: same host and the holder's pid is
not alive, or no heartbeat for :data:`STALE_AFTER_S` seconds (another host).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tuner.errors import StudyError
from tuner.storage.coordination.heartbeats import HOST, pid_alive
from tuner.storage.outage import call_through_outage
from tuner.storage.store import backend_of, engine_of
from tuner.storage.store_rows import ensure_tables

HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0


class StudyLocked(StudyError):
    """Another live coordinator holds the study."""


def _table(metadata: Any) -> Any:
    from sqlalchemy import Column, Float, Integer, String, Table

    return Table(
        "tuner_study_locks",
        metadata,
        Column("study_name", String(512), primary_key=True),
        Column("host", String(255), nullable=False),
        Column("pid", Integer, nullable=False),
        Column("heartbeat", Float, nullable=False),
    )


@dataclass
class StudyLock:
    """The locks on ``study_name``'s ``resources`` on this host, in the database behind ``engine``
    (a SQLAlchemy engine). ``resources``: e.g. ``["gpu0", "gpu1"]`` or ``["cpu"]``."""

    engine: Any
    study_name: str
    resources: list[str] = field(default_factory=lambda: ["cpu"])
    host: str = field(default_factory=lambda: HOST)
    pid: int = field(default_factory=os.getpid)

    def __post_init__(self) -> None:
        from sqlalchemy import MetaData

        self._metadata = MetaData()
        self._locks = _table(self._metadata)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.keys = [f"{self.study_name}@{self.host}#{resource}" for resource in self.resources]

    def acquire(self) -> None:
        """Take every resource's lock (or a stale one); raises :class:`StudyLocked` naming a live holder
        (and holds none of them then)."""
        ensure_tables(self._metadata, self.engine)
        taken: list[str] = []
        try:
            for key in self.keys:
                call_through_outage(self._take, key)
                taken.append(key)
        except StudyLocked:
            self._delete(taken)
            raise
        self._thread = threading.Thread(target=self._beat, name="tuner-lock-heartbeat", daemon=True)
        self._thread.start()

    def _take(self, key: str) -> None:
        from sqlalchemy import delete, insert, select
        from sqlalchemy.exc import IntegrityError

        for _ in range(3):
            try:
                with self.engine.begin() as connection:
                    connection.execute(
                        insert(self._locks).values(study_name=key, host=self.host, pid=self.pid, heartbeat=time.time())
                    )
                return
            except IntegrityError:
                with self.engine.begin() as connection:
                    row = connection.execute(select(self._locks).where(self._locks.c.study_name == key)).first()
                if row is None:
                    continue
                if not self._stale(row.host, row.pid, row.heartbeat):
                    resource = key.rpartition("#")[2]
                    raise StudyLocked(
                        f"study '{self.study_name}' is being run by another coordinator on {resource} of this "
                        f"host (pid {row.pid} on {row.host}, alive {time.time() - row.heartbeat:.0f} s ago); a "
                        f"host runs a study once per device: wait for it, stop it first, or give 'tuner worker' "
                        f"other --gpus"
                    ) from None
                with self.engine.begin() as connection:  # take over the dead holder's row
                    connection.execute(
                        delete(self._locks).where(
                            (self._locks.c.study_name == key)
                            & (self._locks.c.pid == row.pid)
                            & (self._locks.c.host == row.host)
                        )
                    )
        raise StudyLocked(f"study '{self.study_name}': could not take its lock (contended)")

    def _stale(self, host: str, pid: int, heartbeat: float) -> bool:
        if host == self.host:
            return not pid_alive(pid) or pid == self.pid
        return time.time() - heartbeat > STALE_AFTER_S

    def _beat(self) -> None:
        from sqlalchemy import update

        while not self._stop.wait(HEARTBEAT_S):
            try:
                with self.engine.begin() as connection:
                    connection.execute(
                        update(self._locks)
                        .where(self._locks.c.study_name.in_(self.keys) & (self._locks.c.pid == self.pid))
                        .values(heartbeat=time.time())
                    )
            except Exception:  # noqa: BLE001 - a missed beat is retried; the study goes on
                continue

    def _delete(self, keys: list[str]) -> None:
        from sqlalchemy import delete

        if not keys:
            return
        try:
            with self.engine.begin() as connection:
                connection.execute(
                    delete(self._locks).where(
                        self._locks.c.study_name.in_(keys)
                        & (self._locks.c.pid == self.pid)
                        & (self._locks.c.host == self.host)
                    )
                )
        except Exception:  # noqa: BLE001 - left behind, it is stale once this process is gone
            pass

    def release(self) -> None:
        """Give the locks back (idempotent; a SIGKILLed holder's locks are taken over as stale)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._delete(self.keys)

    def __enter__(self) -> StudyLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_for(study: Any, resources: list[str] | None = None) -> StudyLock:
    """The :class:`StudyLock` of an ``optuna.Study`` kept in an RDB storage (cached or not) on
    ``resources`` of this host (default: the CPU)."""
    engine = engine_of(study)
    if engine is None:
        raise StudyError(
            f"study '{study.study_name}': its storage ({type(backend_of(study)).__name__}) cannot hold a lock"
        )
    return StudyLock(engine, study.study_name, list(resources or ["cpu"]))


def ensure_tuner_tables(study: Any) -> None:
    """Create the tuner's own tables (locks, claims, trials' side records) in the study's database, if missing:
    once when a study is created, so workers starting together do not race to create them (the side records'
    is also created before a first write to a study an older tuner created)."""
    from sqlalchemy import MetaData

    from tuner.storage.coordination.claims import claims_table
    from tuner.storage.store_rows import side_table

    engine = engine_of(study)
    if engine is None:
        return
    metadata = MetaData()
    _table(metadata)
    claims_table(metadata)
    side_table(metadata)
    ensure_tables(metadata, engine)
