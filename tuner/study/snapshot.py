"""What a coordinator knows of its study's trials, kept up to date at a cost that does not grow with the study.

A finished trial never changes (Optuna refuses writes to it), so :class:`StudySnapshot`
looks at each finished trial once — when it is first seen finished — and keeps what the
coordinator derives from it: how many trials are measured (the budget), the measured
trial of each candidate key (copies), the device-seconds the study's runs held and their
median (the device budget), the values of the OK measurements (the placeholder values
of a wall), the reference trials, the first measured trials (the same-failure stop), and
the Pareto front (the listeners' front size, the summary).

:meth:`StudySnapshot.refresh` is one read of the study through Optuna's trial cache
(``_CachedStorage`` over an RDB storage): the database returns only the trials not yet
finished when last read (RUNNING, WAITING: other hosts' and this one's) and the trials
created since; finished trials come from the cache. The snapshot then looks only at
those, the *changed* trials: O(changed) work per refresh, plus Optuna's own sort of the
cached list (a C-level pass over already-sorted trials). Nothing of a refresh re-reads a
finished trial's attributes, bulky or not (environment, provenance, log tail, worker
info): each is read once per coordinator, when its trial finishes.

Aggregates come out the same as a scan of the whole list in trial-number order (ties
between trials of the same key go to the higher number, as a dict built in order would).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tuner.pareto import dominates, is_measured_feasible
from tuner.results import Outcome
from tuner.search.guards import SAME_FAILURE_STOP, successful_reference
from tuner.storage import attributes as names
from tuner.storage.cost import device_s_of

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


class StudySnapshot:
    """The trials of ``study`` as of the last :meth:`refresh`, and facts derived from the finished ones.

    ``directions`` are the objectives' directions (``minimize`` / ``maximize``), for the front.
    Only the coordinator's thread uses it. See the module docstring for the cost of a refresh.
    """

    def __init__(self, study: optuna.Study | None, directions: Sequence[str] = ()) -> None:
        self._study = study
        self._directions = list(directions)
        self.trials: list[FrozenTrial] = []  # every trial, by number, as last read (not copied)
        self.unfinished: list[FrozenTrial] = []  # RUNNING and WAITING trials, by number
        self.finished_log: list[FrozenTrial] = []  # finished trials in the order they were first seen
        self._finished: set[int] = set()  # their numbers
        self.measured = 0  # finished trials that ran a workload (every host): what the budget counts
        self.measured_by_key: dict[str, FrozenTrial] = {}  # measured with values, by candidate key
        self.finished_by_key: dict[str, FrozenTrial] = {}  # measured, values or not, by candidate key
        self.measured_values: list[list[float]] = []  # values of OK, real (not placeholder) measurements
        self.references: list[FrozenTrial] = []  # finished reference trials, by number
        self.spent_device_s = 0.0  # device-seconds held by the finished trials' runs (tuner.storage.cost)
        self._costs: list[float] = []  # those device-seconds, sorted (for the median)
        self._first_measured: list[FrozenTrial] = []  # the lowest-numbered measured trials (SAME_FAILURE_STOP)
        self._measured_ok: FrozenTrial | None = None  # a measured OK trial, once there is one
        self._front: list[FrozenTrial] = []  # feasible measured trials no other dominates, by number

    @staticmethod
    def of_trials(trials: Sequence[FrozenTrial], directions: Sequence[str] = ()) -> StudySnapshot:
        """A snapshot of ``trials`` (a whole study's, by number), read elsewhere; it cannot :meth:`refresh`."""
        snapshot = StudySnapshot(None, directions)
        snapshot.take(list(trials))
        return snapshot

    # ------------------------------------------------------------------ reading
    def refresh(self) -> list[FrozenTrial]:
        """Read the study's changed trials (one read through Optuna's cache); those newly finished, by number."""
        assert self._study is not None, "a snapshot of a trial list cannot refresh"
        return self.take(self._study.get_trials(deepcopy=False))

    def take(self, trials: list[FrozenTrial]) -> list[FrozenTrial]:
        """Take in ``trials``, the study's every trial by number (what a refresh read); those newly finished."""
        seen = len(self.trials)
        if _numbered_by_index(trials) and _numbered_by_index(self.trials) and len(trials) >= seen:
            changed = [trials[n] for n in sorted(t.number for t in self.unfinished)] + trials[seen:]
        else:  # numbers with a gap (never in Optuna's own numbering): look at every trial once more
            changed = [t for t in trials if t.number not in self._finished]
        self.trials = trials
        self.unfinished = [t for t in changed if not t.state.is_finished()]
        newly = [t for t in changed if t.state.is_finished() and t.number not in self._finished]
        for trial in newly:
            self._absorb(trial)
        return newly

    def add_finished(self, trial: FrozenTrial) -> None:
        """Take in ``trial`` (finished: e.g. what ``study.tell`` returned) before a refresh reads it."""
        if trial.state.is_finished() and trial.number not in self._finished:
            self.unfinished = [t for t in self.unfinished if t.number != trial.number]
            self._absorb(trial)

    # ------------------------------------------------------------------ derived facts
    @property
    def median_run_device_s(self) -> float | None:
        """The median device-seconds of the finished trials' runs (None: no run recorded yet)."""
        costs, middle = self._costs, len(self._costs) // 2
        if not costs:
            return None
        return costs[middle] if len(costs) % 2 else (costs[middle - 1] + costs[middle]) / 2

    def waiting(self) -> bool:
        """Whether a setting waits in the study's queue (an enqueued trial not asked yet), as last read."""
        from optuna.trial import TrialState

        return any(trial.state == TrialState.WAITING for trial in self.unfinished)

    @property
    def successful_reference(self) -> FrozenTrial | None:
        """The first reference that ran OK with real values (:func:`tuner.search.guards.successful_reference`)."""
        return successful_reference(self.references)

    def same_failure_evidence(self) -> list[FrozenTrial]:
        """What :func:`tuner.search.guards.same_failure_stop` needs: the first measured trials (by number) and
        one OK measured trial when there is one — its verdict on these is its verdict on the whole study."""
        return self._first_measured + ([self._measured_ok] if self._measured_ok is not None else [])

    def front(self) -> list[FrozenTrial]:
        """The feasible, measured trials on the Pareto front, by number (:func:`tuner.pareto.front_trials`)."""
        return list(self._front)

    # ------------------------------------------------------------------ taking a trial in
    def _absorb(self, trial: FrozenTrial) -> None:
        """Take in one finished trial: each trial once (see the class docstring)."""
        self._finished.add(trial.number)
        self.finished_log.append(trial)
        cost = device_s_of(names.cost_of(trial))
        if cost is not None:
            self.spent_device_s += cost
            bisect.insort(self._costs, cost)
        if names.role_of(trial) == names.REFERENCE:
            bisect.insort(self.references, trial, key=_number)
        if is_measured_feasible(trial):  # measured by another tool counts too, as in tuner.pareto.front_trials
            self._add_to_front(trial)
        if not names.is_measured(trial):
            return
        self.measured += 1
        self._absorb_measured(trial)

    def _absorb_measured(self, trial: FrozenTrial) -> None:
        key = names.candidate_key_of(trial)
        if key is not None:
            _keep_latest(self.finished_by_key, key, trial)
            if trial.values is not None:
                _keep_latest(self.measured_by_key, key, trial)
        ok = names.outcome_of(trial) == Outcome.OK.value
        if ok and trial.values is not None and not names.is_placeholder(trial):
            self.measured_values.append(list(trial.values))
        if ok and self._measured_ok is None:
            self._measured_ok = trial
        bisect.insort(self._first_measured, trial, key=_number)
        del self._first_measured[SAME_FAILURE_STOP:]

    def _add_to_front(self, trial: FrozenTrial) -> None:
        """The front of the trials so far plus ``trial``: dominance is a strict partial order, so a trial
        off the front is dominated by one on it, and the front of the front plus ``trial`` is the whole's."""
        values = tuple(trial.values)
        if any(dominates(tuple(t.values), values, self._directions) for t in self._front):
            return
        self._front = [t for t in self._front if not dominates(values, tuple(t.values), self._directions)]
        bisect.insort(self._front, trial, key=_number)


def _numbered_by_index(trials: Sequence[FrozenTrial]) -> bool:
    """Whether ``trials[i].number == i`` throughout (Optuna numbers a study's trials 0, 1, 2 ... in order)."""
    return not trials or trials[-1].number == len(trials) - 1


def _number(trial: FrozenTrial) -> int:
    return trial.number


def _keep_latest(by_key: dict[str, FrozenTrial], key: str, trial: FrozenTrial) -> None:
    """``by_key[key] = trial`` unless a higher-numbered trial holds it (a scan in number order keeps the last)."""
    held = by_key.get(key)
    if held is None or held.number < trial.number:
        by_key[key] = trial
