"""The spec of the no-op workload that benches and tests measure the tuner's own cost with."""

from __future__ import annotations


def noop_spec(name: str = "noop", trials: int = 30, timeout_s: int = 60) -> str:
    """A spec text: ``NoOpWorkload`` (SIMULATED: no work), one int parameter, the random sampler,
    one untimed-warmup-free repeat per trial, ``trials`` trials."""
    return f"""
name: {name}
workload: {{class: "tuner.workloads.fake:NoOpWorkload", timeout_s: {timeout_s}}}
parameters:
  x: {{type: int, low: 0, high: 1000000000}}
objectives:
  - {{metric: latency_p50_s, direction: minimize}}
measurement: {{warmup: 0, min_repeats: 1, max_repeats: 1}}
budget: {{trials: {trials}}}
sampler: {{name: random}}
"""
