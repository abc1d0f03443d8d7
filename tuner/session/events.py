"""What a session says to whoever runs it: :class:`Notice` lines and the front, through a :class:`SessionListener`.

A session never writes to a terminal. Each thing it has to say is a :class:`Notice`:
a stable ``kind`` (what renderers and tests key on) and a plain ``text`` (no markup),
optionally with one span to emphasise (a study name, "study stopped:"). Whether a
kind is a warning, and whether it belongs on the error stream rather than the report,
is fixed per kind here (:data:`WARNINGS`, :data:`DIAGNOSTICS`), so every renderer
agrees: the CLI's rich consoles (:mod:`tuner.cli.session`), plain lines
(:mod:`tuner.session.text`), or nothing (:class:`Quiet`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from tuner.front.headline import Headline
    from tuner.storage.records import TrialRecord
    from tuner.study.listeners import Listener

NoticeKind = Literal[
    # setting up a run
    "constraint_disabled",
    "host_busy",
    "mlflow_missing",
    "mlflow_unreachable",
    "mlflow_failed",
    "warm_start",
    "memory_model",
    "inputs",
    # Ctrl-C / SIGTERM while it runs
    "stopping",
    "exiting",
    # finishing it
    "mlflow_failure",
    "mlflow_incomplete",
    "study_stopped",
    "interrupted",
    "summary",
    "exported",
    "export_warning",
    "nothing_exported",
    "dashboard_stale",
    "mlflow_run",
    "storage",
    # a fleet worker between studies (:mod:`tuner.fleet.worker`)
    "worker_started",
    "worker_done",
    "worker_waiting",
    "worker_moves_on",
]

WARNINGS: frozenset[NoticeKind] = frozenset(
    {
        "constraint_disabled",
        "host_busy",
        "mlflow_missing",
        "mlflow_unreachable",
        "mlflow_failed",
        "warm_start",
        "mlflow_failure",
        "mlflow_incomplete",
        "export_warning",
        "nothing_exported",
        "dashboard_stale",
    }
)
"""Kinds that warn: the run goes on, but something the user asked for is missing or degraded."""

DIAGNOSTICS: frozenset[NoticeKind] = frozenset(
    {"stopping", "exiting", "mlflow_failure", "study_stopped", "interrupted", "worker_moves_on"}
)
"""Kinds that belong on the error stream (stderr), beside the live display; the rest are the run's report."""


@dataclass(frozen=True)
class Notice:
    """One line for the user: ``text`` is plain; ``emphasis`` is the ``[start, end)`` span of it to emphasise."""

    kind: NoticeKind
    text: str
    emphasis: tuple[int, int] | None = None

    @staticmethod
    def emphasised(kind: NoticeKind, before: str, emphasised: str, after: str) -> Notice:
        """``before + emphasised + after``, the middle part emphasised."""
        return Notice(kind, before + emphasised + after, (len(before), len(before) + len(emphasised)))

    @property
    def warning(self) -> bool:
        return self.kind in WARNINGS

    @property
    def diagnostic(self) -> bool:
        return self.kind in DIAGNOSTICS


@dataclass(frozen=True)
class FrontSummary:
    """The study's Pareto front as the closing summary shows it (built by
    :func:`tuner.session.finish.front_summary`; rendered by :mod:`tuner.session.front_lines`).

    ``front``: its trials, best first on the first objective. ``units``: objective -> unit (``s``,
    ``GB``, ``""``). ``chosen``: the trial the study's export rule picks (None when nothing can be
    chosen), ``rule``: that rule's text and where it came from (``knee (default: ...)``).
    ``baseline`` / ``reference``: the study's measured baseline and reference trials (None when the
    spec has none or they were not measured). ``speed_metric``: the metric speed-ups are taken on
    (comparator / trial, > 1 = faster; None when no objective is in seconds). ``chosen_record``: the chosen
    trial's record (it may lie off the front: a policy chooses among every feasible trial). ``headline``: what
    the chosen trial's speed-up is stated against (:mod:`tuner.front.headline`: the baseline when it meets the
    export rule, else the reference); every speed-up of the summary is taken against the same comparator.
    """

    objective_names: tuple[str, ...]
    directions: tuple[str, ...]
    units: dict[str, str]
    front: tuple[TrialRecord, ...]
    chosen: int | None = None
    rule: str | None = None
    baseline: TrialRecord | None = None
    reference: TrialRecord | None = None
    speed_metric: str | None = None
    chosen_record: TrialRecord | None = None
    headline: Headline | None = None
    extra_metrics: tuple[str, ...] = ()  # metrics shown after the objectives (``tuner front``: p95, memory ...)

    @property
    def comparator(self) -> TrialRecord | None:
        """The trial speed-ups are taken against: the headline's, else the baseline."""
        return self.headline.comparator if self.headline is not None else self.baseline

    def speedup(self, record: TrialRecord) -> float | None:
        """Comparator / ``record`` on :attr:`speed_metric` (None when either is missing or zero)."""
        comparator = self.comparator
        if self.speed_metric is None or comparator is None:
            return None
        mine, theirs = record.metric_value(self.speed_metric), comparator.metric_value(self.speed_metric)
        return theirs / mine if mine and theirs is not None and mine > 0 else None


class SessionListener(Protocol):
    """Receives what a session says. Called from the session's thread, except that ``stopping`` and
    ``exiting`` notices come from a signal handler (keep :meth:`on_notice` short and non-blocking)."""

    def trial_listeners(self) -> list[Listener]:
        """Fresh listeners for one run's coordinator (a live display); asked once per run."""
        ...

    def on_notice(self, notice: Notice) -> None:
        """One line for the user (see :class:`Notice`)."""
        ...

    def on_front(self, summary: FrontSummary) -> None:
        """The study's Pareto front once a run has ended, the chosen trial marked."""
        ...


class Quiet:
    """A :class:`SessionListener` that shows nothing (``tuner.run_study`` without ``verbose``)."""

    def trial_listeners(self) -> list[Listener]:
        return []

    def on_notice(self, notice: Notice) -> None:
        return None

    def on_front(self, summary: FrontSummary) -> None:
        return None
