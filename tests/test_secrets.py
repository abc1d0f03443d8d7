"""Secrets never leak: URL and text redaction, child environments, and the CLI's one-line errors."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner import secrets
from tuner.secrets import (
    MASK,
    WITHHELD_VARIABLES,
    child_environment,
    known_secrets,
    redact_text,
    redact_url,
    remember_url,
    url_secrets,
)

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cretPW"

# (url, what must stay readable) -- every form: the secret (anything containing "s3cret") must go.
URL_FORMS = [
    ("postgresql://tuner:s3cretPW@db.example:5432/studies", ["postgresql://tuner:***@db.example:5432/studies"]),
    ("postgresql://:s3cretPW@db.example/studies", ["postgresql://:***@db.example/studies"]),
    ("postgresql+psycopg://:s3cretPW@127.0.0.1:9/db", ["postgresql+psycopg://:***@127.0.0.1:9/db"]),
    ("postgresql+psycopg2://u:s3cret%40PW%2F@host/db", ["postgresql+psycopg2://u:***@host/db"]),
    ("postgresql://u:s3cret@PW@host:5432/db", ["postgresql://u:***@host:5432/db"]),  # last '@' ends the userinfo
    ("postgresql://u:s3/cr?et#PW@host/db?sslmode=require", ["postgresql://u:***@host/db?sslmode=require"]),
    ("postgresql://u:s3cretPW@[::1]:5432/db", ["postgresql://u:***@[::1]:5432/db"]),
    (
        "postgresql://u@host/db?password=s3cretPW&sslmode=require",
        ["postgresql://u@host/db?password=***&sslmode=require"],
    ),
    (
        "postgresql://u@host/db?sslmode=require&PassWord=s3cretPW",
        ["postgresql://u@host/db?sslmode=require&PassWord=***"],
    ),
    ("postgresql://u:s3cretPW@host/db?password=s3cretPW2", ["postgresql://u:***@host/db?password=***"]),
    (
        "postgresql://host/db?passwd=s3cret1&pwd=s3cret2&sslpassword=s3cret3&application_name=tuner",
        ["postgresql://host/db?passwd=***&pwd=***&sslpassword=***&application_name=tuner"],
    ),
    (
        "https://mlflow.example/api?token=s3cret&access_token=s3cret2&api_key=s3cret3&apikey=s3cret4&Secret=s3cret5"
        "&key=s3cret6&x=1",
        ["https://mlflow.example/api?token=***&access_token=***&api_key=***&apikey=***&Secret=***&key=***&x=1"],
    ),
    ("https://mlflow.example/api?%70assword=s3cret", ["https://mlflow.example/api?%70assword=***"]),
    ("http://admin:s3cretPW@mlflow.example:5000", ["http://admin:***@mlflow.example:5000"]),
    (
        "https://admin:s3cretPW@mlflow.example:5000/#/experiments/1",
        ["https://admin:***@mlflow.example:5000/#/experiments/1"],
    ),
    ("https://mlflow.example/#access_token=s3cretPW", ["https://mlflow.example/#access_token=***"]),
    (
        "mysql+pymysql://root:s3cretPW@localhost/optuna?charset=utf8mb4",
        ["mysql+pymysql://root:***@localhost/optuna?charset=utf8mb4"],
    ),
]
UNCHANGED = [
    "postgresql://tuner@db.example:5432/studies",
    "sqlite:////tmp/studies/studies.db",
    "sqlite:///relative/studies.db",
    "file:///home/me/mlruns",
    "databricks://profile",
    "databricks://scope:prefix",
    "databricks",
    "http://127.0.0.1:5000",
    "https://mlflow.example:443/#/experiments/3",
    "postgresql://[::1]:5432/db?sslmode=require",
    "",
    "plain words, no URL",
]


@pytest.mark.parametrize(("url", "shown"), URL_FORMS, ids=[u for u, _ in URL_FORMS])
def test_redact_url_hides_the_secret_of_every_form(url: str, shown: list[str]) -> None:
    redacted = redact_url(url)
    assert "s3cret" not in redacted and "s3/cr" not in redacted
    assert redacted == shown[0]


@pytest.mark.parametrize("url", UNCHANGED)
def test_urls_without_secrets_stay_as_they_are(url: str) -> None:
    assert redact_url(url) == url
    assert url_secrets(url) == []


def test_an_ambiguous_at_sign_is_read_as_sqlalchemy_reads_it() -> None:
    """SQLAlchemy takes everything from the first ':' to the '@' as the password: so do we (hide, not show)."""
    assert redact_url("postgresql://:12/34@host/db") == "postgresql://:***@host/db"
    assert redact_url("http://host:5000/x?mail=a@b") == "http://host:***@b"


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        42,
        b"postgresql://u:pw@h",
        "://",
        "a://:@",
        "x://@@@",
        "%zz://u:%zz@h",
        "?" * 50,
        "\x00://u:p\x00@h",
        "postgresql://" + "@" * 10_000,
    ],
)
def test_redaction_never_raises(garbage: object) -> None:
    assert isinstance(redact_url(garbage), str)  # type: ignore[arg-type]
    assert isinstance(redact_text(garbage), str)  # type: ignore[arg-type]


def test_url_secrets_are_given_as_written_and_decoded() -> None:
    assert url_secrets("postgresql://u:p%40ss@h/db?token=t%2Fk") == ["p%40ss", "t%2Fk", "p@ss", "t/k"]


DRIVER_ERROR = (
    '(psycopg.OperationalError) connection failed: connection to server at "127.0.0.1", port 9 failed: '
    "Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n"
    "[SQL: connect 'postgresql+psycopg://tuner:s3cretPW@127.0.0.1:9/db?sslmode=require&password=s3cretPW2']\n"
    "dsn: host=127.0.0.1 port=9 user=tuner password=s3cretPW3 dbname=db\n"
    "(Background on this error at: https://sqlalche.me/e/20/e3q8)"
)


def test_redact_text_hides_urls_and_secret_pairs_in_a_driver_error() -> None:
    text = redact_text(DRIVER_ERROR, environ={})
    assert "s3cret" not in text
    assert "'postgresql+psycopg://tuner:***@127.0.0.1:9/db?sslmode=require&password=***'" in text
    assert "password=*** dbname=db" in text and "https://sqlalche.me/e/20/e3q8" in text
    assert "Connection refused" in text and 'at "127.0.0.1", port 9' in text


def test_redact_text_hides_known_secret_values_from_the_environment() -> None:
    environ = {
        "MLFLOW_TRACKING_PASSWORD": "hunter22",
        "MLFLOW_TRACKING_TOKEN": "tok-abc-123",
        "PGPASSWORD": "pg-pass",
        "TUNER_STORAGE": "postgresql://u:st%40rage@h/db",
        "MLFLOW_TRACKING_URI": "https://u:mlfl0w@h",
        "HOME": "/home/me",
    }
    text = (
        "auth failed with hunter22; bearer tok-abc-123; libpq used pg-pass; the driver decoded st@rage;"
        " mlfl0w rejected; home /home/me"
    )
    redacted = redact_text(text, environ=environ)
    for value in ("hunter22", "tok-abc-123", "pg-pass", "st@rage", "mlfl0w"):
        assert value not in redacted
    assert "home /home/me" in redacted and redacted.count(MASK) == 5


def test_short_secrets_do_not_blank_common_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_remembered", set())  # URLs earlier tests in this process opened
    assert known_secrets({"PGPASSWORD": "pg", "TUNER_STORAGE": "postgresql://u:abc@h/db"}) == []
    assert redact_text("pg abc", environ={"PGPASSWORD": "pg"}) == "pg abc"


def test_a_remembered_url_is_hidden_in_later_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_remembered", set())
    remember_url("postgresql://u:rem3mbered@h/db")
    assert (
        redact_text("the server said: password rem3mbered is wrong", environ={})
        == "the server said: password *** is wrong"
    )


def test_child_environment_drops_the_tuners_secrets() -> None:
    base = {
        "TUNER_STORAGE": "sqlite:////tmp/x.db",
        "MLFLOW_TRACKING_PASSWORD": "pw12",
        "MLFLOW_TRACKING_TOKEN": "t0ken",
        "PGPASSWORD": "pw34",
        "MLFLOW_TRACKING_URI": "https://u:pw56@mlflow",
        "MLFLOW_TRACKING_USERNAME": "u",
        "PATH": "/usr/bin",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    env = child_environment(base)
    assert env == {"MLFLOW_TRACKING_USERNAME": "u", "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0"}
    assert base["TUNER_STORAGE"] == "sqlite:////tmp/x.db", "the base is not modified"
    assert child_environment({"MLFLOW_TRACKING_URI": "http://mlflow:5000"}) == {
        "MLFLOW_TRACKING_URI": "http://mlflow:5000"
    }
    assert set(WITHHELD_VARIABLES) == {
        "TUNER_STORAGE",
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_TRACKING_TOKEN",
        "PGPASSWORD",
        "TUNER_TOKEN",
    }


def test_child_environment_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", SECRET)
    monkeypatch.setenv("TUNER_SECRETS_VISIBLE", "yes")
    env = child_environment()
    assert "PGPASSWORD" not in env and env["TUNER_SECRETS_VISIBLE"] == "yes"
    assert os.environ["PGPASSWORD"] == SECRET


def test_there_is_one_implementation() -> None:
    from tuner.storage import opening as storage

    assert storage.redact_url is redact_url


def test_the_module_is_foundation_standard_library_only() -> None:
    tree = ast.parse((ROOT / "tuner" / "secrets.py").read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported


def test_a_storage_that_cannot_be_opened_names_no_password() -> None:
    from tuner.errors import StudyError
    from tuner.storage.opening import open_storage

    with pytest.raises(StudyError) as caught:
        open_storage(f"postgresql+psycopg://:{SECRET}@127.0.0.1:9/db?password={SECRET}2")
    assert SECRET not in str(caught.value)
    assert "postgresql+psycopg://:***@127.0.0.1:9/db" in str(caught.value)


CLI_CASES = [
    (["status"], f"postgresql+psycopg://:{SECRET}@127.0.0.1:9/db"),
    (["status", "somestudy"], f"postgresql+psycopg://:{SECRET}@127.0.0.1:9/db"),
    (["status"], f"postgresql://u:{SECRET}@127.0.0.1:9/db?password={SECRET}2"),
    (["status", "somestudy"], f"postgresql://u:{SECRET}@127.0.0.1:9/db?password={SECRET}2"),
]


@pytest.mark.parametrize("via", ["option", "environment"])
@pytest.mark.parametrize(("args", "url"), CLI_CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else v[:24])
def test_the_cli_prints_one_line_without_the_password(args: list[str], url: str, via: str, tmp_path: Path) -> None:
    """Port 9: nothing listens (or the driver is missing): exit 2, one line on stderr, no secret, no traceback."""
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": "",
        "TUNER_STORAGE": url if via == "environment" else "",
        "COLUMNS": "200",
    }
    extra = ["--storage", url] if via == "option" else []
    tuner = Path(sys.executable).parent / "tuner"
    done = subprocess.run(
        [str(tuner), *args, *extra, "--home", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot open storage postgresql"), done.stderr
    assert "127.0.0.1:9/db" in lines[0]


@pytest.mark.parametrize(
    "name",
    [
        "DB_PASSWORD",
        "MY_API_TOKEN",
        "CLIENT_SECRET",
        "apiKey",
        "x-api-key",
        "DB_PASS",
        "SSH_KEY",
        "userPwd",
        "SERVICE_AUTH",
        "pass",
        "token",
        "AWS_SECRET_ACCESS_KEY",
    ],
)
def test_secret_names_are_recognised_by_their_last_word_too(name: str) -> None:
    from tuner.secrets import is_secret_name

    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["KEYFRAMES", "BYPASS", "MONKEY", "HOTKEY", "SSH_KEY_PATH", "OMP_NUM_THREADS", "PATH", "PASSES", "infer_frames"],
)
def test_names_that_only_contain_a_secret_word_are_not_secrets(name: str) -> None:
    from tuner.secrets import is_secret_name

    assert not is_secret_name(name)
