"""Per-trial overhead of the tuner over bare Optuna as one study grows (issue 27).

At each study size N (default 50, 500, 5,000; ``--quick``: 50, 500):

1. **tuner**: a study of the no-op workload (``tuner.testing.noop_spec``, the spec's default
   sampler, TPE) is filled to N finished trials — copies of a trial the coordinator measured,
   with every attribute a real trial stores (environment, provenance, log tail, worker info),
   written in one transaction (:func:`tuner.storage.store.add_finished_trials`) — then a
   coordinator runs ``--trials`` more on one slot with :class:`~tuner.testing.inline_runner.InlineRunner`
   (the worker's code in-process: no process start, so what is left is the coordinator, the
   storage and the worker's own bookkeeping). A trial's time is the interval between two trials
   told (a listener's ``on_trial``); the figure is the median interval.
2. **bare Optuna**, made to do the tuner's sampling work exactly: a study of the same N trials
   (params, values, constraints; none of the tuner's attributes), the tuner's sampler as it was
   when the timed run began (a deep copy: same TPE, same random state), then per tuner trial, in
   order, ``ask`` + ``suggest_int`` + ``set_constraint("outcome", c)`` + ``tell(v)`` with the value
   ``v`` and constraint ``c`` that tuner trial got; the median per trial. The sampler then proposes
   what it proposed in the tuner (the share is printed: ``same proposals``, 100% when the replay is
   exact). Why: TPE's cost depends on the values it is told (how many of its Parzen kernels are far
   from a candidate: Optuna's log-ndtr series), and a bare loop telling other values (say, a
   function of ``x``) grows at another rate than the tuner's study — that, not tuner code, was the
   growth this bench first showed (ratio 2.66 with a bare loop of its own values).

Both sides run their sampler inside :class:`TimedSampler`, which adds up the CPU its calls take.
Overhead at N = the tuner's CPU per trial *outside the sampler* − bare Optuna's, in this process's CPU
milliseconds (``time.process_time``: little moved by other load on the machine); since both samplers do
the same work, this is the tuner's own cost without the noise of the largest, identical part (the
difference of the totals is printed beside it, and wall-clock medians). The SQL statements per tuner
trial are counted with a SQLAlchemy ``before_cursor_execute`` event on the study's engine (as
``tests/study/test_flat_cost.py`` counts them). Each size is measured ``--repeats`` times, the sizes taken
in turn (50, 500, 50, 500 ...: a change in the machine's load weighs on every size alike), and its
overhead is the median of those. The last line is the median overhead at the largest size ÷ the one
at 50 (goal ≤ 1.5). Medians, so a loaded machine's spikes weigh little; still, run it on a quiet
machine for figures to publish.

Usage: ``python bench/growth.py [--quick] [--trials 30] [--repeats 3] [--postgres]``;
``python bench/growth.py --report [RESULTS ...]`` prints docs/benchmarks.md's growth table from committed raw
results (default ``bench/results/growth.json`` and ``bench/results/growth_full.json``) and measures nothing.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple

import optuna
from optuna.trial import create_trial

from tuner.runner.base import Slot
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec
from tuner.storage import store
from tuner.study.coordinator import Coordinator
from tuner.study.studies import OpenStudy, create_study
from tuner.testing.inline_runner import InlineRunner
from tuner.testing.noop_spec import noop_spec

SEED_TRIALS = 3  # trials the coordinator measures first: the template of the filled ones
RESULTS_DIR = Path(__file__).resolve().parent / "results"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from growth_report import GOAL_RATIO, REPORTED, report  # noqa: E402 - beside this script


def spec_text(name: str) -> str:
    """The no-op spec with the spec's default sampler (noop_spec pins the random one)."""
    return "\n".join(line for line in noop_spec(name, trials=10).splitlines() if not line.startswith("sampler:"))


