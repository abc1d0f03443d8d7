"""Test support shipped with the package: conformance suites every ``Runner`` and
``Workload`` implementation must pass, and a real ``mlflow server`` fixture.

May import anything; nothing in the product imports it.
"""
