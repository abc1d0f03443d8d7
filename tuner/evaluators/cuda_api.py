"""The CUDA API this process uses, if any: torch's, or a simulated device a test installed.

Everything in the worker that must synchronise, reset or read device memory goes
through :func:`active_cuda` instead of reaching for ``torch.cuda`` itself, so the
same code runs against a real GPU and, in CPU tests, against
:class:`tuner.testing.simulated_cuda.SimulatedCudaDevice` (a simulated
asynchronous device with a caching allocator; never a GPU).

:func:`active_cuda` never imports torch and never initialises CUDA: it returns
``torch.cuda`` only when the workload already imported torch *and* CUDA is
initialised in this process (``torch.cuda.is_initialized()``), else ``None``.
A device installed with :func:`install_simulated` wins over torch.

The interface used (a subset of ``torch.cuda``; :class:`CudaApi`): ``synchronize()``, ``is_initialized()``,
``device_count()``, ``reset_peak_memory_stats(device)``, ``max_memory_allocated(device)``,
``max_memory_reserved(device)``, ``memory_reserved(device)``, ``empty_cache()``. Bytes
throughout.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol


class CudaApi(Protocol):
    """The part of ``torch.cuda`` the tuner's measurement calls (bytes; device = ordinal)."""

    def synchronize(self) -> None: ...
    def is_initialized(self) -> bool: ...
    def device_count(self) -> int: ...
    def reset_peak_memory_stats(self, device: int) -> None: ...
    def max_memory_allocated(self, device: int) -> int: ...
    def max_memory_reserved(self, device: int) -> int: ...
    def memory_reserved(self, device: int) -> int: ...
    def empty_cache(self) -> None: ...


_installed: Any = None


def install_simulated(device: Any) -> None:
    """Make ``device`` (a simulated device, test support) this process's CUDA API until
    :func:`uninstall_simulated`. Only tests and their workloads call this."""
    global _installed
    _installed = device


def uninstall_simulated() -> None:
    """Undo :func:`install_simulated`."""
    global _installed
    _installed = None


def torch_cuda_in_use() -> Any:
    """``torch.cuda`` when torch is imported and CUDA initialised in this process, else None.
    Never imports torch, never initialises CUDA; a broken torch counts as not in use."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = torch.cuda
        if cuda.is_initialized():
            return cuda
    except Exception:  # noqa: BLE001 - a half-imported or broken torch must not break measuring
        return None
    return None


def active_cuda() -> CudaApi | None:
    """The installed simulated device, else :func:`torch_cuda_in_use`, else None."""
    if _installed is not None:
        return _installed  # type: ignore[no-any-return]
    return torch_cuda_in_use()  # type: ignore[no-any-return]


def cuda_initialised_here() -> bool:
    """True when this process has initialised CUDA (torch's, or a simulated device that was used):
    a process that has must not ``fork`` children that use CUDA."""
    cuda = active_cuda()
    try:
        return cuda is not None and bool(cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a broken torch cannot have initialised CUDA usefully
        return False


def release_cached_memory() -> str | None:
    """Return the allocator's cached, unused blocks to the driver (``empty_cache`` after a
    ``synchronize``), so the next measurement window's reserved and NVML peaks start from what
    is really held. None when done or nothing to do (no CUDA in use); else why it failed."""
    cuda = active_cuda()
    if cuda is None:
        return None
    try:
        cuda.synchronize()
        cuda.empty_cache()
    except Exception as error:  # noqa: BLE001 - reported with the trial's memory figures
        return f"could not release cached device memory: {type(error).__name__}: {error}"
    return None
