"""A small client of ``tuner serve`` (standard library ``urllib``), used by ``tuner submit``.

:func:`call` sends one JSON request with the bearer token and returns the decoded JSON
answer; every failure is a :class:`ServiceError` whose message is one line: the HTTP
status and the service's ``detail``, or why the service could not be reached. URLs in
messages pass through :func:`tuner.secrets.redact_url`; the token never appears.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from tuner.errors import TunerError
from tuner.fleet.auth import is_loopback
from tuner.secrets import redact_text, redact_url

TIMEOUT_S = 60.0
ANSWER_MAX_BYTES = 16 << 20


class ServiceError(TunerError, RuntimeError):
    """The service refused the request or could not be reached; ``str(error)`` is one line."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def check_server_url(server: str) -> str:
    """``server`` without a trailing ``/`` when it is an ``http(s)://host[:port]`` URL; ServiceError otherwise."""
    parts = urlsplit(server.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServiceError(f"--server {redact_url(server)}: not an http(s)://HOST:PORT address of 'tuner serve'")
    try:
        _ = parts.port  # urllib checks the port only when it is read
    except ValueError:
        raise ServiceError(f"--server {redact_url(server)}: the port is not a number from 0 to 65535") from None
    return server.strip().rstrip("/")


def call(server: str, method: str, path: str, token: str | None, body: Any = None, timeout_s: float = TIMEOUT_S) -> Any:
    """``method`` ``server + path`` with a JSON ``body``; the decoded JSON answer (ServiceError otherwise)."""
    base = check_server_url(server)
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    shown = redact_url(base)
    direct = is_loopback(urlsplit(base).hostname or "")  # never hand a local call (and its token) to a proxy
    opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if direct else []))
    try:
        with opener.open(request, timeout=timeout_s) as answer:
            raw = answer.read(ANSWER_MAX_BYTES)
    except urllib.error.HTTPError as error:
        detail = _detail(error)
        hint = " (give --token-file PATH or set TUNER_TOKEN)" if error.code == 401 else ""
        raise ServiceError(f"{shown}: {error.code} {error.reason}: {detail}{hint}", error.code) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        text = getattr(reason, "strerror", None) or str(reason)
        raise ServiceError(redact_text(f"cannot reach the tuner service at {shown}: {text}")) from None
    try:
        return json.loads(raw)
    except ValueError:
        raise ServiceError(f"{shown}: the answer is not JSON (is this 'tuner serve'?)") from None


def _detail(error: urllib.error.HTTPError) -> str:
    """The ``detail`` of an error answer, as one line (the raw text, cut, when it is not JSON)."""
    try:
        raw = error.read(64 * 1024)
        detail = json.loads(raw).get("detail")
        text = detail if isinstance(detail, str) else json.dumps(detail)
    except (ValueError, AttributeError, OSError):
        text = "(no detail)"
    return redact_text(" ".join(text.split())[:2000])
