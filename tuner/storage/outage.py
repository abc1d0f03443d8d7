"""Riding through a storage outage: connection-level errors are waited out, for a bounded time.

A database restart (``pg_ctl restart``, a fail-over, a maintenance window) or a short network cut
must not stop a fleet. Every storage call of a coordinator, worker, service or reading command
goes through :func:`call_through_outage` (the Optuna storage's methods via
:class:`tuner.storage.opening.OutageTolerantRDBStorage`, the tuner's own tables via the same
function): an error that :func:`is_transient` calls connection-level is retried with backoff
(:data:`FIRST_WAIT_S` doubling to :data:`LONGEST_WAIT_S`) until the call succeeds or the outage
has lasted :func:`outage_bound_s` seconds (``$TUNER_STORAGE_OUTAGE_S``, default
:data:`DEFAULT_OUTAGE_BOUND_S`; 0 turns waiting off). Past the bound the call raises
:class:`StorageUnavailable` (a one-line :class:`~tuner.errors.StudyError`, the driver's
words chained); any other error is raised at once, as before.

What the user sees: one line when the storage is first found away and one line when it is back
(:func:`set_reporter`; default: standard error), never one per retry.

Transient means: PostgreSQL could not be reached (connection refused, no route, closed
mid-transaction), or says it is shutting down, starting up or in recovery (SQLSTATE class 08,
57P01-57P03), too many connections (53300); a connection SQLAlchemy invalidated; any other
connection-level failure of psycopg (an ``OperationalError`` without SQLSTATE) that is not a refusal
below. SQLite's "database is locked" is not: its busy timeout has waited already, and a lock held
past it is a stop.

A *refusal* is never waited out, whatever came before it: the server answered, and no amount of
waiting changes its answer. :func:`misconfiguration` names it — a login refused (SQLSTATE class 28,
or psycopg's connect-time words: "password authentication failed", "no pg_hba.conf entry", "no
password supplied", "role ... is not permitted to log in", "role ... does not exist"), an unknown
database (3D000, 57P04, 'database "x" does not exist'), a permission denied (42501, "permission
denied"): SQLSTATE where the driver gives one, its words otherwise (psycopg gives none for a failed
connect). :func:`call_through_outage` raises it at once as :class:`StorageMisconfigured`, one line
naming the problem — also when it ends an outage (a password changed and the old sessions
terminated: the reconnect is refused). :func:`tuner.storage.opening.open_storage` and
:func:`tuner.session.run.run_session` name the storage in it (its URL redacted).

A transaction cut short by a connection error was rolled back by
the server, so running it again is safe; the one ambiguous case — the connection drops while the
server commits — is made harmless where it matters: a state change found already made by this
process counts as done (see :class:`~tuner.storage.opening.OutageTolerantRDBStorage`) and a claim
found held by the claiming trial is its own (:mod:`tuner.storage.coordination.claims`).

After an outage, every coordinator's heartbeats are as old as the outage: :func:`recovered_within`
lets the stale-trial check (:mod:`tuner.storage.coordination.heartbeats`) give the others one grace period to beat
again before their trials count as abandoned.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from tuner.errors import StudyError
from tuner.secrets import redact_text, redact_url

OUTAGE_BOUND_ENV = "TUNER_STORAGE_OUTAGE_S"  # seconds to wait for a storage that went away
DEFAULT_OUTAGE_BOUND_S = 120.0
FIRST_WAIT_S = 0.5  # the first retry's delay; it doubles up to LONGEST_WAIT_S
LONGEST_WAIT_S = 5.0
TRANSIENT_SQLSTATES = (
    "57P01",
    "57P02",
    "57P03",
    "53300",
)  # admin shutdown, crash shutdown, cannot connect now, too many
TRANSIENT_WORDS = (
    "connection refused",
    "could not connect",
    "connection failed",
    "server closed the connection",
    "the database system is",
    "terminating connection",
    "connection reset",
    "connection timed out",
    "timeout expired",
    "no route to host",
    "broken pipe",
    "consuming input failed",
    "connection is closed",
    "connection already closed",
    "ssl connection has been closed",
    "could not receive data",
    "could not send data",
)

MISCONFIGURED_SQLSTATES = {
    "28": "refused the login",
    "3D000": "has no such database",  # "28": the whole class
    "57P04": "has no such database",
    "42501": "denied a permission",
}
REFUSAL_WORDS = (
    (
        re.compile(
            r"authentication failed|no pg_hba\.conf entry|pg_hba\.conf rejects|no password supplied|"
            r"is not permitted to log in|role \"[^\"]*\" does not exist"
        ),
        "refused the login",
    ),
    (re.compile(r"database \"[^\"]*\" does not exist"), "has no such database"),
    (re.compile(r"permission denied"), "denied a permission"),
)  # psycopg's words, matched lower-cased

T = TypeVar("T")


class StorageUnavailable(StudyError):
    """The storage stayed unreachable past the outage bound; the message says how long and why."""


class StorageMisconfigured(StudyError):
    """The storage refused this process (login, database, permission): not waited for. ``problem`` is
    what :func:`misconfiguration` said, without the storage's name; build one with :meth:`of`."""

    problem: str = ""

    @classmethod
    def of(cls, problem: str, url: str | None = None, then: str = "") -> StorageMisconfigured:
        """``storage <url, redacted> <problem><then>`` (``the storage ...`` without a URL), on one line."""
        where = f"storage {redact_url(url)}" if url else "the storage"
        error = cls(redact_text(" ".join(f"{where} {problem}{then}".split())))
        error.problem = problem
        return error


