"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gpu_visible() -> bool:
    """Whether NVML sees a GPU here (a spec with ``device: cuda`` is then valid)."""
    from tuner.gpu import list_gpus

    return bool(list_gpus())