class TimedSampler(optuna.samplers.BaseSampler):
    """``inner`` (any sampler), adding up the CPU seconds its calls take (:attr:`spent`): a trial's sampler share."""

    def __init__(self, inner: optuna.samplers.BaseSampler) -> None:
        self.inner, self.spent = inner, 0.0

    def _timed(self, name: str, *args: Any) -> Any:
        started = time.process_time()
        try:
            return getattr(self.inner, name)(*args)
        finally:
            self.spent += time.process_time() - started

    def infer_relative_search_space(self, *args: Any) -> Any:
        return self._timed("infer_relative_search_space", *args)

    def sample_relative(self, *args: Any) -> Any:
        return self._timed("sample_relative", *args)

    def sample_independent(self, *args: Any) -> Any:
        return self._timed("sample_independent", *args)

    def before_trial(self, *args: Any) -> None:
        self._timed("before_trial", *args)

    def after_trial(self, *args: Any) -> None:
        self._timed("after_trial", *args)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def __getattr__(self, name: str) -> Any:  # what the tuner asks of its sampler (a grid's ``exhausted`` ...)
        return getattr(self.__dict__["inner"], name)


class Clock:
    """A listener: when each trial was told, the statements run on the study's engine and the sampler's CPU
    seconds (:class:`TimedSampler`) by then."""

    def __init__(self, sampler: TimedSampler) -> None:
        self.statements = 0
        self.sampler = sampler
        self.marks: list[tuple[float, float, int, float]] = []

    def count(self, *_: Any) -> None:
        self.statements += 1

    def on_trial(self, *_: Any) -> None:
        self.marks.append((time.perf_counter(), time.process_time(), self.statements, self.sampler.spent))

    def on_start(self, *_: Any) -> None: ...
    def on_finish(self, *_: Any) -> None: ...
    def on_trial_start(self, *_: Any) -> None: ...
    def on_tick(self, *_: Any) -> None: ...
    def on_trial_dropped(self, *_: Any) -> None: ...

    def per_trial(self) -> Timing:
        """Median seconds between trials told (wall, CPU, CPU outside the sampler); statements per trial."""
        pairs = list(zip(self.marks, self.marks[1:]))
        return Timing(
            statistics.median(b[0] - a[0] for a, b in pairs),
            statistics.median(b[1] - a[1] for a, b in pairs),
            statistics.median(b[1] - a[1] - (b[3] - a[3]) for a, b in pairs),
            (self.marks[-1][2] - self.marks[0][2]) / len(pairs),
        )


class Timing(NamedTuple):
    """Median seconds per trial: ``wall``, this process's ``cpu``, and its CPU outside the sampler's calls
    (``own_cpu``); ``statements``: SQL statements per trial (0 where not counted)."""

    wall: float
    cpu: float
    own_cpu: float
    statements: float = 0.0


def coordinator(opened: OpenStudy, home: Path, budget: int, listeners: list[Any]) -> Coordinator:
    return Coordinator(
        study=opened.study,
        spec=opened.spec,
        runner=InlineRunner(),
        slots=[Slot(0, None, 1)],
        home=home,
        device="cpu",
        plan=plan_constraints(opened.spec, {}),
        budget_trials=budget,
        wall_time_s=None,
        listeners=listeners,
    )


def copies(template: Any, count: int, start: int) -> list[Any]:
    """``count`` finished copies of ``template``, each its own setting (``x``) and candidate key."""
    made = []
    for index in range(start, start + count):
        attrs = {**template.user_attrs}
        if "candidate_key" in attrs:
            attrs["candidate_key"] = f"filled-{index}"
        made.append(
            create_trial(
                state=template.state,
                values=[v * (1 + (index % 997) * 1e-4) for v in template.values],
                params={"x": (index * 7919) % 10**9},
                distributions=template.distributions,
                user_attrs=attrs,
                system_attrs=dict(template.system_attrs),
            )
        )
    return made


class Replay(NamedTuple):
    """What the bare loop repeats of a tuner run: the study's trials when the timed run began, its sampler in
    the state it was in then (a deep copy), and each timed trial's value and ``outcome`` constraint, in order."""

    trials: list[Any]
    sampler: Any
    told: list[tuple[dict[str, Any], list[float], float]]  # params (to check the replay), values, constraint


