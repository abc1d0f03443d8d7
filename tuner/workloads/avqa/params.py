"""Parsing of parameter and input values; every failure is an :class:`InvalidSetting`."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np

from tuner.workloads.base import InvalidSetting


def as_integer(value: Any, name: str, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (integral floats accepted; bools refused)."""
    if isinstance(value, (bool, np.bool_)):
        raise InvalidSetting(f"{name} must be an integer, got {value!r}")
    if isinstance(value, Integral):
        number = int(value)
    elif isinstance(value, Real) and float(value).is_integer():
        number = int(float(value))
    else:
        raise InvalidSetting(f"{name} must be an integer, got {value!r}")
    if number < minimum:
        raise InvalidSetting(f"{name}={number} is below {minimum}")
    return number


def as_positive_real(value: Any, name: str) -> float:
    """``value`` as a finite float > 0 (bools refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real) or not 0 < float(value) < float("inf"):
        raise InvalidSetting(f"{name} must be a positive number, got {value!r}")
    return float(value)


def as_bool(value: Any, name: str) -> bool:
    """``value`` as a bool (only real booleans accepted: "yes" or 1 are refused)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidSetting(f"{name} must be a bool, got {value!r}")
    return bool(value)
