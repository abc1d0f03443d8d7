"""The coordinator: the ask → run → tell loop that owns the storage.

One coordinator per study. It asks Optuna for candidates, resolves derived
values and rules (a rule-breaking candidate is recorded INVALID and never
run), copies the result of a setting measured before (same canonical key),
runs the rest on the runner's slots in parallel threads, and tells each result
back. Only this thread talks to the storage. The reference setting runs first
and alone (every quality metric needs its output), then the baseline, then the
search. Trials left RUNNING by a coordinator that died are marked FAIL
(``INTERRUPTED``) and their settings enqueued again, so a resume loses no
completed trial and repeats only the interrupted ones.

Budget: ``budget_trials`` counts trials that ran a workload (reference and
baseline included); rule-rejected and copied trials are recorded but do not
count. ``wall_time_s`` limits this invocation. After 100 proposals in a row
that need no run, the space is taken as exhausted and the study stops.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tuner.pareto import front_trials
from tuner.results import Outcome, TrialResult
from tuner.runner.base import Runner, Slot, TrialRequest
from tuner.spec.candidate import Candidate
from tuner.spec.metrics import QUALITY_METRIC_NAMES
from tuner.spec.space import resolve, suggest
from tuner.study.objectives import ConstraintPlan, Verdict, judge
from tuner.study.records import result_attributes
from tuner.study.studies import OpenStudy

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

EXHAUSTED_AFTER = 100
EXCLUSIVE_ROLES = ("reference", "baseline")


class Listener(Protocol):
    """Receives progress and finished trials (the live display, the tracker)."""

    def on_start(self, study_name: str, done: int, total: int | None) -> None: ...

    def on_trial(self, trial: "FrozenTrial", done: int, total: int | None, front_size: int,
                 elapsed_s: float) -> None: ...

    def on_finish(self, trials: list["FrozenTrial"], front: list["FrozenTrial"]) -> None: ...


@dataclass
class Summary:
    """What a coordinator invocation did."""

    study_name: str
    measured: int
    recorded: int
    outcomes: dict[str, int]
    front: list[int]
    stopped_because: str


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

    def __post_init__(self) -> None:
        self.study = self.opened.study
        self.spec = self.opened.spec
        self.directions = [o.direction for o in self.spec.objectives]
        self.study_dir = self.home / self.study.study_name
        self.quality_metrics = sorted(self.spec.used_metrics & QUALITY_METRIC_NAMES)

    # ----------------------------------------------------------------- state
    def _trials(self) -> list["FrozenTrial"]:
        return self.study.get_trials(deepcopy=False)

    def _measured_count(self) -> int:
        return sum(1 for t in self._trials() if t.user_attrs.get("measured"))

    def _reference_output(self) -> str | None:
        for trial in self._trials():
            path = trial.user_attrs.get("reference_output")
            if path and Path(path).exists():
                return str(path)
        return None

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
        """Mark trials a dead coordinator left RUNNING as FAIL and enqueue them again."""
        from optuna.trial import TrialState

        count = 0
        for trial in self.study.get_trials(states=(TrialState.RUNNING,)):
            storage = self.study._storage
            storage.set_trial_user_attr(trial._trial_id, "outcome", "INTERRUPTED")
            storage.set_trial_user_attr(trial._trial_id, "reason", "the coordinator stopped while it ran")
            self.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            if trial.params:
                role = trial.user_attrs.get("role", "search")
                self.study.enqueue_trial(dict(trial.params), user_attrs={"role": role, "rerun_of": trial.number})
            count += 1
        return count

    # ------------------------------------------------------------------ loop
    def run(self) -> Summary:
        started = time.monotonic()
        self.recover_interrupted()
        total = self.budget_trials
        for listener in self.listeners:
            listener.on_start(self.study.study_name, self._measured_count(), total)
        by_key = {t.user_attrs["candidate_key"]: t for t in self._trials()
                  if t.user_attrs.get("measured") and t.values is not None and "candidate_key" in t.user_attrs}
        inflight: dict[Future[TrialResult], _InFlight] = {}
        waiting_duplicates: dict[str, list[tuple["optuna.Trial", Candidate]]] = {}
        free_slots = list(self.slots)
        held: tuple["optuna.Trial", Candidate, str] | None = None
        exclusive = False
        idle_proposals = 0
        stopped = "budget spent"
        measured = self._measured_count()
        with ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="tuner-slot") as pool:
            while True:
                while free_slots and not exclusive:
                    if total is not None and measured + len(inflight) >= total:
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
                        proposal = self._propose(by_key, inflight, waiting_duplicates, started)
                        if proposal is None:
                            idle_proposals += 1
                            continue
                        held = proposal
                    trial, candidate, role = held
                    if role in EXCLUSIVE_ROLES and inflight:
                        break  # run it alone once the slots drain
                    held = None
                    idle_proposals = 0
                    slot = free_slots.pop(0)
                    exclusive = role in EXCLUSIVE_ROLES
                    request = self._request(trial, candidate, role)
                    future = pool.submit(self.runner.run, request, slot)
                    inflight[future] = _InFlight(trial, candidate, slot, role)
                if not inflight:
                    if held is not None:
                        continue
                    break
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for future in done:
                    job = inflight.pop(future)
                    free_slots.append(job.slot)
                    free_slots.sort(key=lambda s: s.index)
                    if job.role in EXCLUSIVE_ROLES:
                        exclusive = False
                    result = _result_of(future)
                    frozen = self._tell(job.trial, job.candidate, job.role, job.slot, result)
                    measured += 1
                    if frozen.values is not None:
                        by_key[job.candidate.key] = frozen
                    for twin, twin_candidate in waiting_duplicates.pop(job.candidate.key, []):
                        self._tell_copy(twin, twin_candidate, frozen, started)
                    self._notify(frozen, measured, total, started)
        trials = self._trials()
        front = front_trials(trials, self.directions)
        for listener in self.listeners:
            listener.on_finish(trials, front)
        outcomes: dict[str, int] = {}
        for t in trials:
            key = t.user_attrs.get("outcome", t.state.name)
            outcomes[key] = outcomes.get(key, 0) + 1
        return Summary(self.study.study_name, measured, len(trials), outcomes, [t.number for t in front], stopped)

    # -------------------------------------------------------------- per trial
    def _propose(self, by_key: dict[str, "FrozenTrial"], inflight: dict[Future[TrialResult], _InFlight],
                 waiting: dict[str, list[tuple["optuna.Trial", Candidate]]],
                 started: float) -> tuple["optuna.Trial", Candidate, str] | None:
        """Ask for a candidate; returns it when it must run, None when it was recorded here."""
        from optuna.trial import TrialState

        trial = self.study.ask()
        role = trial.user_attrs.get("role", "search")
        trial.set_user_attr("role", role)
        params = suggest(trial, self.spec)
        candidate, problem = resolve(self.spec, params)
        if candidate is None:
            trial.set_user_attr("outcome", Outcome.INVALID.value)
            trial.set_user_attr("reason", problem)
            trial.set_user_attr("measured", False)
            frozen = self.study.tell(trial, state=TrialState.FAIL)
            self._notify(frozen, self._measured_count(), self.budget_trials, started)
            return None
        trial.set_user_attr("candidate_key", candidate.key)
        trial.set_user_attr("derived", dict(candidate.derived))
        if candidate.key in by_key and role == "search":
            self._tell_copy(trial, candidate, by_key[candidate.key], started)
            return None
        if role == "search" and any(job.candidate.key == candidate.key for job in inflight.values()):
            waiting.setdefault(candidate.key, []).append((trial, candidate))
            return None
        return trial, candidate, role

    def _request(self, trial: "optuna.Trial", candidate: Candidate, role: str) -> TrialRequest:
        trial_dir = self.study_dir / f"trial_{trial.number:05d}"
        save = str(self.study_dir / "reference_output.npz") if role == "reference" else None
        return TrialRequest(
            study_name=self.study.study_name, trial_number=trial.number,
            workload_class=self.spec.workload.target, settings=candidate.settings,
            workload_options=self.spec.workload.options,
            inputs=dict(self.spec.inputs), seed=self.spec.seed, device=self.device,
            measurement=self.spec.measurement.model_dump(), timeout_s=self.spec.workload.timeout_s,
            workdir=str(trial_dir), quality_metrics=self.quality_metrics,
            reference_output=self._reference_output() if role != "reference" else None,
            save_output=save, compare_with_self=role == "reference",
            reference_settings=self._reference_settings())

    def _tell(self, trial: "optuna.Trial", candidate: Candidate, role: str, slot: Slot,
              result: TrialResult) -> "FrozenTrial":
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
        if verdict.unavailable_constraints:
            trial.set_user_attr("unavailable_constraints", verdict.unavailable_constraints)
        if verdict.values is None:
            if verdict.reason and result.outcome is Outcome.OK:
                trial.set_user_attr("reason", verdict.reason)
            return self.study.tell(trial, state=TrialState.FAIL)
        for key, value in verdict.constraints.items():
            trial.set_constraint(key, value)
        return self.study.tell(trial, verdict.values)

    def _tell_copy(self, trial: "optuna.Trial", candidate: Candidate, original: "FrozenTrial",
                   started: float) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr("duplicate_of", original.number)
        trial.set_user_attr("measured", False)
        for key in ("outcome", "reason", "metrics", "placeholder_values"):
            if key in original.user_attrs:
                trial.set_user_attr(key, original.user_attrs[key])
        if original.values is None:
            frozen = self.study.tell(trial, state=TrialState.FAIL)
        else:
            for key, value in original.constraints.items():
                trial.set_constraint(key, value)
            frozen = self.study.tell(trial, list(original.values))
        self._notify(frozen, self._measured_count(), self.budget_trials, started)

    def _notify(self, frozen: "FrozenTrial", done: int, total: int | None, started: float) -> None:
        if not self.listeners:
            return
        front_size = len(front_trials(self._trials(), self.directions))
        for listener in self.listeners:
            listener.on_trial(frozen, done, total, front_size, time.monotonic() - started)


def _result_of(future: "Future[TrialResult]") -> TrialResult:
    """The runner's result; a runner bug becomes a CRASH outcome, never a lost trial."""
    try:
        return future.result()
    except Exception as error:  # noqa: BLE001
        return TrialResult(Outcome.CRASH, reason=f"runner failed: {type(error).__name__}: {error}")