def tuner_at(size: int, trials: int, url: str, home: Path, name: str) -> tuple[Timing, Replay]:
    """Per tuner trial in a study of ``size`` finished trials (:class:`Timing`), and what :func:`bare_at` replays."""
    text = spec_text(name)
    spec = parse_spec(text)
    opened = create_study(spec, text, url, name, spec.sampler.name, None, {})
    coordinator(opened, home, SEED_TRIALS, []).run()
    template = opened.study.get_trials()[-1]
    store.add_finished_trials(opened.study, copies(template, size - SEED_TRIALS, SEED_TRIALS))
    before = opened.study.get_trials()
    replayed = copy.deepcopy(opened.study.sampler)
    opened.study.sampler = sampler = TimedSampler(opened.study.sampler)
    clock = Clock(sampler)
    from sqlalchemy import event

    event.listen(store.engine_of(opened.study), "before_cursor_execute", clock.count)
    measured = sum(1 for t in before if t.user_attrs.get("measured"))
    coordinator(opened, home, measured + trials + 1, [clock]).run()
    told = [
        (t.params, list(t.values), t.system_attrs.get("constraints:outcome", 0.0))
        for t in opened.study.get_trials()[len(before) :]
        if t.values is not None
    ]
    return clock.per_trial(), Replay(before, replayed, told)


def bare_at(replay: Replay, url: str, name: str) -> tuple[Timing, float]:
    """Per bare ``ask`` + ``suggest_int`` + ``set_constraint`` + ``tell`` replaying ``replay`` (a study of the same
    trials: params, values, constraints, no user attributes; the tuner's sampler as it was; each timed trial's
    value and constraint) (:class:`Timing`), and the share of proposals equal to the tuner's (1.0: the sampler
    did exactly the tuner's work)."""
    sampler = TimedSampler(replay.sampler)
    study = optuna.create_study(storage=url, study_name=name, sampler=sampler)
    store.add_finished_trials(
        study,
        [
            create_trial(
                state=t.state,
                values=t.values,
                params=t.params,
                distributions=t.distributions,
                system_attrs=dict(t.system_attrs),
            )
            for t in replay.trials
        ],
    )
    walls, cpus, own, same = [], [], [], 0
    for params, values, outcome in replay.told:
        started, cpu, sampling = time.perf_counter(), time.process_time(), sampler.spent
        trial = study.ask()
        x = trial.suggest_int("x", 0, 10**9)
        trial.set_constraint("outcome", outcome)
        study.tell(trial, values)
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
        own.append(cpus[-1] - (sampler.spent - sampling))
        same += params == {"x": x}
    timing = Timing(statistics.median(walls[1:]), statistics.median(cpus[1:]), statistics.median(own[1:]))
    return timing, same / len(replay.told)


