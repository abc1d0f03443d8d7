"""What a study is asked to do: the spec, from YAML text to a frozen candidate.

* :mod:`.models` -- the pydantic models (:class:`~.models.StudySpec`, parameters, objectives, ...);
* :mod:`.loading` -- :func:`~.loading.load_spec` / :func:`~.loading.parse_spec`, errors as
  ``file:line: key: problem``;
* :mod:`.workload` and :mod:`.adapters` -- the ``workload:`` block and its adapter blocks;
* :mod:`.expressions` -- the safe evaluator for rules, derived values and bounds (never ``eval``);
* :mod:`.space` -- parameters -> Optuna distributions, grid values, derived values, rules;
* :mod:`.candidate` -- a frozen setting and its canonical key;
* :mod:`.metrics` -- the metric names a spec may use, with units and directions.

May import: :mod:`tuner.results` only (and third-party libraries). Layer 1 of
the import order pinned by ``tests/test_layers.py``.
"""
