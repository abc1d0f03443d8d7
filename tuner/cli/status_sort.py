"""A study's trials as ``tuner status`` lists them (:class:`StatusTrial`) and their order by ``--sort COLUMN``:
best first where the column has a direction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.storage.records import TrialRecord

if TYPE_CHECKING:
    from tuner.study.studies import OpenStudy

PLAIN_COLUMNS = ("number", "outcome", "role", "front", "dev-s")  # sort columns besides objectives, metrics, params


@dataclass(frozen=True)
class StatusTrial:
    """One stored trial as status sees it: its record, whether it is on the front, where it ran."""

    record: TrialRecord
    on_front: bool
    where: str


def shown_values(record: TrialRecord, names: Sequence[str]) -> dict[str, float | None]:
    """The objective values a view shows: None for a placeholder (an OOM's worst-case stand-in) or none stored."""
    if record.values is None or record.placeholder:
        return dict.fromkeys(names)
    return dict(zip(names, (float(v) for v in record.values)))


def sort_trials(trials: Sequence[StatusTrial], column: str, opened: OpenStudy) -> list[StatusTrial]:
    """``trials`` ordered by ``column``: ``number``, ``outcome``, ``role``, ``front``, ``dev-s`` (device-seconds),
    an objective, any stored metric or a parameter (``param.<name>`` when a metric has the same name).

    Objectives and metrics sort best first by their direction (a minimised one ascending),
    everything else ascending; a leading ``-`` reverses. Trials without a value come last.
    Raises ``ValueError`` for a column no trial has.
    """
    reverse = column.startswith("-")
    name = column.lstrip("-")
    names = opened.spec.objective_names
    directions: dict[str, str] = {o.metric: o.direction for o in opened.spec.objectives}
    for trial in trials:
        for metric, stored in trial.record.metrics.items():
            directions.setdefault(metric, str(stored.get("direction") or "minimize"))
    params = {key for t in trials for key in t.record.params}
    key: Callable[[StatusTrial], Any]
    if name in ("number", "#", "trial"):
        key = lambda t: t.record.number  # noqa: E731 - one-line keys, chosen by column
    elif name in ("outcome", "role"):
        key = lambda t: getattr(t.record, name)  # noqa: E731
    elif name == "front":
        key = lambda t: 0 if t.on_front else 1  # noqa: E731
    elif name in ("dev-s", "device_s"):
        key = lambda t: t.record.device_s  # noqa: E731
    elif name in names:
        index = names.index(name)
        key = lambda t: shown_values(t.record, names)[names[index]]  # noqa: E731
        reverse ^= directions[name] == "maximize"
    elif name in directions and not name.startswith("param."):
        key = lambda t: t.record.metric_value(name)  # noqa: E731
        reverse ^= directions[name] == "maximize"
    elif name.removeprefix("param.") in params:
        param = name.removeprefix("param.")
        key = lambda t: _orderable(t.record.params.get(param))  # noqa: E731
    else:
        known = [*PLAIN_COLUMNS, *names, *sorted(set(directions) - set(names)), *sorted(params)]
        raise ValueError(f"--sort: no column '{name}' (use {', '.join(known)}; '-' before one reverses)")
    keyed: list[tuple[Any, StatusTrial]] = [(key(t), t) for t in trials]
    present = sorted(((k, t) for k, t in keyed if k is not None), key=lambda pair: pair[0], reverse=reverse)
    return [t for _, t in present] + [t for k, t in keyed if k is None]


def _orderable(value: Any) -> tuple[int, Any] | None:
    """Numbers before strings, each in its own order (a categorical may mix them)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value))
    return (1, str(value))
