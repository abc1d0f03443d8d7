"""The storage gateway: the only code that touches Optuna's storage, its attributes and its internals.

Everything a study keeps lives in its Optuna storage (SQLite or PostgreSQL); this package reads and
writes it and rides out its outages. Nothing here decides what to try next or runs a trial.

* :mod:`.opening` -- the tuner home, storage URLs (SQLite WAL, PostgreSQL), opening a storage, a stored
  tuner study with its spec (:func:`~.opening.open_stored_study`);
* :mod:`.attributes` -- every trial / study attribute name, the readers of a stored trial (a foundation
  module: :mod:`tuner.pareto` judges trials through it);
* :mod:`.records` -- typed reads (``TrialRecord``, ``StudyRecord``); :mod:`.store` / :mod:`.store_rows`
  -- typed writes, a trial's attributes in one transaction, its side records;
* :mod:`.optuna_private` -- the one module using Optuna's private API;
* :mod:`.outage` + :mod:`.tolerant_storage` -- transient errors waited out, bounded;
* :mod:`.cost` -- device-seconds per run by phase, a study's used / wasted / avoided (stored with each trial);
* the rows coordinators share: :mod:`.claims` (one run per setting, fleet-wide), :mod:`.heartbeats`
  (trial heartbeats, stale trials reclaimed), :mod:`.lock` (one coordinator per device of a host).

May import: :mod:`tuner.runner` (phases, the recorded environment), :mod:`tuner.spec` and the foundation
modules. Never :mod:`tuner.search`, :mod:`tuner.study` or the views above them.
"""
