"""Which parameters reload a warm worker's model: a warm python workload's ``workload.python.reload_on``.

Read by the loop's load order (:mod:`tuner.study.load_order`), the predicted-gain proposer's cost of a candidate
(:mod:`tuner.search.trial_cost`) and the replay's cost model (:mod:`tuner.replay.cost_model`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.spec.models import StudySpec


def reloads_on(spec: StudySpec) -> tuple[str, ...]:
    """The parameters whose change reloads the model: a warm python workload's ``reload_on``; none otherwise."""
    work = spec.workload
    return tuple(work.python.reload_on) if work.python is not None and work.warm else ()


def reload_values(reload_on: tuple[str, ...], settings: Mapping[str, Any]) -> tuple[Any, ...]:
    """The ``reload_on`` values of ``settings`` (parameters and derived values), in order."""
    return tuple(settings.get(name) for name in reload_on)
