"""A frozen candidate setting and its canonical key.

Two candidates with the same key are the same setting: the study measures a
key once and copies the result to later trials that propose it again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def canonical_key(params: Mapping[str, Any]) -> str:
    """A stable text key: sorted names, floats as their shortest repr, JSON-encoded."""
    normalised = {name: _normalise(value) for name, value in sorted(params.items())}
    text = json.dumps(normalised, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _normalise(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    if isinstance(value, float):
        return repr(value)
    return value


@dataclass(frozen=True)
class Candidate:
    """Sampled parameters (``params``), derived values (``derived``) and ``key``.

    ``settings`` is what a workload receives: params and derived values together.
    """

    params: Mapping[str, Any]
    derived: Mapping[str, Any]
    key: str = field(default="")

    @staticmethod
    def create(params: Mapping[str, Any], derived: Mapping[str, Any]) -> Candidate:
        return Candidate(
            params=MappingProxyType(dict(params)),
            derived=MappingProxyType(dict(derived)),
            key=canonical_key(params),
        )

    @property
    def settings(self) -> dict[str, Any]:
        return {**self.params, **self.derived}
