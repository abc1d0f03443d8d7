"""Every use of Optuna's private API in tuner: the one module to re-check when Optuna changes (issue 36).

Optuna's public API does not reach everything tuner needs (a trial's attributes in one transaction, the
heartbeat rows, the ids behind a study, a cost term in TPE's acquisition). What it takes from Optuna's
internals is taken here, and only here: the rest of tuner calls the functions and classes below.
``tests/test_storage_gateway.py`` holds that: it collects Optuna's private names from Optuna's own source and
finds any use of one elsewhere in ``tuner/``. ``tests/storage/test_optuna_private.py`` pins the installed Optuna
to :data:`CHECKED_OPTUNA` and checks that each name listed here still exists.

**Checked against Optuna 5.0** (5.0.0; :data:`CHECKED_OPTUNA`; pyproject pins ``optuna==5.0.*``). Before adding
a version to :data:`CHECKED_OPTUNA`, read each name below in the new Optuna's source: that it exists, and that it
still means what is said here.

Study, trial and storage (the storage gateway, :mod:`.store_rows` and :mod:`.store`):

* ``Study._storage``: the storage a study reads and writes (Optuna's ``_CachedStorage`` over an ``RDBStorage``,
  or the in-memory / journal storage itself): :func:`storage_of`.
* ``_CachedStorage._backend``: the ``RDBStorage`` behind that cache (its engine, its scoped sessions):
  :func:`backend_of`, :func:`backend_of_storage`.
* ``Study._study_id`` (and ``FrozenStudy._study_id``), ``Trial._trial_id`` (and ``FrozenTrial._trial_id``): the
  storage's ids, which the storage's public methods take: :func:`study_id`, :func:`trial_id`.
* ``Trial._cached_frozen_trial``: a live trial's in-memory copy, which Optuna's writes through the trial update
  with the storage; tuner's one-transaction write updates it the same way: :func:`live_trial_cache`.
* ``optuna.storages._rdb.models``: the ORM tables (the one-transaction upsert, one study attribute read, bulk
  trial insert, heartbeat rows): :func:`rdb_models`.
* ``optuna.storages._rdb.storage._create_scoped_session``: a session that commits or rolls back as Optuna's own
  writes do: :func:`rdb_session`.
* ``RDBStorage._get_stale_trial_ids``: RUNNING trials whose heartbeat is past the grace period:
  :func:`stale_trial_ids`.
* ``RDBStorage._create_new_trial``, ``_set_trial_param``, ``_get_trials``, ``_get_best_trial_id``,
  ``_get_stale_trial_ids``: the private ``RDBStorage`` methods that reach the database (``_CachedStorage`` and
  Optuna call them); :mod:`.tolerant_storage` wraps them with the public ones: :data:`RDB_PRIVATE_METHODS`.
* The module ``optuna.storages._rdb.storage``: its logger (filtered by :mod:`.tolerant_storage`) and an import
  the fleet worker does ahead of a join: :data:`RDB_STORAGE_MODULE`.

Samplers (the search side, :mod:`.samplers` and :mod:`.cost_aware`):

* ``GridSampler._get_unvisited_grid_ids``: whether a grid is exhausted (ask/tell has no ``study.stop()``):
  :func:`grid_exhausted`.
* ``TPESampler._sample`` and ``TPESampler._compute_acquisition_func`` (overridden), ``TPESampler._n_startup_trials``
  and ``TPESampler._rng`` (a ``LazyRandomState``; its ``rng``) read: :func:`hooked_tpe_class`, public hooks over them.

On another Optuna at run time: the first use of this module warns once (:class:`UncheckedOptunaWarning`, naming
this module and the installed version) and goes on. The pin keeps an ordinary install on a checked version, so
this is for a deliberate override (``pip install optuna==...`` afterwards): a patch or minor release often keeps
these names, and a name that is gone still fails loudly where it is used (:func:`hooked_tpe_class` refuses at
construction; the others raise ``AttributeError`` / ``ImportError`` at their first call). The test is the gate.
"""

from __future__ import annotations

import functools
import warnings
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

CHECKED_OPTUNA = ("5.0",)  # major.minor releases of Optuna every name in the module docstring was read against
MODULE = "tuner/storage/optuna_private.py"
RDB_STORAGE_MODULE = "optuna.storages._rdb.storage"
RDB_PRIVATE_METHODS = (
    "_create_new_trial",
    "_set_trial_param",
    "_get_trials",
    "_get_best_trial_id",
    "_get_stale_trial_ids",
)
TPE_HOOKS = ("_sample", "_compute_acquisition_func")
_VERDICT: list[str] = []  # the one check of this process: "" (checked) or the warning given


class UncheckedOptunaWarning(RuntimeWarning):
    """The installed Optuna is not one :data:`CHECKED_OPTUNA` lists (see the module docstring)."""


def unchecked_optuna(version: str | None = None) -> str | None:
    """Why ``version`` (default: the installed Optuna's) is not one this module was checked against, in one line
    naming this module; None when its major.minor is in :data:`CHECKED_OPTUNA`."""
    if version is None:
        from optuna.version import __version__ as installed

        version = str(installed)
    if ".".join(version.split(".")[:2]) in CHECKED_OPTUNA:
        return None
    return (
        f"optuna {version} is installed; {MODULE} (Optuna's private API in tuner) was checked against "
        f"Optuna {', '.join(CHECKED_OPTUNA)}: re-check each private name its docstring lists, then add the "
        f"version to CHECKED_OPTUNA (pyproject pins optuna==5.0.*)"
    )


