"""Replay: studies run against exhaustive tables of measured settings instead of a workload.

A table (``bench/tables/<space>.<hardware>.csv``, written by ``bench/tables/build_tables.py``)
holds what every setting of a search space measured on one host. Replaying a study against it
runs the real coordinator and samplers while every "run" is a lookup (simulated runs), so the
search efficiency of samplers can be measured in seconds instead of hours.

* :mod:`.table` -- :class:`~.table.MeasuredTable` (CSV + sidecar, typed cells, lookup),
  declared hardware types and memory caps, the exhaustive front, the replay spec;
* :mod:`.runner` -- :class:`~.runner.ReplayRunner`, a Runner that returns the table's results;
* :mod:`.hypervolume` -- normalised two-objective hypervolume and its curve over a study;
* :mod:`.baselines` -- the benchmark's reference samplers: a hand sweep and a hill climb;
* :mod:`.methods` -- a benchmark method (sampler + coordinator options + setup) and one replay;
* :mod:`.report` -- trials-to-fraction statistics, tables, plots and raw curves.

May import: :mod:`tuner.study`, :mod:`tuner.search`, :mod:`tuner.storage`, :mod:`tuner.runner`, :mod:`tuner.spec` and the foundation
modules. Only ``bench/search_efficiency.py`` (and tests) import it.
"""
