"""What runs: the :class:`~.base.Workload` interface and the built-in models.

* :mod:`.base` -- the interface, ``RunContext``, ``WorkloadOutput``, ``InvalidSetting``;
* :mod:`.avatar_dit` -- a trained talking-head video DiT; :mod:`.avqa` -- a trained AV-QA model;
* :mod:`.params`, :mod:`.training` -- helpers shared by the built-in models;
* :mod:`.fake` -- SIMULATED workloads for tests.

May import: :mod:`evaluators` (model cards measure with them), :mod:`tuner.spec`
and the foundation modules; never the runner or anything above it.
"""
