"""Workload adapters: run a user's program (``command``), Python model (``python``) or service (``http``).

Each adapter is a :class:`~tuner.workloads.base.Workload` built by the worker from
the spec's adapter block (:mod:`tuner.adapter_spec`), so timeouts, outcomes,
memory monitors, repeats and quality evaluators apply to it as to any workload.
:mod:`tuner.adapters.template` renders the templates; it is shared with
:mod:`tuner.invocation`, so an export renders exactly what the runner ran.
"""
