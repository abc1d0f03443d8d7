"""Workload adapters: run a user's program (``command``), Python model (``python``) or service (``http``).

Each adapter is a :class:`~tuner.workloads.base.Workload` built by the worker from
the spec's adapter block (:mod:`tuner.spec.adapters`), so timeouts, outcomes,
memory monitors, repeats and quality evaluators apply to it as to any workload.
:mod:`tuner.adapters.template` renders the templates; it is shared with
:mod:`tuner.ship.invocation`, so an export renders exactly what the runner ran.

May import: :mod:`tuner.workloads`, :mod:`tuner.spec` and the foundation modules;
never the runner or anything above it.
"""
