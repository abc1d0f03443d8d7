"""The search: what to try next and what to skip, decided from the spec and the stored trials.

* :mod:`.samplers` -- Optuna samplers by name (an ask/tell-safe grid sampler);
* :mod:`.cost_aware` -- the cost-aware TPE (device time per setting weighs the proposals);
* :mod:`.warm_start` -- another study's front and memory evidence as this one's start;
* :mod:`.feasibility` -- the monotone memory model: which settings surely run out of memory;
* :mod:`.objectives` -- objective values, the constraint plan and a trial's verdict;
* :mod:`.guards` -- early stops that save the budget, adaptive timeouts.

May import: :mod:`tuner.storage` (records, attributes, typed writes), :mod:`tuner.spec` and the
foundation modules. Never :mod:`tuner.study` (the loop that calls it) or the views above.
"""
