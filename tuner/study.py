"""Create or load a study in the Optuna storage, with everything needed to resume it.

The storage is the one source of truth. A study's user attributes hold the
spec's YAML text (so ``tuner resume`` needs nothing else), its hash, the
budget, the host fingerprint and the MLflow run id. Each trial's user
attributes hold its role (``reference`` / ``baseline`` / ``search``), its
candidate key, outcome, reason, log tail, metrics (with units and reasons for
unavailable ones), derived values and timings.

Storage URLs: ``sqlite:///path.db`` (embedded default, one writer) or
``postgresql+psycopg://...`` for many workers and hosts.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.spec import SamplerName, StudySpec, parse_spec

if TYPE_CHECKING:
    import optuna

DEFAULT_HOME = Path("studies")
STORAGE_ENV = "TUNER_STORAGE"
HOME_ENV = "TUNER_HOME"


class StudyError(RuntimeError):
    """A study that cannot be created, found or resumed; the message says why."""


def tuner_home(explicit: str | Path | None = None) -> Path:
    """Where studies keep their files: ``--home``, else ``$TUNER_HOME``, else ``./studies``."""
    return Path(explicit or os.environ.get(HOME_ENV) or DEFAULT_HOME).absolute()


def default_storage_url(home: Path) -> str:
    """The embedded default: a SQLite file in the tuner home (never MLflow's file)."""
    return f"sqlite:///{(home / 'studies.db').absolute()}"


def storage_url(explicit: str | None, home: Path) -> str:
    """``--storage``, else ``$TUNER_STORAGE``, else the embedded SQLite default."""
    return explicit or os.environ.get(STORAGE_ENV) or default_storage_url(home)


def redact_url(url: str) -> str:
    """The URL without its password (for tags and messages)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def open_storage(url: str) -> "optuna.storages.BaseStorage":
    """An Optuna RDB storage; SQLite files get their directory created and a busy timeout."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs = {"connect_args": {"timeout": 60}}
    for attempt in range(4):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
            break
        except Exception as error:  # noqa: BLE001 - any driver error: say which storage
            if attempt < 3 and ("locked" in str(error) or "already exists" in str(error)):
                time.sleep(0.5 * (attempt + 1))  # another process is creating the same tables
                continue
            raise StudyError(f"cannot open storage {redact_url(url)}: {type(error).__name__}: {error}") from None
    if url.startswith("sqlite:"):
        _use_write_ahead_log(storage)
    return storage


def _use_write_ahead_log(storage: "optuna.storages.RDBStorage") -> None:
    """SQLite in WAL mode with ``synchronous=NORMAL``: commits stop waiting for fsync.

    A committed trial survives the coordinator being killed (SIGKILL); only a
    power loss can take the last commits. Readers (``tuner status``) do not
    block the writer.
    """
    from sqlalchemy import event

    def configure(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(storage.engine, "connect", configure)
    storage.engine.dispose()


def make_sampler(name: SamplerName, spec: StudySpec, seed: int) -> "optuna.samplers.BaseSampler":
    """The named Optuna sampler with the spec's options (constraints are read from trials)."""
    import optuna

    from tuner.space import grid

    options = dict(spec.sampler.options)
    if name == "tpe":
        options.setdefault("multivariate", True)
        options.setdefault("n_startup_trials", 5)
        return optuna.samplers.TPESampler(seed=seed, **options)
    if name == "nsga2":
        options.setdefault("population_size", 8)
        return optuna.samplers.NSGAIISampler(seed=seed, **options)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, **options)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        return AskTellGridSampler(grid(spec), seed=seed)
    raise StudyError(f"unknown sampler {name!r}")


def _grid_sampler_class() -> type:
    import optuna

    class _AskTellGridSampler(optuna.samplers.GridSampler):  # type: ignore[misc]
        """GridSampler for an ask/tell loop: it marks the grid exhausted instead of ``study.stop()``.

        (``study.stop()`` is only allowed inside ``optimize``.) The coordinator
        reads :attr:`exhausted` and stops.
        """

        exhausted = False

        def after_trial(self, study: "optuna.Study", trial: Any, state: Any, values: Any) -> None:
            self.exhausted = len(self._get_unvisited_grid_ids(study)) == 0

    return _AskTellGridSampler


def AskTellGridSampler(search_space: dict[str, list[Any]], seed: int) -> "optuna.samplers.BaseSampler":
    """A grid sampler usable with ask/tell (see :func:`_grid_sampler_class`)."""
    return _grid_sampler_class()(search_space, seed=seed)  # type: ignore[no-any-return]


def default_study_name(spec: StudySpec, gpu_type: str) -> str:
    """``<spec name>-<gpu type>-<UTC time>``, e.g. ``avatar_demo-cpu-20261130-120301``."""
    device = re.sub(r"[^A-Za-z0-9]+", "_", gpu_type).strip("_").lower() or "cpu"
    return f"{spec.name}-{device}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


@dataclass
class OpenStudy:
    """A study handle plus the spec it was created from."""

    study: "optuna.Study"
    spec: StudySpec
    spec_text: str
    storage_url: str
    created: bool


def create_study(spec: StudySpec, spec_text: str, url: str, name: str, sampler: SamplerName,
                 trials: int | None, attributes: dict[str, Any]) -> OpenStudy:
    """Create a new study; fails when ``name`` exists (use resume for that)."""
    import optuna

    storage = open_storage(url)
    if any(s.study_name == name for s in storage.get_all_studies()):
        raise StudyError(f"study '{name}' already exists in {redact_url(url)}: "
                         f"continue it with 'tuner resume {name}' or pick another --study-name")
    study = optuna.create_study(
        storage=storage, study_name=name, sampler=make_sampler(sampler, spec, spec.seed),
        directions=[o.direction for o in spec.objectives])
    budget_trials = trials if trials is not None else spec.budget.trials
    study.set_user_attr("spec_yaml", spec_text)
    study.set_user_attr("sampler", sampler)
    study.set_user_attr("budget_trials", budget_trials)
    study.set_user_attr("budget_wall_time_s", spec.budget.wall_time_s)
    study.set_user_attr("objectives", [o.metric for o in spec.objectives])
    for key, value in attributes.items():
        study.set_user_attr(key, value)
    if spec.reference is not None:
        study.enqueue_trial(dict(spec.reference), user_attrs={"role": "reference"})
    if spec.baseline is not None and spec.baseline != spec.reference:
        study.enqueue_trial(dict(spec.baseline), user_attrs={"role": "baseline"})
    return OpenStudy(study, spec, spec_text, url, created=True)


def load_study(url: str, name: str, sampler: SamplerName | None = None) -> OpenStudy:
    """Load a study created by tuner, rebuilding its spec and sampler from the storage."""
    import optuna

    storage = open_storage(url)
    names = [s.study_name for s in storage.get_all_studies()]
    if name not in names:
        known = ", ".join(names[-5:]) or "none"
        raise StudyError(f"no study '{name}' in {redact_url(url)} (latest: {known})")
    probe = optuna.load_study(study_name=name, storage=storage)
    spec_text = probe.user_attrs.get("spec_yaml")
    if not spec_text:
        raise StudyError(f"study '{name}' was not created by tuner (no spec stored with it)")
    spec = parse_spec(spec_text, source=f"{name} (stored spec)")
    chosen: SamplerName = sampler or probe.user_attrs.get("sampler", spec.sampler.name)
    study = optuna.load_study(study_name=name, storage=storage,
                              sampler=make_sampler(chosen, spec, spec.seed + len(probe.trials)))
    return OpenStudy(study, spec, spec_text, url, created=False)


def list_studies(url: str) -> list[tuple[str, int]]:
    """(name, number of trials) of every study in the storage."""
    storage = open_storage(url)
    return [(s.study_name, len(storage.get_all_trials(s._study_id, deepcopy=False)))
            for s in storage.get_all_studies()]