def _check() -> None:
    """Warn once per process when the installed Optuna is unchecked (see the module docstring)."""
    if _VERDICT:
        return
    problem = unchecked_optuna()
    _VERDICT.append(problem or "")
    if problem:
        warnings.warn(problem, UncheckedOptunaWarning, stacklevel=3)


# ------------------------------------------------------------------ study, trial and storage


def storage_of(study: optuna.Study) -> Any:
    """The storage ``study`` reads and writes (Optuna's own wrapper of the storage it was opened on)."""
    _check()
    return study._storage


def backend_of_storage(storage: Any) -> Any:
    """The storage behind Optuna's cache wrapper ``storage`` (an ``RDBStorage`` for a database URL); ``storage``
    itself when it is no such wrapper."""
    return getattr(storage, "_backend", storage)


def backend_of(study: optuna.Study) -> Any:
    """The storage behind ``study``'s cache wrapper (an ``RDBStorage`` for a database URL)."""
    return backend_of_storage(storage_of(study))


def study_id(study: Any) -> int:
    """The storage's id of a study (an ``optuna.Study`` or a ``FrozenStudy`` from ``get_all_studies``)."""
    return int(study._study_id)


def trial_id(trial: Any) -> int:
    """The storage's id of a trial (live or frozen); trial *numbers* count per study, ids per storage."""
    return int(trial._trial_id)


def live_trial_cache(trial: Any) -> FrozenTrial | None:
    """A live ``optuna.Trial``'s in-memory copy of itself (what its ``params`` and attributes read); None for a
    ``FrozenTrial`` (no storage behind it)."""
    _check()
    return getattr(trial, "_cached_frozen_trial", None)


def rdb_models() -> ModuleType:
    """Optuna's ORM models of an RDB storage (``StudyModel``, ``TrialModel``, ``TrialUserAttributeModel`` ...)."""
    _check()
    from optuna.storages._rdb import models

    return models


def rdb_session(backend: Any) -> AbstractContextManager[Any]:
    """A session of the ``RDBStorage`` ``backend`` that commits on leaving, rolls back on an error and ignores an
    integrity error, as Optuna's own writes do."""
    _check()
    from optuna.storages._rdb.storage import _create_scoped_session

    return _create_scoped_session(backend.scoped_session, True)  # type: ignore[no-any-return]


def stale_trial_ids(storage: Any, study: int) -> list[int]:
    """Ids of study ``study``'s RUNNING trials whose last heartbeat in ``storage`` is older than the grace period."""
    _check()
    return list(storage._get_stale_trial_ids(study))


# ------------------------------------------------------------------ samplers


def grid_exhausted(sampler: Any, study: optuna.Study) -> bool:
    """Whether the ``optuna.samplers.GridSampler`` ``sampler`` has no unvisited grid point left in ``study``."""
    _check()
    return len(sampler._get_unvisited_grid_ids(study)) == 0


@functools.cache
def hooked_tpe_class() -> type:
    """``optuna.samplers.TPESampler`` with public hooks over its private steps, for a subclass to override.

    * ``before_sample(study, search_space)`` before TPE samples a trial (relative or one parameter), and
      ``after_sample()`` after it (also on an error);
    * ``adjust_acquisition(samples, values) -> values``: TPE's acquisition (log l(x)/g(x), larger is better) of
      its candidate ``samples`` (parameter -> internal representations), as the subclass wants it;
    * ``n_startup_trials`` (finished trials before TPE models) and ``random_state`` (the sampler's seeded
      ``numpy.random.RandomState``).

    RuntimeError naming this module when the installed Optuna's TPESampler lacks a hook (built once, lazily).
    """
    _check()
    import optuna

    base = optuna.samplers.TPESampler
    for hook in TPE_HOOKS:
        if not hasattr(base, hook):
            raise RuntimeError(f"optuna {optuna.__version__}: TPESampler has no {hook}; {MODULE} needs Optuna 5.0")

    class HookedTPESampler(base):  # type: ignore[misc, valid-type]
        """TPE with tuner's hooks (see :func:`hooked_tpe_class`)."""

        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            if not hasattr(self, "_n_startup_trials") or not hasattr(getattr(self, "_rng", None), "rng"):
                raise RuntimeError(f"this TPESampler keeps no _n_startup_trials / _rng.rng; {MODULE} needs Optuna 5.0")

        @property
        def n_startup_trials(self) -> int:
            return int(self._n_startup_trials)

        @property
        def random_state(self) -> np.random.RandomState:
            return self._rng.rng

        def before_sample(self, study: optuna.Study, search_space: dict[str, BaseDistribution]) -> None:
            """Called before TPE samples (nothing by default)."""

        def after_sample(self) -> None:
            """Called after TPE sampled, also on an error (nothing by default)."""

        def adjust_acquisition(self, samples: dict[str, np.ndarray], values: np.ndarray) -> np.ndarray:
            """TPE's acquisition ``values`` of ``samples`` as the sampler uses them (unchanged by default)."""
            return values

        def _sample(
            self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
        ) -> dict[str, Any]:
            self.before_sample(study, search_space)
            try:
                return super()._sample(study, trial, search_space)  # type: ignore[no-any-return]
            finally:
                self.after_sample()

        def _compute_acquisition_func(
            self, samples: dict[str, np.ndarray], mpe_below: Any, mpe_above: Any
        ) -> np.ndarray:
            return self.adjust_acquisition(samples, super()._compute_acquisition_func(samples, mpe_below, mpe_above))

    return HookedTPESampler
