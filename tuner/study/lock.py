"""One live coordinator per study: a lock row in the study's own storage.

Two coordinators on one study (two ``tuner resume`` a few seconds apart) would
mark each other's live trials INTERRUPTED, overshoot the budget and disturb
each other's latencies, so the second is refused with one line. The lock is a
row in a table of tuner's own (``tuner_study_locks``) in the Optuna storage's
database — SQLite or PostgreSQL alike — taken by an atomic insert, so two
coordinators started at the same instant cannot both win. The holder refreshes
``heartbeat`` every :data:`HEARTBEAT_S` seconds from a daemon thread.

A lock whose holder is gone is taken over: same host and the holder's pid is
not alive, or no heartbeat for :data:`STALE_AFTER_S` seconds (another host).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tuner.study.storage import StudyError

HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0


class StudyLocked(StudyError):
    """Another live coordinator holds the study."""


def _table(metadata: Any) -> Any:
    from sqlalchemy import Column, Float, Integer, String, Table

    return Table("tuner_study_locks", metadata,
                 Column("study_name", String(512), primary_key=True),
                 Column("host", String(255), nullable=False),
                 Column("pid", Integer, nullable=False),
                 Column("heartbeat", Float, nullable=False))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class StudyLock:
    """The lock on ``study_name`` in the database behind ``engine`` (a SQLAlchemy engine)."""

    engine: Any
    study_name: str
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    def __post_init__(self) -> None:
        from sqlalchemy import MetaData

        self._metadata = MetaData()
        self._locks = _table(self._metadata)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        """Take the lock (or a stale one); raises :class:`StudyLocked` naming the live holder."""
        from sqlalchemy import delete, insert, select
        from sqlalchemy.exc import IntegrityError

        self._metadata.create_all(self.engine, checkfirst=True)
        for _ in range(3):
            try:
                with self.engine.begin() as connection:
                    connection.execute(insert(self._locks).values(
                        study_name=self.study_name, host=self.host, pid=self.pid, heartbeat=time.time()))
                break
            except IntegrityError:
                with self.engine.begin() as connection:
                    row = connection.execute(select(self._locks).where(
                        self._locks.c.study_name == self.study_name)).first()
                if row is None:
                    continue
                if not self._stale(row.host, row.pid, row.heartbeat):
                    raise StudyLocked(
                        f"study '{self.study_name}' is being run by another coordinator (pid {row.pid} on "
                        f"{row.host}, alive {time.time() - row.heartbeat:.0f} s ago); one study has one "
                        f"coordinator: wait for it, or stop it first") from None
                with self.engine.begin() as connection:  # take over the dead holder's row
                    connection.execute(delete(self._locks).where(
                        (self._locks.c.study_name == self.study_name) & (self._locks.c.pid == row.pid)
                        & (self._locks.c.host == row.host)))
        else:
            raise StudyLocked(f"study '{self.study_name}': could not take its lock (contended)")
        self._thread = threading.Thread(target=self._beat, name="tuner-lock-heartbeat", daemon=True)
        self._thread.start()

    def _stale(self, host: str, pid: int, heartbeat: float) -> bool:
        if host == self.host:
            return not _pid_alive(pid) or pid == self.pid
        return time.time() - heartbeat > STALE_AFTER_S

    def _beat(self) -> None:
        from sqlalchemy import update

        while not self._stop.wait(HEARTBEAT_S):
            try:
                with self.engine.begin() as connection:
                    connection.execute(update(self._locks).where(
                        (self._locks.c.study_name == self.study_name) & (self._locks.c.pid == self.pid)
                    ).values(heartbeat=time.time()))
            except Exception:  # noqa: BLE001 - a missed beat is retried; the study goes on
                continue

    def release(self) -> None:
        """Give the lock back (idempotent; a SIGKILLed holder's lock is taken over as stale)."""
        from sqlalchemy import delete

        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        try:
            with self.engine.begin() as connection:
                connection.execute(delete(self._locks).where(
                    (self._locks.c.study_name == self.study_name) & (self._locks.c.pid == self.pid)
                    & (self._locks.c.host == self.host)))
        except Exception:  # noqa: BLE001 - left behind, it is stale once this process is gone
            pass

    def __enter__(self) -> "StudyLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_for(study: Any) -> StudyLock:
    """The :class:`StudyLock` of an ``optuna.Study`` kept in an RDB storage (cached or not)."""
    storage = study._storage
    backend = getattr(storage, "_backend", storage)
    engine = getattr(backend, "engine", None)
    if engine is None:
        raise StudyError(f"study '{study.study_name}': its storage ({type(backend).__name__}) cannot hold a lock")
    return StudyLock(engine, study.study_name)