def outage_bound_s() -> float:
    """Seconds a storage call waits for a storage that went away: ``$TUNER_STORAGE_OUTAGE_S`` (a number
    >= 0), else :data:`DEFAULT_OUTAGE_BOUND_S`. :class:`StudyError` for anything else."""
    text = (os.environ.get(OUTAGE_BOUND_ENV) or "").strip()
    if not text:
        return DEFAULT_OUTAGE_BOUND_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 <= value < float("inf")):
        raise StudyError(f"{OUTAGE_BOUND_ENV}={text!r} is not a number of seconds >= 0")
    return value


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        orig = getattr(current, "orig", None)  # SQLAlchemy's DBAPIError: the driver's exception
        if (
            isinstance(orig, BaseException)
            and orig not in seen
            and orig is not (current.__cause__ or current.__context__)
        ):
            seen.append(orig)
        current = current.__cause__ or current.__context__
    return seen


def _server_words(item: BaseException) -> str:
    """What the server (or libpq) said in ``item``, on one line: a connect failure's text after its last
    "FATAL:" or its "connection to server at ... failed:" preamble; redacted, at most 300 characters."""
    text = " ".join(str(item).split())
    if "FATAL:" in text:
        text = text.rpartition("FATAL:")[2]
    else:
        text = re.sub(r"^connection failed: (connection to server at .*? failed: )?", "", text)
    return redact_text(text.strip()[:300] or type(item).__name__)


