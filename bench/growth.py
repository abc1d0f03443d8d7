"""Per-trial overhead of the tuner over bare Optuna as one study grows (issue 27).

At each study size N (default 50, 500, 5,000; ``--quick``: 50, 500):

1. **tuner**: a study of the no-op workload (``tuner.testing.noop_spec``, the spec's default
   sampler, TPE) is filled to N finished trials — copies of a trial the coordinator measured,
   with every attribute a real trial stores (environment, provenance, log tail, worker info),
   written in one transaction (:func:`tuner.study.store.add_finished_trials`) — then a
   coordinator runs ``--trials`` more on one slot with :class:`~tuner.runner.inline.InlineRunner`
   (the worker's code in-process: no process start, so what is left is the coordinator, the
   storage and the worker's own bookkeeping). A trial's time is the interval between two trials
   told (a listener's ``on_trial``); the figure is the median interval.
2. **bare Optuna**: the same sampler (:func:`tuner.study.samplers.make_sampler`) on a SQLite
   (or PostgreSQL) study filled to N finished trials of the same parameter, then
   ``ask`` + ``suggest_int`` + ``set_constraint("outcome", 0)`` + ``tell`` (Optuna 5's TPE reads a trial's
   constraints, and every tuner trial carries its ``outcome`` one); the median per trial.

Overhead at N = (1) − (2), in this process's CPU milliseconds per trial (``time.process_time``: what
the tuner itself spends, little moved by other load on the machine; wall-clock medians are printed
beside it). The SQL statements per tuner trial are
counted with a SQLAlchemy ``before_cursor_execute`` event on the study's engine (as
``tests/study/test_flat_cost.py`` counts them). The last line is the overhead at the largest
size ÷ the overhead at 50 (goal ≤ 1.5). Medians, so a loaded machine's spikes weigh little;
still, run it on a quiet machine for figures to publish.

Usage: ``python bench/growth.py [--quick] [--trials 20] [--postgres]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import create_trial

from tuner.runner.base import Slot
from tuner.runner.inline import InlineRunner
from tuner.spec.loading import parse_spec
from tuner.study import store
from tuner.study.coordinator import Coordinator
from tuner.study.objectives import plan_constraints
from tuner.study.samplers import make_sampler
from tuner.study.studies import OpenStudy, create_study
from tuner.testing.noop_spec import noop_spec

SEED_TRIALS = 3  # trials the coordinator measures first: the template of the filled ones


def spec_text(name: str) -> str:
    """The no-op spec with the spec's default sampler (noop_spec pins the random one)."""
    return "\n".join(line for line in noop_spec(name, trials=10).splitlines() if not line.startswith("sampler:"))


class Clock:
    """A listener: when each trial was told, and the statements run on the study's engine by then."""

    def __init__(self) -> None:
        self.statements = 0
        self.marks: list[tuple[float, float, int]] = []

    def count(self, *_: Any) -> None:
        self.statements += 1

    def on_trial(self, *_: Any) -> None:
        self.marks.append((time.perf_counter(), time.process_time(), self.statements))

    def on_start(self, *_: Any) -> None: ...
    def on_finish(self, *_: Any) -> None: ...
    def on_trial_start(self, *_: Any) -> None: ...
    def on_tick(self, *_: Any) -> None: ...
    def on_trial_dropped(self, *_: Any) -> None: ...

    def per_trial(self) -> tuple[float, float, float]:
        """Median seconds between trials told (wall, this process's CPU); statements per trial (first to last)."""
        pairs = list(zip(self.marks, self.marks[1:]))
        return (statistics.median(b[0] - a[0] for a, b in pairs), statistics.median(b[1] - a[1] for a, b in pairs),
                (self.marks[-1][2] - self.marks[0][2]) / len(pairs))


def coordinator(opened: OpenStudy, home: Path, budget: int, listeners: list[Any]) -> Coordinator:
    return Coordinator(opened=opened, runner=InlineRunner(), slots=[Slot(0, None, 1)], home=home, device="cpu",
                       plan=plan_constraints(opened.spec, {}), budget_trials=budget, wall_time_s=None,
                       listeners=listeners)


def copies(template: Any, count: int, start: int) -> list[Any]:
    """``count`` finished copies of ``template``, each its own setting (``x``) and candidate key."""
    made = []
    for index in range(start, start + count):
        attrs = {**template.user_attrs}
        if "candidate_key" in attrs:
            attrs["candidate_key"] = f"filled-{index}"
        made.append(create_trial(state=template.state, values=[v * (1 + (index % 997) * 1e-4) for v in template.values],
                                 params={"x": (index * 7919) % 10**9}, distributions=template.distributions,
                                 user_attrs=attrs, system_attrs=dict(template.system_attrs)))
    return made


