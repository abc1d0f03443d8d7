"""Where studies live: the tuner home, storage URLs, and opening an Optuna RDB storage.

Storage URLs: ``sqlite:///path.db`` (embedded default, one writer, WAL mode)
or ``postgresql+psycopg://user:password@host:port/database`` for many workers and
hosts. ``postgresql://`` and ``postgres://`` URLs are opened with the same psycopg
(v3) driver: :func:`driver_url` rewrites their scheme to ``postgresql+psycopg://``
(SQLAlchemy would otherwise pick psycopg2, which the tuner does not install); psycopg comes
with the ``postgres`` extra, and a PostgreSQL URL without it is one line naming that extra.
Every storage is opened with Optuna heartbeats (:func:`heartbeat_settings`: a
RUNNING trial whose heartbeat is older than the grace period is stale) and a
connection pool that tests each connection before use, as an
:class:`~tuner.storage.tolerant_storage.OutageTolerantRDBStorage`: a restarted or unreachable database is
waited out for a bounded time (:mod:`tuner.storage.outage`). Reading commands open it ``read_only`` (on
SQLite: never waiting for a writer's lock). URLs are shown
only through :func:`redact_url` and error text only through :func:`redact_text`
(both from :mod:`tuner.secrets`, the one implementation). A study or storage that cannot be
created, found or opened is a :class:`~tuner.errors.StudyError`.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import StudyError
from tuner.secrets import redact_text, redact_url, remember_url
from tuner.spec.extras import MissingExtra, is_installed
from tuner.storage.outage import StorageMisconfigured, misconfiguration
from tuner.storage.store import trials_of

if TYPE_CHECKING:
    import optuna

    from tuner.spec.models import StudySpec

DEFAULT_HOME = Path("studies")
STORAGE_ENV = "TUNER_STORAGE"
HOME_ENV = "TUNER_HOME"
SQLITE_BUSY_TIMEOUT_ENV = "TUNER_SQLITE_BUSY_TIMEOUT_S"  # seconds a writer waits for a locked SQLite file (60)
HEARTBEAT_INTERVAL_S = 10  # a RUNNING trial's heartbeat is recorded this often (seconds)
READ_BUSY_TIMEOUT_S = 5.0  # seconds a read-only SQLite connection waits for a lock (a WAL reader rarely must)
GRACE_PERIOD_S = 60  # a RUNNING trial without a heartbeat for this long is stale (seconds)
HEARTBEAT_ENV = "TUNER_HEARTBEAT_S"  # overrides HEARTBEAT_INTERVAL_S (whole seconds > 0)
GRACE_PERIOD_ENV = "TUNER_GRACE_PERIOD_S"  # overrides GRACE_PERIOD_S (whole seconds > 0)
POSTGRES_SCHEMES = ("postgresql://", "postgres://")  # opened as postgresql+psycopg://
STUDY_NAME_MAX = 128
_STUDY_NAME = re.compile(rf"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{{0,{STUDY_NAME_MAX - 1}}}")
__all__ = [
    "tuner_home",
    "check_study_name",
    "open_stored_study",
    "StoredStudy",
    "default_storage_url",
    "storage_url",
    "open_storage",
    "list_studies",
    "close_storage",
    "driver_url",
    "heartbeat_settings",
    "DEFAULT_HOME",
    "STORAGE_ENV",
    "HOME_ENV",
    "SQLITE_BUSY_TIMEOUT_ENV",
    "HEARTBEAT_INTERVAL_S",
    "GRACE_PERIOD_S",
    "HEARTBEAT_ENV",
    "GRACE_PERIOD_ENV",
]


def tuner_home(explicit: str | Path | None = None) -> Path:
    """Where studies keep their files: ``--home``, else ``$TUNER_HOME``, else ``./studies``."""
    return Path(explicit or os.environ.get(HOME_ENV) or DEFAULT_HOME).absolute()


def default_storage_url(home: Path) -> str:
    """The embedded default: a SQLite file in the tuner home (never MLflow's file)."""
    return f"sqlite:///{(home / 'studies.db').absolute()}"


def storage_url(explicit: str | None, home: Path) -> str:
    """``--storage``, else ``$TUNER_STORAGE``, else the embedded SQLite default.

    Its secrets are remembered (:func:`tuner.secrets.remember_url`): no later error text shows them.
    """
    url = explicit or os.environ.get(STORAGE_ENV) or default_storage_url(home)
    remember_url(url)
    return url


def missing_sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL when it does not exist yet; None otherwise (or not SQLite)."""
    if not url.startswith("sqlite:///"):
        return None
    path = Path(url.removeprefix("sqlite:///").partition("?")[0])
    return None if not path.name or path.exists() else path


def driver_url(url: str) -> str:
    """``url`` with a ``postgresql://`` or ``postgres://`` scheme rewritten to ``postgresql+psycopg://``
    (the psycopg v3 driver, a dependency of the tuner); any other URL unchanged."""
    for scheme in POSTGRES_SCHEMES:
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url.removeprefix(scheme)
    return url


def heartbeat_settings() -> tuple[int, int]:
    """(heartbeat interval, grace period) in seconds: ``$TUNER_HEARTBEAT_S`` / ``$TUNER_GRACE_PERIOD_S``,
    else :data:`HEARTBEAT_INTERVAL_S` / :data:`GRACE_PERIOD_S`; :class:`StudyError` for a value that is
    not a whole number of seconds > 0, or a grace period shorter than the interval."""
    values = []
    for name, default in ((HEARTBEAT_ENV, HEARTBEAT_INTERVAL_S), (GRACE_PERIOD_ENV, GRACE_PERIOD_S)):
        text = (os.environ.get(name) or "").strip()
        try:
            value = int(text) if text else default
        except ValueError:
            value = 0
        if value <= 0:
            raise StudyError(f"{name}={text!r} is not a whole number of seconds > 0")
        values.append(value)
    interval, grace = values
    if grace < interval:
        raise StudyError(
            f"{GRACE_PERIOD_ENV}={grace} is shorter than {HEARTBEAT_ENV}={interval}: "
            "every running trial would look stale"
        )
    return interval, grace


def open_storage(url: str, create: bool = True, read_only: bool = False) -> optuna.storages.BaseStorage:
    """An Optuna RDB storage with heartbeats (:func:`heartbeat_settings`) and a pre-pinged pool.

    SQLite files get their directory created and a busy timeout; ``postgresql://`` and
    ``postgres://`` URLs use the psycopg driver (:func:`driver_url`). ``create=False``
    (the reading commands) raises :class:`StudyError` for a SQLite file that does not
    exist instead of creating an empty one. ``read_only=True`` (``tuner status``, ``front``, ``export``,
    ``show``): a SQLite file is read in plain read transactions, which WAL mode serves while another
    process holds the write lock, with a busy timeout of :data:`READ_BUSY_TIMEOUT_S` for the rare
    moment a reader must wait (a checkpoint); writes are not prevented, only not made atomic — the
    caller promises none. The returned storage waits out a lost connection (:mod:`tuner.storage.outage`);
    opening it does not. Any failure to connect is a one-line :class:`StudyError` without secrets; a
    refusal (wrong password, unknown role or database, permission denied) is its
    :class:`~tuner.storage.outage.StorageMisconfigured`, naming the storage and what it refused.
    """
    import warnings

    import optuna

    from tuner.storage.tolerant_storage import OutageTolerantRDBStorage

    remember_url(url)
    if url.startswith("grpc://"):
        raise StudyError(
            f"cannot open storage {redact_url(url)}: a gRPC storage proxy is not a tuner storage (the "
            "tuner's claims, device locks and heartbeats are SQL transactions on the study's database); "
            "point every worker at the PostgreSQL database itself (docs/fleet.md)"
        )
    missing = None if create else missing_sqlite_file(url)
    if missing is not None:
        raise StudyError(f"no storage at {missing}: no study has run with this --home / --storage yet")
    if driver_url(url).startswith("postgresql+psycopg://") and not is_installed("psycopg"):
        raise StudyError(
            f"cannot open storage {redact_url(url)}: {MissingExtra('psycopg', 'postgres', 'a PostgreSQL storage')}"
        )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    interval, grace = heartbeat_settings()
    # Optuna warns at every ask() of a heartbeat storage outside optimize(); the tuner's ask/tell
    # coordinator records heartbeats itself, so the warning says nothing here.
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        busy_s = READ_BUSY_TIMEOUT_S if read_only else float(os.environ.get(SQLITE_BUSY_TIMEOUT_ENV) or 60)
        engine_kwargs["connect_args"] = {"timeout": busy_s}
    for attempt in range(4):
        try:
            with warnings.catch_warnings():  # heartbeat_interval is "experimental" since Optuna 2.9
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                # Optuna fills "{SCHEMA_VERSION}" with str.format: doubled braces keep a "{" in a password
                storage = OutageTolerantRDBStorage(
                    driver_url(url).replace("{", "{{").replace("}", "}}"),
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=interval,
                    grace_period=grace,
                )
            break
        except Exception as error:  # noqa: BLE001 - any driver error: say which storage
            if attempt < 3 and any(text in str(error) for text in ("locked", "already exists", "UNIQUE constraint")):
                time.sleep(0.5 * (attempt + 1))  # another process is creating the same tables
                continue
            problem = misconfiguration(error)
            if problem is not None:  # a login, database or permission refused: the same words as mid-study
                raise StorageMisconfigured.of(problem, url) from None
            raise StudyError(redact_text(f"cannot open storage {redact_url(url)}: {_driver_reason(error)}")) from None
    if url.startswith("sqlite:"):
        _use_write_ahead_log(storage, atomic_writes=not read_only)
    return storage


def close_storage(storage: Any) -> None:
    """Close every pooled connection of ``storage`` (one :func:`open_storage` returned; for a study's, pass
    :func:`tuner.storage.store.backend_of`); nothing for a storage without a database engine. A long-lived process that opens a
    storage per look (a waiting fleet worker) closes each: a storage left to the garbage collector keeps
    its connections until a full collection, and a fleet of waiting workers ran PostgreSQL out of them."""
    engine = getattr(storage, "engine", None)
    if engine is not None:
        engine.dispose()


def _driver_reason(error: Exception) -> str:
    """The driver's own words on one line: SQLAlchemy's ``[SQL: ...]`` and "Background on this
    error" trailers dropped, the first lines of a multi-line message joined."""
    orig = getattr(error, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's exception
    cause = orig if isinstance(orig, Exception) else error
    lines = [line.strip() for line in str(cause).splitlines()]
    lines = [line for line in lines if line and not line.startswith(("[SQL:", "(Background on this error"))]
    return f"{type(cause).__name__}: {' '.join(lines[:3]) or 'no reason given'}"


def _use_write_ahead_log(storage: optuna.storages.RDBStorage, atomic_writes: bool = True) -> None:
    """SQLite in WAL mode with ``synchronous=NORMAL``, every transaction ``BEGIN IMMEDIATE``.

    WAL: a committed trial survives the coordinator being killed (SIGKILL); only a
    power loss can take the last commits; commits stop waiting for fsync.

    ``BEGIN IMMEDIATE``: Python's sqlite3 driver starts a transaction only at the
    first write, so Optuna's check-then-set (a WAITING trial read, then set
    RUNNING; ``for_update`` means nothing to SQLite) ran its read outside any
    transaction: two coordinators sharing one file could both pop the same
    queued trial and both tell it ("Cannot tell a COMPLETE trial", seen on a
    loaded host). Taking the write lock when the transaction begins makes every
    read-then-write atomic; transactions wait for each other (up to the busy
    timeout) instead, a few milliseconds each.
    """
    from sqlalchemy import event

    def configure(connection: Any, _record: Any) -> None:
        connection.isolation_level = None  # the driver's own transaction handling off: "begin" below decides
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    def begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(storage.engine, "connect", configure)
    if atomic_writes:  # a reader's transactions stay deferred: they never wait for a writer
        event.listen(storage.engine, "begin", begin_immediate)
    storage.engine.dispose()


def list_studies(url: str) -> list[tuple[str, int]]:
    """(name, number of trials) of every study in the storage; none when its SQLite file is missing."""
    if missing_sqlite_file(url) is not None:
        return []
    storage = open_storage(url, create=False, read_only=True)
    return [(s.study_name, len(trials_of(storage, s))) for s in storage.get_all_studies()]


def check_study_name(name: str) -> str:
    """``name`` when it is a valid study name, else StudyError (one line).

    A study name is also a directory under the tuner home (trial files, exports), so it
    is one path segment: letters, digits, ``_``, ``-``, ``.``, at most
    :data:`STUDY_NAME_MAX` characters, not starting with ``.`` (no ``..``, no hidden name).
    """
    if not _STUDY_NAME.fullmatch(name):
        shown = repr(name) if len(name) <= 80 else f"{name[:80]!r}... ({len(name)} characters)"
        raise StudyError(
            f"study name {shown} is not allowed: use letters, digits, '_', '-', '.' "
            f"(at most {STUDY_NAME_MAX} characters, not starting with '.')"
        )
    return name


@dataclass(frozen=True)
class StoredStudy:
    """A tuner study as its storage holds it: the Optuna study (Optuna's default sampler: for reading), the
    storage it was opened on, the spec rebuilt from the stored YAML, and the sampler name stored at creation."""

    storage: optuna.storages.BaseStorage
    study: optuna.Study
    spec: StudySpec
    spec_text: str
    sampler: str | None


def open_stored_study(url: str, name: str, read_only: bool = False) -> StoredStudy:
    """The tuner study ``name`` in the storage at ``url``; StudyError (one line) when ``name`` is not a valid
    study name (checked before the storage is opened), the storage or the study is not there, or the study
    was not created by tuner (no spec stored). A stored spec that no longer parses raises the spec's error."""
    import optuna

    from tuner.spec.loading import parse_spec
    from tuner.storage.records import StudyRecord

    check_study_name(name)
    if missing_sqlite_file(url) is not None:
        raise StudyError(
            f"no study '{name}' in {redact_url(url)} (that storage does not exist yet: run a study "
            "first, or check --home / --storage)"
        )
    storage = open_storage(url, create=False, read_only=read_only)
    names = [s.study_name for s in storage.get_all_studies()]
    if name not in names:
        known = ", ".join(names[-5:]) or "none"
        raise StudyError(f"no study '{name}' in {redact_url(url)} (latest: {known})")
    study = optuna.load_study(study_name=name, storage=storage)
    stored = StudyRecord.of(study)
    if not stored.spec_yaml:
        raise StudyError(f"study '{name}' was not created by tuner (no spec stored with it)")
    spec = parse_spec(stored.spec_yaml, source=f"{name} (stored spec)")
    return StoredStudy(storage, study, spec, stored.spec_yaml, stored.sampler)
