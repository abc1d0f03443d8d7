"""The coordinator: the ask → run → tell loop that owns the storage.

Any number of coordinators may run one study (``tuner worker`` on every host of a
fleet, one storage). Each asks Optuna for candidates, resolves derived values
and rules (a rule-breaking candidate is recorded INVALID, never run, and told to
the sampler as an infeasible point, like OOM), claims the setting fleet-wide
(:mod:`.claims`: a setting measured anywhere is copied, one in flight elsewhere
is copied once measured), runs the rest on its runner's slots in parallel
threads and tells each result back. Only this thread talks to the storage. The
reference runs first and alone (every quality metric needs its output), then
the baseline, then the search; while either runs on another host, this one waits. A predicted
OOM (:mod:`.feasibility`) is recorded SKIPPED_PREDICTED_OOM: never run, free, a wall. Each trial records ``host``, ``worker`` and ``slot`` and beats a heartbeat while it
runs; RUNNING trials whose coordinator died are marked FAIL (``INTERRUPTED``) and
their settings enqueued again (:mod:`.heartbeats`) — a live one's never.

Budget: ``budget_trials`` counts trials that ran a workload (reference and baseline included) on
every host; trials running elsewhere hold budget, so coordinators together overshoot by at most
the slots in flight. Rule-rejected, copied and skipped trials do not count. ``wall_time_s`` limits this invocation; the study
attribute ``cancelled`` stops proposing everywhere (trials in flight finish);
100 proposals in a row that need no run end the study as exhausted. Early stops
(a failed reference, the same failure on every first run) and adaptive timeouts
are in :mod:`.guards`; such a stop, or an unwritable trial directory, sets
:attr:`Summary.failure`. :meth:`Coordinator.interrupt` (Ctrl-C) stops proposing,
gives trials in flight :data:`INTERRUPT_GRACE_S` seconds, then kills them through
``runner.close()``; they are recorded ``INTERRUPTED`` and enqueued again.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from tuner.pareto import front_trials
from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.spec.candidate import Candidate
from tuner.spec.metrics import QUALITY_METRIC_NAMES
from tuner.spec.space import resolve, suggest
from tuner.study.claims import claim_setting, claims_for
from tuner.study.feasibility import FeasibilityModel, Observation
from tuner.study.guards import StudyStop, measurement_settings, reference_stop, same_failure_stop, trial_timeout_s
from tuner.study.heartbeats import HOST, TAKEN_OVER, Heartbeats, reclaim_stale, taken_over, worker_id
from tuner.study.listeners import Listener, Summary
from tuner.study.objectives import ConstraintPlan, Verdict, judge, wall
from tuner.study.records import result_attributes
from tuner.study.reference import LocalReferenceStore, ReferenceHandOff, ReferenceStore
from tuner.study.shared import (EXCLUSIVE_ROLES, SharedView, enqueue_again, give_back, held_ids, queue_reference,
                                settle_copies, tell_copy, tell_unrun)
from tuner.study.studies import OpenStudy, study_directory

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

T = TypeVar("T")
EXHAUSTED_AFTER = 100
INTERRUPT_GRACE_S = 3.0
POLL_S = 1.0  # how often a coordinator waiting on other hosts looks at the storage again
RECLAIM_EVERY_S = 5.0  # how often it looks for trials whose coordinator died


@dataclass
class _InFlight:
    trial: "optuna.Trial"
    candidate: Candidate
    slot: Slot
    role: str


@dataclass
class Coordinator:
    """Runs ``opened`` until its budget is spent. See the module docstring."""

    opened: OpenStudy
    runner: Runner
    slots: list[Slot]
    home: Path
    device: str
    plan: ConstraintPlan
    budget_trials: int | None
    wall_time_s: float | None
    listeners: list[Listener] = field(default_factory=list)
    reference_store: ReferenceStore = field(default_factory=LocalReferenceStore)  # how hosts share the output
    memory_model: bool = True  # skip settings predicted to run out of memory (:mod:`.feasibility`)
    memory_prior: Sequence[Observation] = ()  # its evidence from a warm-start study on other hardware

    def __post_init__(self) -> None:
        self.study = self.opened.study
        self.spec = self.opened.spec
        self.directions = [o.direction for o in self.spec.objectives]
        self.study_dir = study_directory(self.home, self.study.study_name)
        self.quality_metrics = sorted(self.spec.used_metrics & QUALITY_METRIC_NAMES)
        self._interrupt = threading.Event()
        self._claims = claims_for(self.study)
        self._handoff = ReferenceHandOff(self.reference_store, self.study_dir / "reference_output.npz")
        self._feasibility = FeasibilityModel(self.spec, self.plan, self.memory_prior, enabled=self.memory_model)

    def interrupt(self) -> None:
        """Ask the loop to stop (signal-safe): no new trials; those in flight end within seconds."""
        self._interrupt.set()

    # ----------------------------------------------------------------- state
    def _trials(self) -> list["FrozenTrial"]:
        return self.study.get_trials(deepcopy=False)

    def _measured_count(self) -> int:
        return sum(1 for t in self._trials() if t.user_attrs.get("measured"))

    def _reference_output(self) -> str | None:
        """A verified local copy of the reference's output (fetched once from another host if need be)."""
        return self._handoff.output(self._trials(), self.study.user_attrs)

    def _reference_settings(self) -> dict[str, Any] | None:
        if self.spec.reference is None:
            return None
        candidate, _ = resolve(self.spec, self.spec.reference)
        return candidate.settings if candidate is not None else dict(self.spec.reference)

    def _measured_values(self) -> list[list[float]]:
        return [list(t.values) for t in self._trials()
                if t.values is not None and t.user_attrs.get("outcome") == Outcome.OK.value
                and not t.user_attrs.get("placeholder_values")]

    def recover_interrupted(self) -> int:
        """Fail the RUNNING trials no live coordinator runs and enqueue them again (:mod:`.heartbeats`)."""
        return reclaim_stale(self.study, lambda params, role, rerun_of: enqueue_again(self.study, params, role,
                                                                                       rerun_of))

    # ------------------------------------------------------------------ loop
    def run(self) -> Summary:
        started = time.monotonic()
        self.recover_interrupted()
        queue_reference(self.study, self.spec)
        total = self.budget_trials
        for listener in self.listeners:
            listener.on_start(self.study.study_name, self._measured_count(), total)
        self._heartbeats = Heartbeats(self.study)
        inflight: dict[Future[TrialResult], _InFlight] = {}
        waiting_duplicates: dict[str, list[tuple["optuna.Trial", Candidate]]] = {}
        free_slots = list(self.slots)
        held: tuple["optuna.Trial", Candidate, str] | None = None
        exclusive = cancelled = False
        idle_proposals = ran = 0
        stopped = "budget spent"
        failure: StudyStop | None = None
        interrupted_at: float | None = None
        last_reclaim = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="tuner-slot") as pool:
            while True:
                mine = held_ids(inflight, waiting_duplicates, held)
                trials = self._trials()
                view = SharedView.of(trials, mine, self.spec)
                self._feasibility.update(trials)  # the memory evidence of trials finished since
                settle_copies(waiting_duplicates, view, {job.candidate.key for job in inflight.values()},
                              lambda twin, cand, original: self._tell_copy(twin, cand, original, started),
                              lambda twin, cand, reason: self._give_back(twin, cand.params, "search", reason))
                if failure is None and view.failed_reference is not None and not inflight:
                    failure = reference_stop(self.study.study_name, view.failed_reference)
                cancelled = cancelled or bool(self.study.user_attrs.get("cancelled"))
                if cancelled:
                    stopped = "cancelled: trials in flight finished, no new ones"
                blocked = False
                while free_slots and not exclusive and failure is None and not self._interrupt.is_set() \
                        and not cancelled:
                    if total is not None and view.measured + len(inflight) + view.running_elsewhere >= total:
                        blocked = view.running_elsewhere > 0 and view.measured < total  # others may fail
                        break
                    if view.exclusive_elsewhere or view.reference_pending_elsewhere:
                        blocked = True  # the reference or baseline runs alone on another host
                        break
                    if self.wall_time_s is not None and time.monotonic() - started >= self.wall_time_s:
                        stopped = "wall time spent"
                        break
                    if getattr(self.study.sampler, "exhausted", False):
                        stopped = "grid exhausted: every setting was proposed"
                        break
                    if idle_proposals >= EXHAUSTED_AFTER:
                        stopped = f"search space exhausted ({EXHAUSTED_AFTER} proposals in a row needed no run)"
                        break
                    if held is None:
                        proposal = self._propose(view, waiting_duplicates, started)
                        if proposal is None:
                            idle_proposals += 1
                            continue
                        held = proposal
                    trial, candidate, role = held
                    if role in EXCLUSIVE_ROLES and (inflight or view.running_elsewhere):
                        blocked = not inflight
                        break  # run it alone once the slots drain, here and elsewhere
                    held = None
                    idle_proposals = 0
                    slot = free_slots.pop(0)
                    exclusive = role in EXCLUSIVE_ROLES
                    request = self._request(trial, candidate, role)
                    problem = _writable(Path(request.workdir))
                    if problem is not None:
                        self._give_back(trial, candidate.params, role, problem)
                        failure = StudyStop(problem)
                        free_slots.append(slot)
                        exclusive = False
                        break
                    if self._unless_taken_over(trial.number, lambda: trial.set_user_attr("slot", slot.label) or True) \
                            is None:
                        free_slots.append(slot)
                        exclusive = False
                        continue
                    future = pool.submit(self.runner.run, request, slot)
                    inflight[future] = _InFlight(trial, candidate, slot, role)
                    for listener in self.listeners:
                        listener.on_trial_start(trial.number, role, slot.label, request.timeout_s)
                stopping = failure is not None or self._interrupt.is_set() or cancelled
                if held is not None and stopping:
                    self._give_back(held[0], held[1].params, held[2], "not started: the study stopped")
                    held = None
                if stopping:
                    for key in list(waiting_duplicates):
                        for twin, twin_candidate in waiting_duplicates.pop(key):
                            self._give_back(twin, twin_candidate.params, "search", "not copied: the study "
                                            "stopped before the setting it repeats was measured")
                self._heartbeats.beat(held_ids(inflight, waiting_duplicates, held))
                if time.monotonic() - last_reclaim >= RECLAIM_EVERY_S:
                    last_reclaim = time.monotonic()
                    self.recover_interrupted()
                if not inflight:
                    if held is not None and not blocked:
                        continue
                    if (blocked or waiting_duplicates) and not stopping:
                        time.sleep(POLL_S)  # other hosts hold the budget, the reference or a setting
                        continue
                    break
                done, _ = wait(list(inflight), timeout=0.5, return_when=FIRST_COMPLETED)
                for listener in self.listeners:
                    listener.on_tick(time.monotonic() - started)
                if self._interrupt.is_set() and inflight:
                    if interrupted_at is None:
                        interrupted_at = time.monotonic()
                    elif time.monotonic() - interrupted_at >= INTERRUPT_GRACE_S:
                        self.runner.close()  # kills every worker; their futures end at once
                for future in done:
                    job = inflight.pop(future)
                    free_slots.append(job.slot)
                    free_slots.sort(key=lambda s: s.index)
                    if job.role in EXCLUSIVE_ROLES:
                        exclusive = False
                    result = _result_of(future)
                    if interrupted_at is not None and result.outcome is not Outcome.OK:
                        self._give_back(job.trial, job.candidate.params, job.role, "the run was interrupted (Ctrl-C)")
                        continue
                    frozen = self._tell(job.trial, job.candidate, job.role, job.slot, result)
                    if frozen is None:
                        continue  # another coordinator took it over as stale; its re-run counts instead
                    ran += 1
                    if job.role == "reference":
                        failure = failure or reference_stop(self.study.study_name, frozen)
                    failure = failure or same_failure_stop(self._trials())
                    for twin, twin_candidate in waiting_duplicates.pop(job.candidate.key, []):
                        self._tell_copy(twin, twin_candidate, frozen, started)
                    self._notify(frozen, self._measured_count(), total, started)
        trials = self._trials()
        front = front_trials(trials, self.directions)
        for listener in self.listeners:
            listener.on_finish(trials, front)
        outcomes: dict[str, int] = {}
        for t in trials:
            key = t.user_attrs.get("outcome", t.state.name)
            outcomes[key] = outcomes.get(key, 0) + 1
        if failure is not None:
            stopped = "stopped early: " + failure.message
        elif self._interrupt.is_set():
            stopped = "interrupted"
        return Summary(self.study.study_name, self._measured_count(), len(trials), outcomes,
                       [t.number for t in front], stopped,
                       failure=failure.message if failure is not None else None,
                       interrupted=self._interrupt.is_set(), ran=ran)

    # -------------------------------------------------------------- per trial
    def _propose(self, view: SharedView, waiting: dict[str, list[tuple["optuna.Trial", Candidate]]],
                 started: float) -> tuple["optuna.Trial", Candidate, str] | None:
        """Ask for a candidate: it when it must run here; None when recorded (or set aside to be copied)."""
        trial = self.study.ask()
        return self._unless_taken_over(trial.number, lambda: self._place(trial, view, waiting, started))

    def _place(self, trial: "optuna.Trial", view: SharedView, waiting: dict[str, list[tuple["optuna.Trial", Candidate]]],
               started: float) -> tuple["optuna.Trial", Candidate, str] | None:
        """Resolve, record and claim the asked ``trial``: it when it must run here (see :meth:`_propose`)."""
        trial.set_user_attr("host", HOST)
        trial.set_user_attr("worker", worker_id())
        self._heartbeats.start(trial._trial_id)
        role = trial.user_attrs.get("role", "search")
        trial.set_user_attr("role", role)
        params = suggest(trial, self.spec)
        candidate, problem = resolve(self.spec, params)
        if candidate is None:
            self._tell_unrun(trial, Outcome.INVALID, problem, {}, started)
            return None
        trial.set_user_attr("candidate_key", candidate.key)
        trial.set_user_attr("derived", dict(candidate.derived))
        if candidate.key in view.measured_by_key and role == "search":
            self._tell_copy(trial, candidate, view.measured_by_key[candidate.key], started)
            return None
        prediction = self._feasibility.predict(candidate.params)
        if prediction.skip and role not in EXCLUSIVE_ROLES:
            self._tell_unrun(trial, Outcome.SKIPPED_PREDICTED_OOM, prediction.reason, prediction.attributes(), started)
            return None
        holder = claim_setting(self.study, self._claims, trial.number, candidate.key, role)
        if holder is None:
            return trial, candidate, role
        if holder.user_attrs.get("measured") and holder.values is not None:
            self._tell_copy(trial, candidate, holder, started)
        else:
            waiting.setdefault(candidate.key, []).append((trial, candidate))  # copied once it is measured
        return None

    def _request(self, trial: "optuna.Trial", candidate: Candidate, role: str) -> TrialRequest:
        trial_dir = self.study_dir / f"trial_{trial.number:05d}"
        save = str(self.study_dir / "reference_output.npz") if role == "reference" else None
        return TrialRequest(
            study_name=self.study.study_name, trial_number=trial.number,
            workload_class=self.spec.workload.target, settings=candidate.settings,
            workload_options=self.spec.workload.options,
            inputs=dict(self.spec.inputs), seed=self.spec.seed, device=self.device,
            measurement=measurement_settings(self.spec, dict(self.study.user_attrs)),
            timeout_s=trial_timeout_s(self.spec, role, dict(self.study.user_attrs), self._trials()),
            workdir=str(trial_dir), quality_metrics=self.quality_metrics,
            reference_output=self._reference_output() if role != "reference" else None,
            save_output=save, compare_with_self=role == "reference",
            reference_settings=self._reference_settings())

    def _tell(self, trial: "optuna.Trial", candidate: Candidate, role: str, slot: Slot,
              result: TrialResult) -> "FrozenTrial | None":
        """Record ``result``; None (the result dropped, one line said) when another coordinator failed the
        trial as stale meanwhile."""
        return self._unless_taken_over(trial.number, lambda: self._record(trial, role, slot, result))

    def _unless_taken_over(self, number: int, write: Callable[[], T]) -> T | None:
        """``write()`` to trial ``number``, which this coordinator holds; None when another coordinator took the
        trial over as stale meanwhile (:data:`~.heartbeats.TAKEN_OVER`): the listeners hear it once, the loop
        goes on."""
        try:
            return write()
        except Exception as error:  # noqa: BLE001 - only a taken-over trial is handled here
            if not taken_over(error):
                raise
        for listener in self.listeners:
            listener.on_trial_dropped(number, TAKEN_OVER)
        return None

    def _give_back(self, trial: "optuna.Trial", params: Any, role: str, reason: str) -> None:
        self._unless_taken_over(trial.number, lambda: give_back(self.study, trial, params, role, reason))

    def _record(self, trial: "optuna.Trial", role: str, slot: Slot, result: TrialResult) -> "FrozenTrial":
        from optuna.trial import TrialState

        verdict: Verdict = judge(self.spec, self.plan, result, self._measured_values())
        for key, value in result_attributes(result).items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("slot", slot.label)
        if result.invocation is not None:
            trial.set_user_attr("invocation", result.invocation)  # what the adapter ran, exactly
        trial.set_user_attr("measured", True)
        trial.set_user_attr("placeholder_values", verdict.placeholder)
        if role == "reference" and result.output_path:
            trial.set_user_attr("reference_output", result.output_path)
            if result.outcome is Outcome.OK:
                for key, value in self._handoff.publish(self.study.study_name, trial.number,
                                                        Path(result.output_path)).items():
                    trial.set_user_attr(key, value)
        elif self._handoff.note:
            trial.set_user_attr("fingerprint_note", self._handoff.note)  # this host differs from the reference's
        if verdict.unavailable_constraints:
            trial.set_user_attr("unavailable_constraints", verdict.unavailable_constraints)
        if verdict.reason and result.outcome is Outcome.OK:  # an objective (FAIL) or a constraint (infeasible)
            trial.set_user_attr("reason", "; ".join(filter(None, [verdict.reason, result.reason])))  # not evaluated
        if verdict.values is None:
            return self.study.tell(trial, state=TrialState.FAIL)
        for key, value in verdict.constraints.items():
            trial.set_constraint(key, value)
        return self.study.tell(trial, verdict.values)

    def _tell_unrun(self, trial: "optuna.Trial", outcome: Outcome, reason: str | None, attributes: dict[str, Any],
                    started: float) -> None:
        """Record a trial that is never run (INVALID, SKIPPED_PREDICTED_OOM) as a wall for the sampler."""
        refused = wall(self.spec, self.plan, self._measured_values(), reason)
        frozen = tell_unrun(self.study, trial, outcome, reason, refused, attributes)
        self._notify(frozen, self._measured_count(), self.budget_trials, started)

    def _tell_copy(self, trial: "optuna.Trial", candidate: Candidate, original: "FrozenTrial",
                   started: float) -> None:
        frozen = self._unless_taken_over(trial.number, lambda: tell_copy(self.study, trial, original))
        if frozen is not None:
            self._notify(frozen, self._measured_count(), self.budget_trials, started)

    def _notify(self, frozen: "FrozenTrial", done: int, total: int | None, started: float) -> None:
        if not self.listeners:
            return
        front_size = len(front_trials(self._trials(), self.directions))
        for listener in self.listeners:
            listener.on_trial(frozen, done, total, front_size, time.monotonic() - started)


def _writable(directory: Path) -> str | None:
    """None when the trial directory can be created and written; else the cause, in one line."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".tuner-write-probe"
        probe.write_bytes(b"0" * 4096)
        probe.unlink()
    except OSError as error:
        return (f"environment: cannot write the trial directory {directory}: {error.strerror or error} "
                f"(check --home / TUNER_HOME: permissions and free disk); nothing was measured")
    return None


def _result_of(future: "Future[TrialResult]") -> TrialResult:
    """The runner's result; a runner bug becomes a CRASH outcome, never a lost trial."""
    try:
        return future.result()
    except Exception as error:  # noqa: BLE001
        return TrialResult(Outcome.CRASH, reason=f"runner failed: {type(error).__name__}: {error}")

