"""A ``grpc://`` storage (Optuna's gRPC storage proxy) is refused in one line that says why and what to use:
the tuner's claims, device locks and heartbeats are SQL transactions on the study's database, which the
proxy does not carry (bench/fleet.py --sleep S --grpc measures the proxy with bare Optuna workers)."""

from __future__ import annotations

import pytest

from tuner.errors import StudyError


def test_a_grpc_storage_url_is_refused_in_one_line_naming_what_to_use() -> None:
    from tuner.storage.opening import open_storage

    with pytest.raises(StudyError) as raised:
        open_storage("grpc://127.0.0.1:13000")
    message = str(raised.value)
    assert "\n" not in message
    assert "grpc://127.0.0.1:13000" in message
    assert "PostgreSQL" in message and "claims" in message
    assert "NoSuchModuleError" not in message  # not SQLAlchemy's "Can't load plugin"
