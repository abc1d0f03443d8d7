"""Who may talk to ``tuner serve``: the bearer token, where it comes from, and where the service may listen.

Contracts:

* :func:`load_token` -- the token from ``--token-file PATH`` (whitespace around it
  stripped), else from ``$TUNER_TOKEN``; None when neither is given. A token shorter
  than :data:`MIN_TOKEN_LENGTH` characters, an unreadable file or an empty one is an
  :class:`AuthError` (one line that never shows the token).
* :func:`check_bind` -- refuses to start without a token unless ``--insecure-localhost``
  was given *and* the host is a loopback address (``127.0.0.0/8``, ``::1``,
  ``localhost``): an open service on a network interface is never started.
* :func:`bearer_guard` -- a FastAPI dependency that answers 401 with
  ``WWW-Authenticate: Bearer`` unless the request carries ``Authorization: Bearer
  <token>``; the comparison is :func:`hmac.compare_digest` on UTF-8 bytes (constant
  time). With no token configured (insecure localhost) every request passes.

The token is never logged, printed or put in a response.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from tuner.errors import InputError

TOKEN_ENV = "TUNER_TOKEN"
MIN_TOKEN_LENGTH = 16
TOKEN_FILE_MAX_BYTES = 4096
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
MAKE_TOKEN_HINT = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class AuthError(InputError):
    """A token that cannot be used, or a bind that would be unsafe; ``str(error)`` is one line."""


def load_token(token_file: Path | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token: ``token_file``'s stripped content, else ``$TUNER_TOKEN``; None when neither is set.

    Raises :class:`AuthError` for an unreadable, empty, oversized or too short token.
    """
    source = os.environ if environ is None else environ
    if token_file is not None:
        try:
            with open(token_file, "rb") as handle:
                raw = handle.read(TOKEN_FILE_MAX_BYTES + 1)
        except OSError as error:
            raise AuthError(f"--token-file {token_file}: cannot read it ({error.strerror or error})") from None
        if len(raw) > TOKEN_FILE_MAX_BYTES:
            raise AuthError(
                f"--token-file {token_file}: more than {TOKEN_FILE_MAX_BYTES} bytes; it must hold only the token"
            )
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise AuthError(f"--token-file {token_file}: not UTF-8 text") from None
        where = f"--token-file {token_file}"
    else:
        token = source.get(TOKEN_ENV, "").strip()
        if not token:
            return None
        where = f"${TOKEN_ENV}"
    return _checked(token, where)


def _checked(token: str, where: str) -> str:
    if not token:
        raise AuthError(f"{where}: the token is empty (make one with {MAKE_TOKEN_HINT})")
    if len(token) < MIN_TOKEN_LENGTH:
        raise AuthError(
            f"{where}: the token is shorter than {MIN_TOKEN_LENGTH} characters (make one with {MAKE_TOKEN_HINT})"
        )
    if any(c.isspace() or not c.isprintable() for c in token):
        raise AuthError(f"{where}: the token holds whitespace or control characters")
    return token


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine: ``localhost`` or a loopback address (``127.0.0.0/8``, ``::1``)."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, insecure_localhost: bool) -> None:
    """Refuse (:class:`AuthError`) a service without a token, unless insecure on a loopback host only."""
    if token is not None:
        return
    if not insecure_localhost:
        raise AuthError(
            f"no token: give --token-file PATH or set {TOKEN_ENV} (make one with {MAKE_TOKEN_HINT}); "
            "--insecure-localhost serves without one on 127.0.0.1 only"
        )
    if not is_loopback(host):
        raise AuthError(
            f"--insecure-localhost serves only on a loopback address (127.0.0.1, ::1, localhost), "
            f"not on --host {host}: give a token (--token-file or {TOKEN_ENV}) to listen there"
        )


def token_matches(expected: str, authorization: str | None) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <expected>`` (scheme case-insensitive;
    constant-time comparison of the token)."""
    if not authorization:
        return False
    scheme, _, given = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), expected.encode("utf-8"))


def bearer_guard(token: str | None) -> Callable[..., None]:
    """A FastAPI dependency enforcing ``Authorization: Bearer <token>`` (no check when ``token`` is None).

    It declares the HTTP bearer security scheme, so ``/openapi.json`` shows it.
    """
    from fastapi import Depends, HTTPException
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    scheme = HTTPBearer(auto_error=False, description="The service's token: Authorization: Bearer <token>.")

    def guard(request_credentials: HTTPAuthorizationCredentials | None = Depends(scheme)) -> None:
        if token is None:
            return
        header = (
            None if request_credentials is None else (f"{request_credentials.scheme} {request_credentials.credentials}")
        )
        if not token_matches(token, header):
            raise HTTPException(
                status_code=401, detail="missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    return guard
