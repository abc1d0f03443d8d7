"""A real, throwaway PostgreSQL cluster for tests: ``initdb`` + ``pg_ctl`` on 127.0.0.1.

:func:`running_postgres` creates a cluster under ``base_dir``, starts it on a free
TCP port (plus a unix socket in the cluster folder), yields a
:class:`PostgresCluster` and always stops it (``pg_ctl stop -m immediate``), leaving
no server running. TCP connections authenticate with SCRAM: the superuser
:data:`SUPERUSER` gets a random password (``cluster.password``). Settings are tuned
for tests, not for durability (``fsync``, ``synchronous_commit`` and
``full_page_writes`` off) and :data:`MAX_CONNECTIONS` leaves room for ~10 worker
processes with small pools each.

``initdb`` refuses to run as root: as root, the cluster folder is handed to the
Debian ``postgres`` user and every server command runs through ``runuser -u postgres --``.
When that user cannot reach ``base_dir`` (a 0700 parent such as pytest's
``/tmp/pytest-of-root``) or its path is too long for a unix socket, the cluster lives
in a fresh folder of the system temp directory instead, removed on stop.
Binaries: ``pg_config --bindir``, else the newest ``/usr/lib/postgresql/*/bin``, else PATH.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from tuner.errors import HostError
from tuner.host import free_port

SUPERUSER = "tuner"
MAX_CONNECTIONS = 200
START_TIMEOUT_S = 60
_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": str(MAX_CONNECTIONS),
    "shared_buffers": "32MB",
    "listen_addresses": "'127.0.0.1'",
}
_SOCKET_PATH_LIMIT = 90  # unix socket paths are limited to ~107 bytes, ".s.PGSQL.NNNNN" included


class PostgresNotInstalled(HostError, RuntimeError):
    """No ``initdb`` / ``pg_ctl`` on this machine (Debian: ``apt-get install postgresql``)."""


def postgres_bindir() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``; :class:`PostgresNotInstalled` when there is none."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(Path(found.stdout.strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent.name), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    raise PostgresNotInstalled("PostgreSQL is not installed: no initdb/pg_ctl (Debian: apt-get install postgresql)")


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


@dataclass
class PostgresCluster:
    """A running cluster: TCP on ``127.0.0.1:port``, superuser :data:`SUPERUSER` with ``password``."""

    root: Path  # the cluster folder: data/, the socket, server.log
    port: int
    password: str
    bindir: Path
    as_user: list[str]  # command prefix: ["runuser", "-u", "postgres", "--"] as root, [] otherwise
    owns_root: bool = False  # root is a temp folder of our own: removed on stop
    stopped: bool = field(default=False, init=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres", user: str | None = None, password: str | None = None) -> str:
        """``postgresql+psycopg://user:password@127.0.0.1:port/database`` (the superuser by default)."""
        name, secret = (user, password or "") if user else (SUPERUSER, password or self.password)
        credentials = quote(name, safe="") + (f":{quote(secret, safe='')}" if secret else "")
        return f"postgresql+psycopg://{credentials}@127.0.0.1:{self.port}/{quote(database, safe='')}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run one statement as the superuser, in autocommit (CREATE DATABASE needs it)."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=SUPERUSER,
            password=self.password,
            dbname=database,
            autocommit=True,
            connect_timeout=10,
        ) as connection:
            connection.execute(sql.encode())

    def create_database(self, name: str, owner: str | None = None) -> str:
        """Create database ``name`` and return its superuser URL.

        ``owner``: a role (see :meth:`create_role`) that owns the database and so may
        create tables in it (its ``public`` schema belongs to the database owner).
        """
        from psycopg import sql

        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if owner:
            statement = sql.SQL("{} OWNER {}").format(statement, sql.Identifier(owner))
        self.execute(statement.as_string())
        return self.url(name)

    def create_role(self, name: str, password: str) -> None:
        """A login role with ``password`` that owns nothing: give it a database with
        ``create_database(db, owner=name)`` and connect with ``url(db, name, password)``."""
        from psycopg import sql

        self.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), sql.Literal(password)).as_string()
        )

    def pg_ctl(self, *arguments: str) -> None:
        """Run ``pg_ctl -D <data> <arguments>`` (as the server's user); RuntimeError with its last line on failure."""
        _run(self.as_user + [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), *arguments])

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m <mode>``: what maintenance or a fail-over does to the clients; waits until up."""
        self.pg_ctl("restart", "-m", mode, "-w", "-t", str(START_TIMEOUT_S))

    def shut_down(self, mode: str = "fast") -> None:
        """Stop the server (``pg_ctl stop -m <mode>``) so that :meth:`start_again` can bring it back."""
        self.pg_ctl("stop", "-m", mode, "-w", "-t", str(START_TIMEOUT_S))

    def start_again(self) -> None:
        """Start a server :meth:`shut_down` stopped, on the same port; waits until it accepts connections."""
        self.pg_ctl("start", "-w", "-t", str(START_TIMEOUT_S))

    def stop(self) -> None:
        """Stop the server now (``pg_ctl stop -m immediate``, then SIGKILL); idempotent."""
        if self.stopped:
            return
        self.stopped = True
        if (self.data / "postmaster.pid").exists():
            stopped = _run(
                self.as_user
                + [str(self.bindir / "pg_ctl"), "-D", str(self.data), "stop", "-m", "immediate", "-w", "-t", "30"],
                check=False,
            )
            if stopped.returncode != 0:
                _kill_postmaster(self.data)
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)


def _run(command: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise RuntimeError(f"{Path(command[-1] if command[0] == 'runuser' else command[0]).name} failed: {last}")
    return done


def _kill_postmaster(data: Path) -> None:
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass


def _cluster_root(base_dir: Path, as_user: list[str]) -> tuple[Path, bool]:
    """``base_dir`` when the server user can reach it and its socket path fits; else a temp folder."""
    base_dir.mkdir(parents=True, exist_ok=True)
    reachable = not as_user or _run(as_user + ["test", "-x", str(base_dir)], check=False).returncode == 0
    if reachable and len(str(base_dir)) <= _SOCKET_PATH_LIMIT:
        return base_dir, False
    return Path(tempfile.mkdtemp(prefix="tuner-pg-")), True


def _start(cluster: PostgresCluster) -> None:
    """initdb, write the settings, ``pg_ctl start -w`` (a new port when the chosen one was taken)."""
    pwfile = cluster.root / "pwfile"
    pwfile.write_text(cluster.password + "\n")
    pwfile.chmod(0o600)
    if cluster.as_user:
        shutil.chown(cluster.root, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    _run(
        cluster.as_user
        + [
            str(cluster.bindir / "initdb"),
            "-D",
            str(cluster.data),
            "-U",
            SUPERUSER,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
    )
    pwfile.unlink()
    settings = {**_SETTINGS, "unix_socket_directories": f"'{cluster.root}'"}
    for attempt in range(3):
        with open(cluster.data / "postgresql.conf", "a") as conf:
            conf.write("".join(f"{key} = {value}\n" for key, value in {**settings, "port": str(cluster.port)}.items()))
        started = _run(
            cluster.as_user
            + [
                str(cluster.bindir / "pg_ctl"),
                "-D",
                str(cluster.data),
                "-l",
                str(cluster.log),
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "start",
            ],
            check=False,
        )
        if started.returncode == 0:
            return
        log = cluster.log.read_text(errors="replace") if cluster.log.exists() else ""
        if attempt < 2 and "in use" in log:
            cluster.port = free_port()  # the later "port = ..." line wins
            continue
        tail = " | ".join(log.strip().splitlines()[-3:]) or started.stderr.strip()
        raise RuntimeError(f"PostgreSQL did not start: {tail}")


@contextmanager
def running_postgres(base_dir: Path) -> Iterator[PostgresCluster]:
    """A started cluster under ``base_dir`` (see the module docstring); stopped on exit, always."""
    bindir = postgres_bindir()
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root, owns_root = _cluster_root(Path(base_dir).absolute(), as_user)
    cluster = PostgresCluster(root, free_port(), secrets.token_urlsafe(18), bindir, as_user, owns_root)
    try:
        _start(cluster)
        yield cluster
    finally:
        cluster.stop()
