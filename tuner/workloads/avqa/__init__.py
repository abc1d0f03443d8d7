"""Built-in audio-visual QA workload: a tiny trained model (see :mod:`.workload`).

``AVQAWorkload`` is imported lazily, so ``python -m tuner.workloads.avqa.data``
(and ``.train``, ``.card``) run without importing their own module twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.workloads.avqa.workload import AVQAWorkload

__all__ = ["AVQAWorkload"]


def __getattr__(name: str) -> Any:
    if name == "AVQAWorkload":
        from tuner.workloads.avqa.workload import AVQAWorkload

        return AVQAWorkload
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
