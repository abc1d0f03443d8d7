"""Secrets never leak: the one place that redacts URLs and text and scrubs child environments.

Three contracts, used everywhere a URL or a driver error is shown, stored or handed on:

* :func:`redact_url` -- a URL with every secret replaced by :data:`MASK`: the
  password of its userinfo (``scheme://user:pass@host``, ``scheme://:pass@host``;
  the *last* ``@`` before the host ends the userinfo, so an ``@`` or ``/`` inside
  the password is hidden too) and the value of every query or fragment parameter
  whose name looks secret (:func:`is_secret_name`: ``password``, ``pwd``, ``token``,
  ``secret``, ``api_key``, ``key``, ... case-insensitive, percent-encoding undone).
  Everything else stays readable: scheme (``postgresql+psycopg``), user, host,
  port, database, other parameters. Never raises.
* :func:`redact_text` -- free text (a driver's error message) with every
  URL-looking substring passed through :func:`redact_url`, every ``name=value``
  pair with a secret name masked, and every *known* secret value masked: the
  values of :data:`SECRET_VARIABLES` and the passwords of the URLs in
  :data:`URL_VARIABLES` in the environment, plus those of URLs the tuner was given
  on its command line (:func:`remember_url`). Only values of at least
  :data:`MIN_SECRET_LENGTH` characters are masked, so a short password does not
  blank common words.
* :func:`child_environment` -- the environment a worker process, fork server,
  sidecar or command program gets: the parent's minus :data:`WITHHELD_VARIABLES`
  (always) and :data:`WITHHELD_WHEN_SECRET` (when the value carries a secret).
  Workers never talk to the storage or to MLflow: the coordinator does.

Ambiguity is resolved towards hiding: ``scheme://host:5000/x?mail=a@b`` reads
like SQLAlchemy reads it (user ``host``, a password up to the ``@``) and shows as
``scheme://host:***@b``. Foundation module: standard library only.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from urllib.parse import unquote

MASK = "***"
MIN_SECRET_LENGTH = 4

STORAGE_VARIABLE = "TUNER_STORAGE"
TRACKING_URI_VARIABLE = "MLFLOW_TRACKING_URI"
SECRET_VARIABLES: tuple[str, ...] = ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "PGPASSWORD", "TUNER_TOKEN")
"""Variables whose whole value is a secret (masked in text, never handed to a child)."""
URL_VARIABLES: tuple[str, ...] = (STORAGE_VARIABLE, TRACKING_URI_VARIABLE)
"""Variables holding a URL whose password and secret parameters are masked in text."""
WITHHELD_VARIABLES: tuple[str, ...] = (STORAGE_VARIABLE, *SECRET_VARIABLES)
"""Never in a child's environment: workers get what they need in their request, not the storage."""
WITHHELD_WHEN_SECRET: tuple[str, ...] = (TRACKING_URI_VARIABLE,)
"""Not in a child's environment when the value carries a secret (a password or a secret parameter)."""

_SECRET_NAMES = frozenset({"pwd", "pass", "key", "sig", "auth", "authorization"})
_SECRET_ENDINGS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    "signature",
    "credential",
    "credentials",
)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_USER_COLON = re.compile(r"[^:/?#@\[\]\s]*:")  # "user:" or ":" right after "//" (never an IPv6 "[::1]")
_PARAMETER = re.compile(r"(?<=[?&#;])([^=&#;?]+)=([^&#;]*)")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_PAIR_IN_TEXT = re.compile(r"(?<![\w.\-])([A-Za-z_][\w.\-]*)(\s*=\s*)('[^']*'|\"[^\"]*\"|[^\s&;,'\"]+)")

_remembered: set[str] = set()
_remembered_lock = threading.Lock()


def is_secret_name(name: str) -> bool:
    """Whether a parameter or variable named ``name`` holds a secret (case, ``_``/``-``/``.`` and %-encoding
    ignored): the whole name or its end reads as one (``token``, ``DB_PASSWORD``, ``apiKey``), or its last
    word is a short secret word (``DB_PASS``, ``SSH_KEY``, ``userPwd``; not ``KEYFRAMES`` or ``BYPASS``)."""
    decoded = unquote(name)
    normal = re.sub(r"[\W_]+", "", decoded).lower()
    words = re.split(r"[\W_]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", decoded).lower())
    last = next((word for word in reversed(words) if word), "")
    return normal in _SECRET_NAMES or normal.endswith(_SECRET_ENDINGS) or last in _SECRET_NAMES


