"""Hooks for the whole suite.

Under ``TUNER_REQUIRE_COMPONENTS=1`` (what ``.ci/run`` sets) a skip is allowed only for the reasons
``tuner.testing.components.ALLOWED_SKIPS`` lists (CUDA / GPU / NVML, the host filesystem's chattr):
any other skipped test is reported as FAILED with its reason, and a module skipped at collection
(``pytest.importorskip`` at module level) is named in a "required components" section and fails the
run, so a component the suite tests for real cannot go missing quietly. Without the variable, skips
stay skips (``.venv/bin/python -m pytest -q`` on a developer's machine). The same holds under
pytest-xdist (``-n 2 --dist loadfile``, how ``.ci/run`` runs the suite): a worker's skipped test is reported
failed before it reaches the controller, and the controller hears the workers' skipped collections.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from tuner.testing.components import REQUIRE_ENV, skip_allowed

_refused_collection_skips: list[str] = []


def _required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason.removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report: pytest.TestReport = yield
    if _required() and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if not skip_allowed(reason):
            report.outcome = "failed"
            report.longrepr = (
                f"skipped, but {REQUIRE_ENV} allows skips only for CUDA/GPU/NVML "
                f"(tuner/testing/components.py): {reason}"
            )
    return report


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Called where the run is summed up: in a plain run, and in pytest-xdist's controller, which hears its
    workers' failed and skipped collection reports (the workers' own lists are never summed up)."""
    if _required() and report.skipped:
        reason = _skip_reason(report)
        entry = f"{report.nodeid}: {reason}"
        if not skip_allowed(reason) and entry not in _refused_collection_skips:
            # kept a skip here (a failed collection would stop the whole run), failed at the end
            _refused_collection_skips.append(entry)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _refused_collection_skips:
        terminalreporter.section(f"skipped, but {REQUIRE_ENV} allows skips only for CUDA/GPU/NVML", red=True)
        for line in _refused_collection_skips:
            terminalreporter.line(f"FAILED {line}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _refused_collection_skips and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Test files holding a ``slow`` test first, each file's tests kept together and in order (a stable sort):
    under pytest-xdist's ``--dist loadfile`` (``.ci/run``) the longest files start at once on the two workers
    instead of ending the run alone. Only the order changes; every test runs as before."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)