def tuner_at(size: int, trials: int, url: str, home: Path, name: str) -> tuple[float, float, float]:
    """Median seconds per tuner trial (wall, CPU) and statements per trial, in a study of ``size`` finished trials."""
    text = spec_text(name)
    spec = parse_spec(text)
    opened = create_study(spec, text, url, name, spec.sampler.name, None, {})
    coordinator(opened, home, SEED_TRIALS, []).run()
    template = opened.study.get_trials()[-1]
    store.add_finished_trials(opened.study, copies(template, size - SEED_TRIALS, SEED_TRIALS))
    clock = Clock()
    from sqlalchemy import event

    event.listen(store.engine_of(opened.study), "before_cursor_execute", clock.count)
    measured = sum(1 for t in opened.study.get_trials(deepcopy=False) if t.user_attrs.get("measured"))
    coordinator(opened, home, measured + trials + 1, [clock]).run()
    return clock.per_trial()


def bare_at(size: int, trials: int, url: str, name: str) -> tuple[float, float]:
    """Median seconds (wall, CPU) per bare ask/suggest/tell with the same sampler, in a study of ``size`` finished
    trials."""
    spec = parse_spec(spec_text(name))
    study = optuna.create_study(storage=url, study_name=name,
                                sampler=make_sampler(spec.sampler.name, spec, spec.seed))
    def one() -> None:  # what the tuner tells too: the value and its ``outcome`` constraint (TPE reads it)
        trial = study.ask()
        x = trial.suggest_int("x", 0, 10**9)
        trial.set_constraint("outcome", 0.0)
        study.tell(trial, 0.001 + x * 1e-12)

    one()
    store.add_finished_trials(study, copies(study.get_trials()[-1], size - 1, 1))
    walls, cpus = [], []
    for _ in range(trials + 1):
        started, cpu = time.perf_counter(), time.process_time()
        one()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls[1:]), statistics.median(cpus[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 50 and 500 only")
    parser.add_argument("--trials", type=int, default=20, help="trials timed at each size")
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL (tuner.testing.postgres)")
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results" / "growth.json",
                        help="where the raw figures are written (default bench/results/growth.json)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows: list[dict[str, object]] = []
    load_before = os.getloadavg()
    sizes = [50, 500] if args.quick else [50, 500, 5000]
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        root = Path(tmp)
        backends = {"sqlite": lambda tag: f"sqlite:///{root / (tag + '.db')}"}
        if args.postgres:
            from tuner.testing.postgres import running_postgres

            cluster = stack.enter_context(running_postgres(root / "pg"))
            backends["postgresql"] = lambda tag: cluster.url()
        ratio = None
        for backend, url in backends.items():
            overheads = {}
            for size in sizes:
                wall, cpu, statements = tuner_at(size, args.trials, url(f"t{size}"), root / f"home{size}", f"t{size}")
                bare_wall, bare_cpu = bare_at(size, args.trials, url(f"b{size}"), f"b{size}")
                overheads[size] = cpu - bare_cpu
                rows.append({"storage": backend, "study_trials": size, "tuner_cpu_s_per_trial": round(cpu, 5),
                             "bare_cpu_s_per_trial": round(bare_cpu, 5), "overhead_cpu_s_per_trial": round(cpu - bare_cpu, 5),
                             "tuner_wall_s_per_trial": round(wall, 5), "bare_wall_s_per_trial": round(bare_wall, 5),
                             "sql_statements_per_trial": round(statements, 1)})
                print(f"{backend:10s} study of {size:5d} trials: CPU ms/trial tuner {cpu * 1e3:6.1f}, bare Optuna "
                      f"{bare_cpu * 1e3:6.1f}, overhead {overheads[size] * 1e3:6.1f} | wall ms/trial tuner "
                      f"{wall * 1e3:6.1f}, bare {bare_wall * 1e3:6.1f} | {statements:.0f} SQL statements/trial",
                      flush=True)
            if ratio is None:
                ratio = overheads[sizes[-1]] / overheads[sizes[0]]
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps({"command": "python bench/growth.py " + " ".join(sys.argv[1:]),
                                        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "cores": os.cpu_count(), "load_average_before": load_before,
                                        "load_average_after": os.getloadavg(), "trials_timed": args.trials,
                                        "rows": rows, "ratio_largest_to_50": ratio}, indent=1) + "\n")
    print(f"overhead at {sizes[-1]} trials / overhead at {sizes[0]}: {ratio:.2f} (goal <= 1.5; SQLite)")


if __name__ == "__main__":
    main()