def misconfiguration(error: BaseException) -> str | None:
    """What the storage refused, when ``error`` (or an exception it was raised from) is a refusal that
    waiting cannot change (see the module docstring): e.g. ``refused the login: password authentication
    failed for user "tuner"``; None for anything else."""
    for item in _chain(error):
        if isinstance(item, StorageMisconfigured):
            return item.problem
        sqlstate = getattr(item, "sqlstate", None)
        if isinstance(sqlstate, str):
            problem = MISCONFIGURED_SQLSTATES.get(sqlstate) or MISCONFIGURED_SQLSTATES.get(sqlstate[:2])
            if problem is not None:
                return f"{problem}: {_server_words(item)}"
        elif type(item).__module__.startswith("psycopg"):
            text = " ".join(str(item).lower().split())
            for pattern, problem in REFUSAL_WORDS:
                if pattern.search(text):
                    return f"{problem}: {_server_words(item)}"
    return None


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` (or an exception it was raised from) says the storage is away for now,
    not that the request was wrong nor that the storage refused it (see the module docstring)."""
    if misconfiguration(error) is not None:
        return False
    for item in _chain(error):
        if isinstance(item, StorageUnavailable):
            return False  # an inner call already waited out its bound
        if getattr(item, "connection_invalidated", False):
            return True
        sqlstate = getattr(item, "sqlstate", None)
        if isinstance(sqlstate, str) and (sqlstate.startswith("08") or sqlstate in TRANSIENT_SQLSTATES):
            return True
        module = type(item).__module__
        if module.startswith(("psycopg", "sqlite3")) and type(item).__name__ == "OperationalError":
            text = str(item).lower()
            if sqlstate is None and module.startswith("psycopg"):
                return True  # psycopg's connection-level failures carry no SQLSTATE
            if any(word in text for word in TRANSIENT_WORDS):
                return True
    return False


def _driver_words(error: BaseException) -> str:
    """The innermost driver message of ``error``, on one line (secrets redacted)."""
    chain = _chain(error)
    item = next((e for e in reversed(chain) if type(e).__module__.startswith(("psycopg", "sqlite3"))), chain[0])
    words = " ".join(line.strip() for line in str(item).splitlines() if line.strip())[:300]
    return redact_text(f"{type(item).__name__}: {words or 'no reason given'}")


class _OutageState:
    """This process's view of storage outages: whether one is in progress, when the last one ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.away_since: float | None = None  # monotonic time the storage was first found away
        self.recovered_at: float | None = None  # monotonic time the last outage ended
        self.local = threading.local()  # depth of nested calls: only the outermost retries


_STATE = _OutageState()


def _stderr_reporter(line: str) -> None:
    print(f"tuner: {line}", file=sys.stderr, flush=True)


_reporter: Callable[[str], None] = _stderr_reporter


def set_reporter(reporter: Callable[[str], None] | None) -> None:
    """Where the two lines of an outage go ("waiting", "back"); None restores standard error."""
    global _reporter
    _reporter = reporter or _stderr_reporter


def recovered_within(seconds: float) -> bool:
    """Whether the storage came back from an outage less than ``seconds`` ago, or is away now."""
    with _STATE.lock:
        if _STATE.away_since is not None:
            return True
        return _STATE.recovered_at is not None and time.monotonic() - _STATE.recovered_at < seconds


def _went_away(error: BaseException, bound: float) -> None:
    with _STATE.lock:
        if _STATE.away_since is not None:
            return
        _STATE.away_since = time.monotonic()
    _reporter(
        f"the storage is unreachable ({_driver_words(error)}); waiting up to {bound:.0f} s for it to come "
        f"back ({OUTAGE_BOUND_ENV}); trials in flight keep running"
    )


def _refused() -> None:
    """The outage in progress, if any, ended in a refusal: the stop's line says so, not a "back" line."""
    with _STATE.lock:
        _STATE.away_since = None


def _came_back() -> None:
    with _STATE.lock:
        if _STATE.away_since is None:
            return
        away = time.monotonic() - _STATE.away_since
        _STATE.away_since = None
        _STATE.recovered_at = time.monotonic()
    _reporter(f"the storage is back after {away:.0f} s; going on")


def call_through_outage(
    call: Callable[..., T], *args: Any, retrying: Callable[[BaseException], T | None] | None = None, **kwargs: Any
) -> T:
    """``call(*args, **kwargs)``, retried while its error :func:`is_transient`, up to the outage bound;
    a refusal (:func:`misconfiguration`) raises :class:`StorageMisconfigured` at once, chained.

    ``retrying(error)``, when given, is asked before each retry with the error a *retried* attempt
    raised that is not transient (e.g. "trial already finished" after an ambiguous commit): a
    non-None answer is returned as the call's result, None re-raises. Nested calls (a storage
    method calling another) retry only at the outermost level.
    """
    depth = getattr(_STATE.local, "depth", 0)
    if depth:
        return call(*args, **kwargs)
    bound = outage_bound_s()
    started: float | None = None
    wait = FIRST_WAIT_S
    attempt = 0
    while True:
        _STATE.local.depth = depth + 1
        try:
            result = call(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - classified below; anything else is re-raised as is
            problem = misconfiguration(error)
            if problem is not None:
                _refused()
                if isinstance(error, StorageMisconfigured):
                    raise
                raise StorageMisconfigured.of(problem) from error
            if attempt and not is_transient(error) and retrying is not None:
                answer = retrying(error)
                if answer is not None:
                    _came_back()
                    return answer
            if not is_transient(error):
                raise
            started = time.monotonic() if started is None else started
            waited = time.monotonic() - started
            if waited >= bound:
                raise StorageUnavailable(
                    f"the storage stayed unreachable for {waited:.0f} s "
                    f"({OUTAGE_BOUND_ENV}={bound:.0f}): {_driver_words(error)}"
                ) from error
            _went_away(error, bound)
            time.sleep(min(wait, max(0.0, bound - waited)))
            wait = min(wait * 2, LONGEST_WAIT_S)
            attempt += 1
            continue
        finally:
            _STATE.local.depth = depth
        if attempt:
            _came_back()
        return result
