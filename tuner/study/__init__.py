"""Where a trial is proposed, told and stored: the Optuna study and its loop.

* :mod:`.storage` -- the tuner home, storage URLs (SQLite WAL, PostgreSQL), redaction;
* :mod:`.samplers` -- Optuna samplers by name (and an ask/tell-safe grid sampler);
* :mod:`.studies` -- create / load a study with its spec, budget and reference/baseline;
* :mod:`.coordinator` -- the ask -> run -> tell loop over the runner's slots; :mod:`.listeners` -- what it reports;
* :mod:`.guards` -- early stops that save the budget, adaptive timeouts; :mod:`.lock` -- one coordinator per study;
* :mod:`.objectives` -- a result -> objective values and graded constraint violations;
* the storage gateway, the only code naming Optuna's attributes and internals: :mod:`.attributes` (every
  attribute name, readers of a stored trial), :mod:`.records` (typed records), :mod:`.store` (typed writes);
  :mod:`.optuna_private`, the one module using Optuna's private API (the gateway's internals, the TPE hooks).

May import: :mod:`tuner.runner`, :mod:`tuner.workloads`, :mod:`tuner.adapters`,
:mod:`evaluators`, :mod:`tuner.spec` and the foundation modules
(:mod:`tuner.results`, :mod:`tuner.gpu`, :mod:`tuner.pareto`). Never the views
above it (front, tracking, ship, cli).
"""
