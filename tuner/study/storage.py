"""Where studies live: the tuner home, storage URLs, and opening an Optuna RDB storage.

Storage URLs: ``sqlite:///path.db`` (embedded default, one writer, WAL mode)
or ``postgresql+psycopg://...`` for many workers and hosts. URLs are shown
only through :func:`redact_url` and error text only through :func:`redact_text`
(both from :mod:`tuner.secrets`, the one implementation; ``redact_url`` is
re-exported here for older call sites). :class:`StudyError` is the one error of this
package: a study or storage that cannot be created, found or opened.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.secrets import redact_text, redact_url, remember_url

if TYPE_CHECKING:
    import optuna

DEFAULT_HOME = Path("studies")
STORAGE_ENV = "TUNER_STORAGE"
HOME_ENV = "TUNER_HOME"
SQLITE_BUSY_TIMEOUT_ENV = "TUNER_SQLITE_BUSY_TIMEOUT_S"  # seconds a writer waits for a locked SQLite file (60)
__all__ = ["StudyError", "tuner_home", "default_storage_url", "storage_url", "redact_url", "open_storage",
           "list_studies", "DEFAULT_HOME", "STORAGE_ENV", "HOME_ENV", "SQLITE_BUSY_TIMEOUT_ENV"]


class StudyError(RuntimeError):
    """A study that cannot be created, found or resumed; the message says why."""


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


def open_storage(url: str, create: bool = True) -> "optuna.storages.BaseStorage":
    """An Optuna RDB storage; SQLite files get their directory created and a busy timeout.

    ``create=False`` (the reading commands) raises :class:`StudyError` for a SQLite file
    that does not exist instead of creating an empty one.
    """
    import optuna

    remember_url(url)
    missing = None if create else missing_sqlite_file(url)
    if missing is not None:
        raise StudyError(f"no storage at {missing}: no study has run with this --home / --storage yet")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs = {"connect_args": {"timeout": float(os.environ.get(SQLITE_BUSY_TIMEOUT_ENV) or 60)}}
    for attempt in range(4):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
            break
        except Exception as error:  # noqa: BLE001 - any driver error: say which storage
            if attempt < 3 and any(text in str(error) for text in ("locked", "already exists", "UNIQUE constraint")):
                time.sleep(0.5 * (attempt + 1))  # another process is creating the same tables
                continue
            raise StudyError(redact_text(f"cannot open storage {redact_url(url)}: {type(error).__name__}: {error}")
                             ) from None
    if url.startswith("sqlite:"):
        _use_write_ahead_log(storage)
    return storage


def _use_write_ahead_log(storage: "optuna.storages.RDBStorage") -> None:
    """SQLite in WAL mode with ``synchronous=NORMAL``: commits stop waiting for fsync.

    A committed trial survives the coordinator being killed (SIGKILL); only a
    power loss can take the last commits. Readers (``tuner status``) do not
    block the writer.
    """
    from sqlalchemy import event

    def configure(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(storage.engine, "connect", configure)
    storage.engine.dispose()


def list_studies(url: str) -> list[tuple[str, int]]:
    """(name, number of trials) of every study in the storage; none when its SQLite file is missing."""
    if missing_sqlite_file(url) is not None:
        return []
    storage = open_storage(url, create=False)
    return [(s.study_name, len(storage.get_all_trials(s._study_id, deepcopy=False)))
            for s in storage.get_all_studies()]
