"""Test support shipped with the package: conformance suites every ``Runner`` and
``Workload`` implementation must pass, :mod:`.inline_runner` (the fake ``Runner``: the worker's code in
the calling process), and a real ``mlflow server`` fixture.

May import anything; nothing in the product imports it.
"""
