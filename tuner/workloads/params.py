"""Parsing of workload parameters and inputs, shared by the built-in workloads.

Every failure is an :class:`InvalidSetting`. torch is imported only inside
:func:`torch_device`, so the module stays importable without it.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.workloads.base import InvalidSetting, RunContext

if TYPE_CHECKING:
    import torch


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


def torch_device(context: RunContext) -> torch.device:
    """``context.device`` as a torch device; InvalidSetting for anything but cpu / cuda."""
    import torch

    device = torch.device(context.device)
    if device.type not in ("cpu", "cuda"):
        raise InvalidSetting(f"device {context.device!r} is not 'cpu' or 'cuda'")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("context.device is 'cuda' but torch sees no CUDA device")
    return device
