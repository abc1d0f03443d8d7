"""``tuner serve`` over real HTTP: auth, bind, refusals, summaries, export, cancel, and the whole path
submit (``tuner submit``) -> a worker runs the study (``tuner worker --once``) -> export, on a real storage.

The storage URL carries a password (:data:`service_harness.SECRET`); no answer, log line or export
may show it, nor the token.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import psutil
import pytest
import yaml
from service_harness import (  # noqa: F401 - service and storage_url are fixtures
    COMMAND_SPEC,
    FAKE_SPEC,
    PYTHON_SPEC,
    SECRET,
    TOKEN,
    Service,
    running_service,
    service,
    spec_text,
    storage_url,
)

ROUTES = [
    ("GET", "/api/studies"),
    ("GET", "/api/studies/x"),
    ("GET", "/api/studies/x/trials"),
    ("GET", "/api/studies/x/export?profile=balanced"),
    ("POST", "/api/studies/x/cancel"),
    ("POST", "/api/studies"),
    ("GET", "/openapi.json"),
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNER_", "MLFLOW_"))}
    return {**env, "PYTHONPATH": str(FAKE_SPEC.parents[2]), **extra}


def tuner(*args: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**env),
    )


@contextmanager
def serve_process(*args: str, cwd: Path, **env: str) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """``tuner serve --port 0 ARGS`` as a real process: (process, its URL, its output lines once it ended).

    Stopped with SIGTERM on exit; the test reads ``process.returncode`` and the lines afterwards.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "tuner", "serve", "--port", "0", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
    )
    lines: list[str] = []
    errors: list[str] = []
    log: list[str] = []  # stdout then stderr, filled once the process has ended
    first = threading.Event()

    def read(stream: object, into: list[str], signal_first: bool) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line)
            if signal_first:
                first.set()
        first.set()

    readers = [
        threading.Thread(target=read, args=(process.stdout, lines, True), daemon=True),
        threading.Thread(target=read, args=(process.stderr, errors, False), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        assert first.wait(120), "tuner serve printed nothing"
        assert lines, f"tuner serve exited: {''.join(errors)}"
        url = lines[0].split()[2]
        yield process, url, log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for reader in readers:
            reader.join(10)
        log.extend(lines + errors)


def _assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text and TOKEN not in text, text[:2000]


# ------------------------------------------------------------------ auth


def test_healthz_is_open_and_every_other_route_needs_the_bearer_token(service: Service) -> None:
    assert service.request("GET", "/healthz", token=None).json() == {"status": "ok"}
    for method, path in ROUTES:
        for token, headers in (
            (None, {}),
            ("wrong-token-0123456789", {}),
            (None, {"Authorization": f"Basic {TOKEN}"}),
            (None, {"Authorization": TOKEN}),
            (TOKEN + "x", {}),
        ):
            answer = service.request(
                method, path, {"spec_yaml": "x"} if method == "POST" else None, token=token, headers=headers
            )
            assert answer.status == 401, (method, path, answer)
            assert answer.headers.get("www-authenticate") == "Bearer"
            assert answer.json() == {"detail": "missing or wrong bearer token"}
    assert service.request("GET", "/api/studies").json() == {"studies": []}
    assert (
        service.request("GET", "/api/studies", token=None, headers={"Authorization": f"bearer {TOKEN}"}).status == 200
    ), "the scheme is case-insensitive"


def test_openapi_needs_the_token_and_declares_every_route_and_the_bearer_scheme(service: Service) -> None:
    schema = service.request("GET", "/openapi.json").json()
    assert set(schema["paths"]) == {
        "/healthz",
        "/api/studies",
        "/api/studies/{name}",
        "/api/studies/{name}/trials",
        "/api/studies/{name}/cancel",
        "/api/studies/{name}/export",
    }
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert schema["paths"]["/api/studies"]["post"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]
    assert set(schema["paths"]["/api/studies"]["post"]["responses"]) >= {
        "201",
        "400",
        "401",
        "403",
        "409",
        "413",
        "422",
    }
    assert service.request("GET", "/docs").status == 404, "no docs page (it would load scripts from a CDN)"
    _assert_no_secret(str(schema))


def test_serve_refuses_to_start_without_a_token_or_insecure_off_localhost(tmp_path: Path) -> None:
    for args, fragment in (
        (["--home", str(tmp_path / "home")], "no token"),
        (["--home", str(tmp_path / "home"), "--host", "0.0.0.0", "--insecure-localhost"], "loopback"),
    ):
        done = tuner("serve", *args, cwd=tmp_path, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and fragment in done.stderr
        assert not (tmp_path / "home").exists(), "a refused service creates no storage"
    short = tmp_path / "short-token"
    short.write_text("abc\n")
    done = tuner("serve", "--token-file", str(short), "--home", str(tmp_path / "home"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "shorter than 16" in done.stderr and "abc" not in done.stderr


def test_serve_binds_localhost_by_default_and_insecure_localhost_serves_without_a_token(tmp_path: Path) -> None:
    with serve_process("--home", str(tmp_path / "home"), "--insecure-localhost", cwd=tmp_path) as (process, url, _):
        assert url.startswith("http://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1])
        listening = [
            c.laddr for c in psutil.Process(process.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
        ]
        assert [(address.ip, address.port) for address in listening] == [("127.0.0.1", port)]
        open_service = Service(url, None, "")
        assert open_service.request("GET", "/api/studies").json() == {"studies": []}
    assert process.returncode == 0, "SIGTERM is a graceful stop"


# ------------------------------------------------------------------ submitting


def test_command_and_python_workloads_are_refused_unless_allowed(storage_url: str) -> None:
    with running_service(storage_url) as strict:
        for name, spec in (("cmd", COMMAND_SPEC), ("py", PYTHON_SPEC)):
            answer = strict.submit(name, spec)
            assert answer.status == 403, answer
            assert "--allow-command-workloads" in answer.json()["detail"]
        assert strict.request("GET", "/api/studies").json() == {"studies": []}, "nothing was created"
    with running_service(storage_url, allow_command_workloads=True) as lenient:
        assert lenient.submit("cmd", COMMAND_SPEC).status == 201
        assert lenient.submit("py", PYTHON_SPEC).status == 201
        assert [s["name"] for s in lenient.request("GET", "/api/studies").json()["studies"]] == ["cmd", "py"]


def test_path_like_and_bad_names_are_refused_and_create_nothing(service: Service, tmp_path: Path) -> None:
    before = set(tmp_path.rglob("*"))
    for name in ("../x", "a/b", "/tmp/abs", "..", ".hidden", "a\\b", "x" * 129, "", "name with space"):
        answer = service.submit(name)
        assert answer.status == 400, (name, answer)
        assert answer.json()["detail"].startswith("study name"), answer
    for path in ("/api/studies/..", "/api/studies/.hidden/trials", "/api/studies/..%2F..%2Fetc/export"):
        answer = service.request("GET", path)
        assert answer.status in (400, 404), (path, answer)
    created = {p for p in set(tmp_path.rglob("*")) - before if not p.name.startswith("studies.db")}
    assert created == set(), created
    assert service.request("GET", "/api/studies").json() == {"studies": []}


def test_a_bad_spec_is_one_line_400_a_taken_name_409_a_bad_field_422_a_huge_body_413(service: Service) -> None:
    bad = spec_text().replace("direction: maximize", "direction: sideways")
    answer = service.submit("bad", bad)
    assert answer.status == 400
    detail = answer.json()["detail"]
    assert detail.startswith("submitted spec:") and "objectives" in detail and "\n" not in detail
    control = service.submit("ctl", "name: x\x0c\n")
    assert control.status == 400 and control.json()["detail"].startswith(
        "submitted spec:1: (top level): not valid YAML"
    )
    gpu = service.submit("gpu", spec_text(), gpu_type=None)
    assert gpu.status == 400 and "gpu_type is required" in gpu.json()["detail"]
    assert service.submit("ok").status == 201
    taken = service.submit("ok")
    assert taken.status == 409 and "already exists" in taken.json()["detail"]
    for body in (
        {"spec_yaml": 3},
        {"name": "x"},
        {"spec_yaml": "x", "trials": 0},
        {"spec_yaml": "x", "bogus": 1},
        {"spec_yaml": "x", "sampler": "annealing"},
        {"spec_yaml": "x", "gpu_type": "a\nb"},
    ):
        answer = service.request("POST", "/api/studies", body)
        assert answer.status == 422, (body, answer)
        assert isinstance(answer.json()["detail"], str) and "\n" not in answer.json()["detail"]
    assert service.request("POST", "/api/studies", raw=b"{not json").status == 422
    huge = service.request("POST", "/api/studies", raw=b"{" + b" " * (2 << 20) + b"}")
    assert huge.status == 413 and "2,097,152" in huge.json()["detail"]
    assert service.request("GET", "/api/studies/ok/trials?limit=100000").status == 422


# ------------------------------------------------------------------ views


def _add_trial(study: optuna.Study, values: list[float], params: dict[str, object], **attrs: object) -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    distributions = {
        "sleep_s": FloatDistribution(0.001, 0.02, step=0.001),
        "noise": IntDistribution(0, 40, step=5),
        "batch_size": CategoricalDistribution([1, 2]),
    }
    study.add_trial(
        optuna.trial.create_trial(
            params=params,
            distributions=distributions,
            values=values,
            user_attrs={"measured": True, "outcome": "OK", "role": "search", **attrs},
        )
    )


def test_summary_trials_workers_and_front_come_from_the_storage(service: Service) -> None:
    assert service.submit("views", trials=5).status == 201
    study = optuna.load_study(study_name="views", storage=service.storage_url)
    _add_trial(
        study, [0.01, 40.0], {"sleep_s": 0.01, "noise": 0, "batch_size": 1}, host="h1", worker="h1:42", slot="cpu0"
    )
    _add_trial(
        study, [0.02, 45.0], {"sleep_s": 0.02, "noise": 0, "batch_size": 1}, host="h1", worker="h1:42", slot="cpu0"
    )
    _add_trial(study, [0.03, 30.0], {"sleep_s": 0.02, "noise": 5, "batch_size": 2}, host="h2", worker="h2:7")
    _add_trial(study, [0.05, 20.0], {"sleep_s": 0.02, "noise": 10, "batch_size": 1})  # before workers were recorded
    summary = service.request("GET", "/api/studies/views").json()
    assert summary["counts"] == {"OK": 4, "WAITING": 2}, "reference and baseline wait for a worker"
    assert (summary["measured"], summary["budget_trials"], summary["budget_left"]) == (4, 5, 1)
    assert summary["gpu_type"] == "cpu" and summary["cancelled"] is False
    assert [(w["worker"], w["host"], w["trials"]) for w in summary["workers"]] == [
        ("h1:42", "h1", 2),
        ("h2:7", "h2", 1),
    ]
    assert all(w["last_seen"] for w in summary["workers"])
    assert [p["number"] for p in summary["front"]] == [2, 3]
    assert summary["front"][0]["values"] == [0.01, 40.0] and summary["front"][0]["params"]["noise"] == 0
    page = service.request("GET", "/api/studies/views/trials?offset=1&limit=3").json()
    assert (page["total"], page["offset"], page["limit"]) == (6, 1, 3)
    assert [t["number"] for t in page["trials"]] == [1, 2, 3]
    assert page["trials"][1]["host"] == "h1" and page["trials"][1]["slot"] == "cpu0"
    assert page["trials"][0]["state"] == "WAITING" and page["trials"][0]["role"] == "baseline"
    listed = service.request("GET", "/api/studies").json()["studies"]
    assert listed == [
        {
            "name": "views",
            "trials": 6,
            "gpu_type": "cpu",
            "budget_trials": 5,
            "cancelled": False,
            "tuner_study": True,
            "used_device_h": 0.0,
            "unit": "CPU-h",
        }
    ], "these trials recorded no cost"
    assert service.request("GET", "/api/studies/nosuch").status == 404


def test_export_needs_a_feasible_trial_and_takes_a_profile_or_a_policy(service: Service) -> None:
    assert service.submit("ex").status == 201
    nothing = service.request("GET", "/api/studies/ex/export?profile=balanced")
    assert nothing.status == 409 and "no feasible measured trial" in nothing.json()["detail"]
    study = optuna.load_study(study_name="ex", storage=service.storage_url)
    _add_trial(study, [0.01, 40.0], {"sleep_s": 0.01, "noise": 0, "batch_size": 1})
    _add_trial(study, [0.02, 45.0], {"sleep_s": 0.02, "noise": 0, "batch_size": 1})
    answer = service.request("GET", "/api/studies/ex/export?profile=fast")
    assert answer.status == 200 and answer.headers["content-type"].startswith("application/yaml")
    document = yaml.safe_load(answer.text)
    assert document["schema"] == "tuner.config/v1" and document["provenance"]["trial"] == 2
    assert document["provenance"]["storage"].endswith("?password=***")
    quality = service.request("GET", "/api/studies/ex/export?profile=quality")
    assert yaml.safe_load(quality.text)["provenance"]["trial"] == 3
    policy = service.request("GET", "/api/studies/ex/export?policy=knee")
    assert policy.status == 200 and yaml.safe_load(policy.text)["selection"]["policy"] == "knee"
    assert service.request("GET", "/api/studies/ex/export?profile=fast&policy=knee").status == 400
    assert service.request("GET", "/api/studies/ex/export?policy=maximize%20nosuch_metric").status in (400, 409)
    assert service.request("GET", "/api/studies/ex/export?profile=fastest").status == 422
    plain = optuna.create_study(storage=service.storage_url, study_name="plain", directions=["minimize", "maximize"])
    plain.add_trial(optuna.trial.create_trial(params={}, distributions={}, values=[1.0, 2.0]))
    assert service.request("GET", "/api/studies/plain").json()["objectives"] == []
    for query in ("", "?profile=fast", "?profile=quality", "?policy=knee"):
        foreign = service.request("GET", f"/api/studies/plain/export{query}")
        assert foreign.status == 409 and "not created by tuner" in foreign.json()["detail"], (query, foreign)
    _assert_no_secret(answer.text, quality.text, policy.text)


def test_export_without_options_follows_the_spec_rule_and_says_so(service: Service) -> None:
    assert service.submit("ruled", spec_text() + "export: {profile: quality}\n").status == 201
    study = optuna.load_study(study_name="ruled", storage=service.storage_url)
    _add_trial(study, [0.01, 40.0], {"sleep_s": 0.01, "noise": 0, "batch_size": 1})
    _add_trial(study, [0.02, 45.0], {"sleep_s": 0.02, "noise": 0, "batch_size": 1})
    default = yaml.safe_load(service.request("GET", "/api/studies/ruled/export").text)
    assert default["provenance"]["trial"] == 3 and default["selection"]["profile"] == "quality"
    assert default["selection"]["rule"] == "profile quality (the spec's export rule)"
    fast = yaml.safe_load(service.request("GET", "/api/studies/ruled/export?profile=fast").text)
    assert fast["provenance"]["trial"] == 2 and fast["selection"]["rule"] == "profile fast (command line)"


def test_cancel_marks_the_study_for_its_workers(service: Service) -> None:
    assert service.submit("c").status == 201
    answer = service.request("POST", "/api/studies/c/cancel")
    assert answer.status == 200 and answer.json()["cancelled"] is True
    study = optuna.load_study(study_name="c", storage=service.storage_url)
    assert study.user_attrs["cancelled"] is True and study.user_attrs["cancelled_at"].endswith("Z")
    assert service.request("POST", "/api/studies/c/cancel").status == 200, "cancelling twice is fine"
    assert service.request("POST", "/api/studies/nosuch/cancel").status == 404


# ------------------------------------------------------------------ the whole path


@pytest.mark.slow
def test_submit_then_a_worker_runs_it_then_export_and_cancel_over_real_http(tmp_path: Path) -> None:
    """`tuner serve` + `tuner submit` + `tuner worker` (which finds the submitted study itself) as real processes."""
    home = tmp_path / "home"
    url = f"sqlite:///{tmp_path / 'studies.db'}?password={SECRET}"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    answers: list[str] = []
    with serve_process("--storage", url, "--home", str(home), "--token-file", str(token_file), cwd=tmp_path) as (
        process,
        base,
        log,
    ):
        assert base.startswith("http://127.0.0.1:")
        submitted = tuner(
            "submit",
            str(FAKE_SPEC),
            "--server",
            base,
            "--name",
            "e2e",
            "--trials",
            "4",
            "--gpu-type",
            "cpu",
            cwd=tmp_path,
            TUNER_TOKEN=TOKEN,
        )
        assert submitted.returncode == 0, submitted.stderr
        assert submitted.stdout.startswith("submitted study e2e to http://127.0.0.1:")
        assert len(submitted.stdout.strip().splitlines()) == 2
        again = tuner(
            "submit",
            str(FAKE_SPEC),
            "--server",
            base,
            "--name",
            "e2e",
            "--gpu-type",
            "cpu",
            cwd=tmp_path,
            TUNER_TOKEN=TOKEN,
        )
        assert again.returncode == 2 and again.stderr.startswith("error: ") and "409 Conflict" in again.stderr
        unauthorised = tuner("submit", str(FAKE_SPEC), "--server", base, "--gpu-type", "cpu", cwd=tmp_path)
        assert unauthorised.returncode == 2 and "401 Unauthorized" in unauthorised.stderr

        worker = tuner("worker", "--once", "--storage", url, "--no-mlflow", "--home", str(home), cwd=tmp_path)
        assert worker.returncode == 0, worker.stderr[-3000:]
        assert "no open study for this host: done (--once)" in worker.stdout

        service = Service(base, TOKEN, url)
        summary = service.request("GET", "/api/studies/e2e")
        body = summary.json()
        assert body["measured"] == 4 and body["budget_left"] == 0 and body["counts"].get("OK", 0) >= 1
        assert body["front"], body
        trials = service.request("GET", "/api/studies/e2e/trials")
        assert trials.json()["total"] == body["trials"]
        assert {t["role"] for t in trials.json()["trials"]} >= {"reference", "baseline"}
        export = service.request("GET", "/api/studies/e2e/export?profile=balanced")
        assert export.status == 200, export.text
        document = yaml.safe_load(export.text)
        assert document["schema"] == "tuner.config/v1" and document["provenance"]["study"] == "e2e"
        assert document["provenance"]["storage"] == f"sqlite:///{tmp_path / 'studies.db'}?password=***"
        cancelled = service.request("POST", "/api/studies/e2e/cancel")
        assert cancelled.json()["cancelled"] is True
        answers += [
            summary.text,
            trials.text,
            export.text,
            cancelled.text,
            submitted.stdout,
            again.stderr,
            unauthorised.stderr,
            service.request("GET", "/api/studies").text,
        ]
        assert optuna.load_study(study_name="e2e", storage=url).user_attrs["cancelled"] is True
        time.sleep(0.2)
    assert process.returncode == 0, "".join(log)
    assert "stopped" in "".join(log)
    _assert_no_secret("".join(log), *answers)


@pytest.mark.postgres
@pytest.mark.slow
def test_over_postgresql_the_password_never_leaves_and_a_lost_storage_is_a_503(tmp_path: Path) -> None:
    from tuner.testing.postgres import PostgresNotInstalled, postgres_bindir, running_postgres

    try:
        postgres_bindir()
    except PostgresNotInstalled as error:
        pytest.skip(str(error))
    answers: list[str] = []
    with running_postgres(tmp_path / "pg") as cluster:
        url = cluster.create_database("serve_test")
        # the service waits out a lost storage for TUNER_STORAGE_OUTAGE_S before its 503: 5 s here, where the
        # default 120 s raced the client's own 120 s timeout
        with serve_process(
            "--storage",
            url,
            "--home",
            str(tmp_path / "home"),
            cwd=tmp_path,
            TUNER_TOKEN=TOKEN,
            TUNER_STORAGE_OUTAGE_S="5",
        ) as (process, base, log):
            service = Service(base, TOKEN, url)
            created = service.submit("pg")
            assert created.status == 201, created
            nothing = service.request("GET", "/api/studies/pg/export")
            assert nothing.status == 409
            bad = service.submit("pg")
            assert bad.status == 409
            cluster.stop()
            down = service.request("GET", "/api/studies/pg")
            assert down.status == 503, down
            assert "postgresql+psycopg://tuner:***@127.0.0.1" in down.json()["detail"]
            assert service.request("GET", "/api/studies").status == 503
            assert service.request("GET", "/healthz").status == 200
            answers += [created.text, nothing.text, bad.text, down.text]
    assert process.returncode == 0, "".join(log)
    assert "storage error" in "".join(log), "the lost storage is logged (redacted)"
    for text in ["".join(log), *answers]:
        assert cluster.password not in text and TOKEN not in text, text[:3000]
