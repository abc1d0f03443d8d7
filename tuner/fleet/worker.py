"""Which study a ``tuner worker`` joins: the open studies of a storage that fit this host.

A study is *open* when it was created by the tuner, is not cancelled (study
attribute ``cancelled``), and its budget is not spent (measured trials below
``budget_trials``; a study without a trial budget stays open until cancelled).
It *fits* a host when its ``gpu_type`` (the GPU type it was created or submitted
for, ``cpu`` for a CPU study) is this host's. Workers take the oldest open study
first, so a fleet finishes one study before the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OpenStudyInfo:
    """An open study: its name, GPU type, device, and measured / budget counts."""

    name: str
    gpu_type: str
    device: str
    measured: int
    budget: int | None


def open_studies(url: str, gpu_type: str | None = None) -> list[OpenStudyInfo]:
    """Open studies of the storage at ``url``, oldest first; only those for ``gpu_type`` when given.

    Reads the storage only (never creates it): a missing SQLite file has no studies.
    """
    from tuner.study.storage import missing_sqlite_file, open_storage

    if missing_sqlite_file(url) is not None:
        return []
    storage = open_storage(url, create=False)
    found: list[OpenStudyInfo] = []
    for summary in storage.get_all_studies():
        attrs: dict[str, Any] = summary.user_attrs
        if not attrs.get("spec_yaml") or attrs.get("cancelled"):
            continue
        kind = str(attrs.get("gpu_type") or "cpu")
        if gpu_type is not None and kind != gpu_type:
            continue
        budget = attrs.get("budget_trials")
        trials = storage.get_all_trials(summary._study_id, deepcopy=False)
        measured = sum(1 for t in trials if t.user_attrs.get("measured"))
        if budget is not None and measured >= int(budget):
            continue
        found.append(OpenStudyInfo(summary.study_name, kind, str(attrs.get("device") or "cpu"), measured,
                                   int(budget) if budget is not None else None))
    return found