def _userinfo(rest: str) -> tuple[int, int] | None:
    """(index of the colon, index of the ``@``) of ``user:password@`` at the start of ``rest``
    (the URL after ``//``); None when there is no password.

    The ``@`` is the last one before the query that follows the host: the first ``?``
    or ``#`` after the first ``@`` (an ``@``, ``/``, ``?`` inside the password stays in it).
    """
    user = _USER_COLON.match(rest)
    if user is None:
        return None
    colon = user.end() - 1
    first_at = rest.find("@", colon)
    if first_at < 0:
        return None
    query = min((i for i in (rest.find("?", first_at), rest.find("#", first_at)) if i >= 0), default=len(rest))
    return colon, rest.rfind("@", first_at, query)


def _redact_parameters(text: str) -> str:
    """``text`` with secret-named parameters after its first ``?`` or ``#`` masked."""
    start = min((i for i in (text.find("?"), text.find("#")) if i >= 0), default=-1)
    if start < 0:
        return text
    tail = _PARAMETER.sub(lambda m: f"{m.group(1)}={MASK}" if is_secret_name(m.group(1)) else m.group(0), text[start:])
    return text[:start] + tail


def redact_url(url: str) -> str:
    """``url`` with its password and secret parameters replaced by :data:`MASK` (see the module
    docstring); everything else unchanged. Never raises: garbage comes back as text, masked if need be."""
    try:
        url = url if isinstance(url, str) else str(url)
        scheme = _SCHEME.match(url)
        if scheme is None:
            return _redact_parameters(url)
        head, rest = url[: scheme.end()], url[scheme.end() :]
        found = _userinfo(rest)
        if found is not None:
            colon, at = found
            rest = f"{rest[:colon]}:{MASK}{rest[at:]}"
        return head + _redact_parameters(rest)
    except Exception:  # noqa: BLE001 - redaction must never be the thing that fails
        return MASK


def url_secrets(url: str) -> list[str]:
    """The secret values in ``url``: the password and secret parameter values, as written and
    percent-decoded (empty ones left out). Never raises."""
    try:
        scheme = _SCHEME.match(url)
        rest = url[scheme.end() :] if scheme else url
        found: list[str] = []
        userinfo = _userinfo(rest) if scheme else None
        if userinfo is not None:
            colon, at = userinfo
            found.append(rest[colon + 1 : at])
            rest = rest[at:]
        start = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=-1)
        if start >= 0:
            found += [m.group(2) for m in _PARAMETER.finditer(rest[start:]) if is_secret_name(m.group(1))]
        return [value for value in dict.fromkeys(found + [unquote(v) for v in found]) if value]
    except Exception:  # noqa: BLE001
        return []


def remember_url(url: str) -> None:
    """Mask ``url``'s secrets in every later :func:`redact_text` of this process (for a URL given
    on the command line rather than in the environment). Never raises."""
    values = url_secrets(url)
    with _remembered_lock:
        _remembered.update(values)


def known_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Secret values :func:`redact_text` masks wherever they appear: those of
    :data:`SECRET_VARIABLES`, the secrets of :data:`URL_VARIABLES`' URLs, the remembered ones;
    at least :data:`MIN_SECRET_LENGTH` characters, longest first."""
    source = os.environ if environ is None else environ
    values = [source.get(name, "") for name in SECRET_VARIABLES]
    for name in URL_VARIABLES:
        values += url_secrets(source.get(name, ""))
    with _remembered_lock:
        values += sorted(_remembered)
    return sorted({v for v in values if len(v) >= MIN_SECRET_LENGTH}, key=lambda v: (-len(v), v))


def redact_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with every URL redacted (:func:`redact_url`), every secret-named ``name=value``
    pair masked and every known secret value (:func:`known_secrets` of ``environ``, default
    ``os.environ``) replaced by :data:`MASK`. Never raises."""
    try:
        text = text if isinstance(text, str) else str(text)
        text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
        text = _PAIR_IN_TEXT.sub(
            lambda m: f"{m.group(1)}{m.group(2)}{MASK}" if is_secret_name(m.group(1)) else m.group(0), text
        )
        for value in known_secrets(environ):
            text = text.replace(value, MASK)
        return text
    except Exception:  # noqa: BLE001
        return MASK


def carries_secret(url: str) -> bool:
    """Whether :func:`redact_url` would hide something in ``url``."""
    return redact_url(url) != url


def child_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a process the tuner starts (worker, fork server, sidecar, command
    program): ``base`` (default ``os.environ``) without :data:`WITHHELD_VARIABLES`, and without
    :data:`WITHHELD_WHEN_SECRET` when their value carries a secret. A new dict; ``base`` is untouched."""
    source = os.environ if base is None else base
    return {
        name: value
        for name, value in source.items()
        if name not in WITHHELD_VARIABLES and not (name in WITHHELD_WHEN_SECRET and carries_secret(value))
    }
