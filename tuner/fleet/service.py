"""``tuner serve``: the HTTP API over the study storage (FastAPI), and running it under uvicorn.

Routes (every one but ``/healthz`` needs ``Authorization: Bearer <token>``, see
:mod:`tuner.fleet.auth`; every error answer is ``{"detail": "<one line>"}``):

==========================================  =====================================================
``GET  /healthz``                           200 ``{"status": "ok"}`` (no token, no storage access)
``GET  /openapi.json``                      200 the OpenAPI schema
``POST /api/studies``                       201 summary; 400 bad spec / name / GPU type, 403 a code
                                            workload without ``--allow-command-workloads``, 409
                                            name taken, 413 body over 2 MiB, 422 bad field
``GET  /api/studies``                       200 every study (with the device-hours it used)
``GET  /api/studies/{name}``                200 summary (:mod:`tuner.fleet.study_views`; its
                                            ``cost``: device-hours used / wasted / avoided); 400
                                            bad name, 404 no such study
``GET  /api/studies/{name}/trials``         200 a page of trials (``offset``, ``limit`` <= 500;
                                            each with its ``device_s``)
``POST /api/studies/{name}/cancel``         200 summary; sets the study attribute ``cancelled``:
                                            workers finish the trial in flight, then stop
``GET  /api/studies/{name}/export``         200 the ``tuner.config/v1`` YAML (``application/yaml``)
                                            for ``profile`` or ``policy`` (default: the spec's
                                            export rule, else the knee); 400 bad
                                            policy, 409 nothing feasible
                                            (or not a tuner study)
==========================================  =====================================================

401 (with ``WWW-Authenticate: Bearer``) answers a missing or wrong token and 503 a storage
that cannot be reached. Bad input never gets a 5xx: an unexpected exception is logged as
one redacted line and answered 500 ``internal error`` (a bug to fix; the fuzz test looks
for them). The storage URL appears only redacted (:func:`tuner.secrets.redact_url`), in
answers, logs and exports alike; the token nowhere.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Literal

from tuner.errors import StudyError
from tuner.fleet.api_models import (
    ERROR_RESPONSES,
    PAGE_LIMIT_MAX,
    ErrorBody,
    Health,
    StudyList,
    StudySummary,
    SubmitRequest,
    TrialPage,
)
from tuner.fleet.auth import bearer_guard
from tuner.fleet.study_views import study_list, study_summary, trial_page
from tuner.fleet.submission import Refused, exists, submit
from tuner.secrets import redact_text, redact_url
from tuner.storage.opening import check_study_name, open_storage

if TYPE_CHECKING:
    import optuna
    from fastapi import APIRouter, FastAPI

MAX_BODY_BYTES = 2 << 20
"""Largest request body accepted (2 MiB: a spec is at most 1 MiB, JSON-escaped)."""
POLICY_MAX_CHARS = 500
LOG = logging.getLogger("tuner.serve")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def one_line(text: str) -> str:
    """``text`` redacted (:func:`tuner.secrets.redact_text`) on one line, at most 2,000 characters."""
    return redact_text(" ".join(text.split()))[:2000]


async def _send_error(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """ASGI middleware: bodies over ``max_body_bytes`` get 413 before the app sees them, and an
    unexpected exception becomes one redacted log line and a 500 ``internal error`` answer
    (never a traceback in the log, where a driver's message could carry a URL)."""

    def __init__(self, app: Callable[[Message, Receive, Send], Awaitable[None]], max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            await _send_error(
                send,
                413 if declared.isdigit() else 400,
                f"request body over {self.max_body_bytes:,} bytes"
                if declared.isdigit()
                else "bad Content-Length header",
            )
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await _send_error(send, 413, f"request body over {self.max_body_bytes:,} bytes")
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, replay, watched_send)
        except Exception as error:  # noqa: BLE001 - a bug: one line in the log, 500 to the client
            LOG.error(
                one_line(f"{scope.get('method')} {scope.get('path')}: internal error: {type(error).__name__}: {error}")
            )
            if not started:
                await _send_error(send, 500, f"internal error ({type(error).__name__}); see the service log")


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("tuner")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def create_app(
    storage_url: str, token: str | None, allow_command_workloads: bool = False, max_body_bytes: int = MAX_BODY_BYTES
) -> FastAPI:
    """The FastAPI app serving the studies of ``storage_url`` (opened now: StudyError when it cannot be).

    ``token``: the bearer token every route but ``/healthz`` requires (None: no check, for
    ``--insecure-localhost``). ``allow_command_workloads``: accept specs whose workload runs
    code they name (``command`` and ``python`` blocks).
    """
    from fastapi import Depends, FastAPI
    from fastapi.responses import JSONResponse

    storage = open_storage(storage_url)
    guard = bearer_guard(token)
    shown_storage = redact_url(storage_url)
    app = FastAPI(
        title="tuner",
        version=_version(),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        description=f"Studies of the tuner storage {shown_storage}: submit, list, cancel, export.",
    )
    app.include_router(_studies_router(storage, storage_url, guard, allow_command_workloads))

    @app.get("/healthz", response_model=Health)
    def healthz() -> Health:
        """Liveness: the service answers (no token needed; the storage is not touched)."""
        return Health(status="ok")

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(guard)], response_model=None)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    _add_error_handlers(app, shown_storage)
    app.add_middleware(RequestGuard, max_body_bytes=max_body_bytes)
    return app


CREATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorBody, "description": "A command or python workload, not allowed here."},
    409: {"model": ErrorBody, "description": "A study of that name exists."},
}
EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/yaml": {"schema": {"type": "string"}}}, "description": "The tuner.config/v1 YAML."},
    409: {"model": ErrorBody, "description": "No feasible measured trial to export."},
}


def _study_loader(storage: Any) -> Callable[[str], Any]:
    """``load(name)``: the stored study of that name, or an HTTP 400 (not a study name) / 404 (no such study)."""
    import optuna
    from fastapi import HTTPException

    def load(name: str) -> optuna.Study:
        try:
            check_study_name(name)
        except StudyError as error:
            raise HTTPException(400, str(error)) from None
        if not exists(storage, name):
            raise HTTPException(404, f"no study '{name}'")
        return optuna.load_study(study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler())

    return load


def _studies_router(
    storage: Any, storage_url: str, guard: Callable[..., Any], allow_command_workloads: bool
) -> APIRouter:
    """The ``/api`` routes of :func:`create_app` (every one behind ``guard``, the bearer check)."""
    from fastapi import APIRouter, Body, Depends, HTTPException, Query
    from fastapi.responses import Response

    load = _study_loader(storage)
    api = APIRouter(prefix="/api", dependencies=[Depends(guard)], responses=ERROR_RESPONSES)

    @api.post("/studies", status_code=201, response_model=StudySummary, responses=CREATE_RESPONSES)
    def create(request: SubmitRequest = Body(...)) -> StudySummary:
        """Create a study from a spec; workers on hosts of its GPU type pick it up."""
        try:
            study = submit(request, storage_url, storage, allow_command_workloads)
        except Refused as refused:
            raise HTTPException(refused.status, one_line(refused.detail)) from None
        LOG.info(f"created study {study.study_name}")
        return study_summary(study)

    @api.get("/studies", response_model=StudyList)
    def list_all() -> StudyList:
        """Every study in the storage."""
        return study_list(storage)

    @api.get("/studies/{name}", response_model=StudySummary)
    def summary(name: str) -> StudySummary:
        """Counts by outcome, budget left, workers seen, cancelled, the Pareto front."""
        return study_summary(load(name))

    @api.get("/studies/{name}/trials", response_model=TrialPage)
    def trials(
        name: str, offset: int = Query(0, ge=0, le=10_000_000), limit: int = Query(100, ge=1, le=PAGE_LIMIT_MAX)
    ) -> TrialPage:
        """A page of the study's trials by number."""
        return trial_page(load(name), offset, limit)

    @api.post("/studies/{name}/cancel", response_model=StudySummary)
    def cancel(name: str) -> StudySummary:
        """Mark the study cancelled: workers finish the trial in flight, then stop proposing."""
        import time

        from tuner.storage.store import cancel_study

        study = load(name)
        cancel_study(study, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        LOG.info(f"cancelled study {name}")
        return study_summary(study)

    @api.get("/studies/{name}/export", response_class=Response, response_model=None, responses=EXPORT_RESPONSES)
    def export(
        name: str,
        profile: Literal["fast", "balanced", "quality"] | None = None,
        policy: str | None = Query(
            None,
            max_length=POLICY_MAX_CHARS,
            description="e.g. 'minimize latency_p50_s subject to psnr_db >= 30', 'knee'.",
        ),
    ) -> Response:
        """The chosen trial as a tuner.config/v1 YAML (what 'tuner export' writes); 409 when the study has
        no feasible measured trial or was not created by tuner."""
        return _export(load(name), storage_url, profile, policy)

    return api


def _add_error_handlers(app: FastAPI, shown_storage: str) -> None:
    """422 with one line for a request that does not validate; 503 (and one log line) for a storage
    that cannot be used now."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import SQLAlchemyError

    async def refused_input(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse({"detail": _validation_line(error)}, status_code=422)

    async def storage_down(request: Request, error: Exception) -> JSONResponse:
        LOG.error(one_line(f"{request.method} {request.url.path}: storage error: {type(error).__name__}: {error}"))
        return JSONResponse(
            {"detail": f"the storage {shown_storage} cannot be used now ({type(error).__name__})"}, status_code=503
        )

    app.add_exception_handler(RequestValidationError, refused_input)
    for kind in (StudyError, StorageInternalError, SQLAlchemyError):
        app.add_exception_handler(kind, storage_down)


def _validation_line(error: Exception) -> str:
    """A request validation error as one line: ``where: problem`` for the first few problems."""
    problems = []
    for item in list(getattr(error, "errors", lambda: [])())[:3]:
        where = ".".join(str(part) for part in item.get("loc", ()))
        problems.append(f"{where}: {item.get('msg', 'invalid')}")
    return redact_text("; ".join(" ".join(p.split()) for p in problems) or "invalid request")


def _export(study: optuna.Study, storage_url: str, profile: str | None, policy: str | None) -> Any:
    """The export answer (see :func:`create_app`)."""
    import yaml
    from fastapi import HTTPException
    from fastapi.responses import Response

    from tuner.ship.export import ExportError, build_config, choose
    from tuner.storage.records import StudyRecord, TrialRecord, record_feasible

    if profile is not None and policy is not None:
        raise HTTPException(400, "give profile or policy, not both")
    if not StudyRecord.of(study).tuner_study:
        raise HTTPException(
            409, f"study '{study.study_name}' was not created by tuner (no spec stored with it): nothing to export"
        )
    try:
        chosen = choose(study, policy=policy, profile=profile)
        document = build_config(
            study,
            chosen.record,
            storage_url,
            chosen.policy,
            chosen.profile,
            replaced_noisy=chosen.replaced.number if chosen.replaced else None,
            rule=chosen.rule,
        )
    except ExportError as error:
        feasible = any(record_feasible(TrialRecord.from_trial(t)) for t in study.get_trials(deepcopy=False))
        raise HTTPException(400 if feasible else 409, one_line(str(error))) from None
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    filename = f"{study.study_name}-{profile or 'best'}.yaml"
    return Response(
        text, media_type="application/yaml", headers={"Content-Disposition": f'attachment; filename="{filename}"'}
    )


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free one) and listening; OSError when it cannot be."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def service_url(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a listening socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_server(app: FastAPI, sock: socket.socket, log_level: str = "warning") -> None:
    """Serve ``app`` on the listening ``sock`` until SIGINT / SIGTERM (then finish the requests in flight
    and return; uvicorn re-raises the signal afterwards, so the caller's handlers decide the exit)."""
    import uvicorn

    config = uvicorn.Config(
        app, log_level=log_level, access_log=False, server_header=False, timeout_graceful_shutdown=10, lifespan="off"
    )
    uvicorn.Server(config).run(sockets=[sock])
