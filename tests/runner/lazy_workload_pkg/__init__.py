"""A package that imports its workload class lazily, as ``tuner.workloads.avqa`` does (tests only)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "LazyWorkload":
        from tests.runner.lazy_workload_pkg.heavy import LazyWorkload

        return LazyWorkload
    raise AttributeError(name)