def measure(
    backend: str, url: Callable[[str], str], home: Path, size: int, trials: int, repeat: int
) -> tuple[float, dict[str, object]]:
    """One tuner run and its bare replay at ``size`` (printed; ``url``: a new study's storage URL by tag); the
    overhead (CPU seconds per trial outside the sampler, tuner − bare) and the raw row."""
    tag = f"{size}_{repeat}"
    tuner, replay = tuner_at(size, trials, url(f"t{tag}"), home / f"home{tag}", f"t{tag}")
    bare, same = bare_at(replay, url(f"b{tag}"), f"b{tag}")
    overhead = tuner.own_cpu - bare.own_cpu
    print(
        f"{backend:10s} study of {size:5d} trials: CPU ms/trial tuner {tuner.cpu * 1e3:6.1f} "
        f"({tuner.own_cpu * 1e3:5.1f} outside the sampler), bare Optuna {bare.cpu * 1e3:6.1f} "
        f"({bare.own_cpu * 1e3:5.1f}), overhead {overhead * 1e3:5.1f} (totals' difference "
        f"{(tuner.cpu - bare.cpu) * 1e3:5.1f}) | wall ms/trial tuner {tuner.wall * 1e3:6.1f}, bare "
        f"{bare.wall * 1e3:6.1f} | {tuner.statements:.0f} SQL statements/trial | bare replay "
        f"{same:.0%} same proposals",
        flush=True,
    )
    return overhead, {
        "storage": backend,
        "study_trials": size,
        "repeat": repeat,
        "tuner_cpu_s_per_trial": round(tuner.cpu, 5),
        "bare_cpu_s_per_trial": round(bare.cpu, 5),
        "tuner_cpu_outside_sampler_s_per_trial": round(tuner.own_cpu, 5),
        "bare_cpu_outside_sampler_s_per_trial": round(bare.own_cpu, 5),
        "overhead_cpu_s_per_trial": round(overhead, 5),
        "difference_of_totals_cpu_s_per_trial": round(tuner.cpu - bare.cpu, 5),
        "tuner_wall_s_per_trial": round(tuner.wall, 5),
        "bare_wall_s_per_trial": round(bare.wall, 5),
        "sql_statements_per_trial": round(tuner.statements, 1),
        "bare_same_proposals": round(same, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--report",
        nargs="*",
        type=Path,
        default=None,
        metavar="RESULTS",
        help="print docs/benchmarks.md's growth table from committed raw results (default "
        "bench/results/growth.json and growth_full.json), measure nothing",
    )
    parser.add_argument("--quick", action="store_true", help="sizes 50 and 500 only")
    parser.add_argument("--trials", type=int, default=30, help="trials timed at each size")
    parser.add_argument("--repeats", type=int, default=3, help="runs at each size, sizes taken in turn (median)")
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL (tuner.testing.postgres)")
    parser.add_argument(
        "--results",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "growth.json",
        help="where the raw figures are written (default bench/results/growth.json)",
    )
    args = parser.parse_args()
    if args.report is not None:
        print(report(args.report or REPORTED))
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows: list[dict[str, object]] = []
    load_before = os.getloadavg()
    sizes = [50, 500] if args.quick else [50, 500, 5000]
    medians: dict[str, dict[int, float]] = {}
    total_medians: dict[str, dict[int, float]] = {}  # the same, as the difference of whole CPU times
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        root = Path(tmp)
        backends: dict[str, Callable[[str], str]] = {"sqlite": lambda tag: f"sqlite:///{root / (tag + '.db')}"}
        if args.postgres:
            from tuner.testing.postgres import running_postgres

            cluster = stack.enter_context(running_postgres(root / "pg"))
            backends["postgresql"] = cluster.create_database  # a database per study: TPE's cache holds a study id
        for backend, url in backends.items():
            runs: dict[int, list[float]] = {size: [] for size in sizes}
            totals: dict[int, list[float]] = {size: [] for size in sizes}
            for repeat in range(args.repeats):  # sizes in turn: a change of the machine's load weighs on each
                for size in sizes:
                    overhead, row = measure(backend, url, root, size, args.trials, repeat)
                    runs[size].append(overhead)
                    totals[size].append(float(row["difference_of_totals_cpu_s_per_trial"]))  # type: ignore[arg-type]
                    rows.append(row)
            medians[backend] = {size: statistics.median(values) for size, values in runs.items()}
            total_medians[backend] = {size: statistics.median(values) for size, values in totals.items()}
            print(
                f"{backend:10s} median overhead, CPU ms/trial: "
                + ", ".join(f"{size} trials {value * 1e3:.1f}" for size, value in medians[backend].items())
                + f"; ratio {medians[backend][sizes[-1]] / medians[backend][sizes[0]]:.2f}",
                flush=True,
            )
    ratios = {backend: m[sizes[-1]] / m[sizes[0]] for backend, m in medians.items()}
    total_ratios = {backend: m[sizes[-1]] / m[sizes[0]] for backend, m in total_medians.items()}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(
        json.dumps(
            {
                "command": "python bench/growth.py " + " ".join(sys.argv[1:]),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "cores": os.cpu_count(),
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
                "trials_timed": args.trials,
                "repeats": args.repeats,
                "rows": rows,
                "median_overhead_cpu_s_per_trial": medians,
                "ratios": ratios,
                "ratio_largest_to_50": ratios["sqlite"],
                "median_difference_of_totals_cpu_s_per_trial": total_medians,
                "ratios_of_totals": total_ratios,
            },
            indent=1,
        )
        + "\n"
    )
    print(
        f"overhead at {sizes[-1]} trials / overhead at {sizes[0]}: {ratios['sqlite']:.2f} (goal <= {GOAL_RATIO:g}; "
        f"SQLite; outside the sampler — as the difference of whole CPU times, sampler included: "
        f"{total_ratios['sqlite']:.2f})"
    )


if __name__ == "__main__":
    main()
