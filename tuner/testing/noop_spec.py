"""The specs benches and tests measure the tuner's own cost with: a no-op trial, a sleep-bound one."""

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


def sleep_spec(name: str, sleep_s: float, trials: int) -> str:
    """A spec text whose every trial holds its slot ``sleep_s`` seconds with the CPU idle, as a GPU trial
    does (``FakeWorkload``, SIMULATED: it sleeps; one repeat, no warm-up); one int parameter over 1e9
    values so settings never repeat, the random sampler, ``trials`` trials."""
    return f"""
name: {name}
workload: {{class: "tuner.workloads.fake:FakeWorkload", timeout_s: {int(sleep_s * 4 + 60)}}}
parameters:
  x: {{type: int, low: 0, high: 1000000000}}
derived:
  sleep_s: "{float(sleep_s)}"
objectives:
  - {{metric: latency_p50_s, direction: minimize}}
measurement: {{warmup: 0, min_repeats: 1, max_repeats: 1}}
budget: {{trials: {trials}}}
sampler: {{name: random}}
"""
