"""The system components the test suite tests for real, and which of them this machine lacks.

CI (``.ci/run``) installs them, then runs ``python -m tuner.testing.components``: one line per
missing component and exit 1 (exit 0, silent, when all are there). Under
:data:`REQUIRE_ENV` (``TUNER_REQUIRE_COMPONENTS=1``) the root ``tests/conftest.py`` turns every
skip whose reason :func:`skip_allowed` does not accept into a failure, so a missing component can
never pass CI as a quiet skip: only tests that need CUDA / a GPU / NVML may skip there (plus
:data:`ALLOWED_SKIPS`' host filesystem case).

Each check finds its component the way the tests that use it do (see each one).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuner.testing.postgres import PostgresNotInstalled, postgres_bindir

REQUIRE_ENV = "TUNER_REQUIRE_COMPONENTS"

# Skip reasons CI still accepts under REQUIRE_ENV (case-insensitive regex search on the reason):
# - CUDA / GPU / NVML: the CI machine has no GPU; those tests run on a GPU host (bench/gpu_check.sh).
# - chattr: tests/search/test_guards.py makes a directory immutable with ``chattr +i``, which depends on
#   the host's filesystem (overlayfs and tmpfs lack the attribute) and on CAP_LINUX_IMMUTABLE, neither
#   of which a package install can provide; the test's other case (a file in the way) still runs.
ALLOWED_SKIPS: dict[str, str] = {
    r"\bCUDA\b": "needs a CUDA device",
    r"\bGPUs?\b": "needs a GPU (or is about a host that has one)",
    r"\bNVML\b": "needs NVML, i.e. an NVIDIA driver",
    r"\bchattr\b": "the host filesystem has no immutable attribute",
}


def skip_allowed(reason: str) -> bool:
    """Whether a skip with ``reason`` may stay a skip in CI (see :data:`ALLOWED_SKIPS`)."""
    return any(re.search(pattern, reason, re.IGNORECASE) for pattern in ALLOWED_SKIPS)


@dataclass(frozen=True)
class Component:
    """A system component some tests use for real: ``check`` returns why it is missing, or None."""

    name: str
    needed_by: str  # the tests that need it
    install: str  # what to do about it
    check: Callable[[], str | None]

    def line(self, problem: str) -> str:
        return f"missing: {self.name} ({self.needed_by}): {problem}; {self.install}"


def _chromium() -> str | None:
    # as tests/tracking/test_browser.py finds them
    absent = [
        name
        for name, found in (
            ("chromium", shutil.which("chromium") or shutil.which("chromium-browser")),
            ("chromedriver", shutil.which("chromedriver")),
        )
        if found is None
    ]
    return f"no {' and no '.join(absent)} on PATH" if absent else None


def _espeak() -> str | None:
    # as tests/evaluators/test_lipsync.py finds it
    return None if shutil.which("espeak-ng") else "no espeak-ng on PATH"


def _postgres() -> str | None:
    # as tuner.testing.postgres.running_postgres finds and runs it
    try:
        postgres_bindir()
    except PostgresNotInstalled:
        return "no initdb/pg_ctl (pg_config --bindir, /usr/lib/postgresql/*/bin, PATH)"
    if os.geteuid() == 0:  # initdb refuses root: the cluster runs as the Debian `postgres` user
        if shutil.which("runuser") is None:
            return "running as root but no runuser on PATH"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root but there is no `postgres` user"
    return None


def _mlflow_server() -> str | None:
    # tuner.testing.mlflow_server runs `sys.executable -m mlflow server`, which serves with uvicorn
    # (found without importing mlflow, which takes seconds)
    spec = importlib.util.find_spec("mlflow")
    if spec is None or spec.origin is None:
        return f"{sys.executable} cannot import mlflow"
    if not (Path(spec.origin).parent / "server" / "__init__.py").is_file():
        return f"mlflow at {Path(spec.origin).parent} has no server module"
    if importlib.util.find_spec("uvicorn") is None:
        return f"{sys.executable} cannot import uvicorn, which `mlflow server` runs on"
    return None


COMPONENTS: tuple[Component, ...] = (
    Component(
        "chromium",
        "the MLflow UI browser test, tests/tracking/test_browser.py",
        "install the Debian packages chromium and chromium-driver",
        _chromium,
    ),
    Component(
        "espeak-ng",
        "real speech for the lip-sync tests, tests/evaluators/test_lipsync.py",
        "install the Debian package espeak-ng",
        _espeak,
    ),
    Component(
        "postgresql",
        "the PostgreSQL storage tests, tests/fleet and tests/storage/test_store_batch.py",
        "install the Debian package postgresql",
        _postgres,
    ),
    Component(
        "mlflow server",
        "the real MLflow server of tuner.testing.mlflow_server, tests/tracking and tests/fleet",
        "pip install -e '.[test]'",
        _mlflow_server,
    ),
)


def missing_components(components: tuple[Component, ...] = COMPONENTS) -> list[str]:
    """One line per component this machine lacks (``missing: NAME (NEEDED BY): WHY; WHAT TO DO``)."""
    lines = []
    for component in components:
        problem = component.check()
        if problem is not None:
            lines.append(component.line(problem))
    return lines


def main() -> int:
    lines = missing_components()
    for line in lines:
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
