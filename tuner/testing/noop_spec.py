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


CASES = """cases:
  - {name: calm}
  - {name: busy, noise_gain: 1.0}
  - {name: fragile, cliff_low: 5, cliff_high: 7, cliff_noise: 14}
"""
"""Three inputs of the fake workload's video: two alike, ``fragile`` much noisier for ``noise`` in 5..7 (a
SIMULATED quality cliff)."""


def cases_spec(quality: str = "psnr_db", worker: str | None = None, measurement: str = "") -> str:
    """A spec text of three inputs (:data:`CASES`; ``FakeWorkload``, SIMULATED) over four ``noise`` settings (a
    grid, four trials): ``count_cost_ms`` (a deterministic stand-in for latency) against ``quality``;
    ``worker``: the workload block's ``worker`` (None: not set); ``measurement``: more keys of the measurement
    block (e.g. ``", score_off_device: true"``)."""
    runs_in = f", worker: {worker}" if worker is not None else ""
    return (
        f"""
name: fake_cases
workload: {{class: "tuner.workloads.fake:FakeWorkload", timeout_s: 30{runs_in}}}
inputs: {{note: simulated}}
"""
        + CASES
        + f"""cliff_margins: {{psnr_db: 3}}
parameters:
  noise: {{type: categorical, choices: [0, 2, 6, 10]}}
derived:
  sleep_s: "0.001 * (11 - noise)"
objectives:
  - {{metric: count_cost_ms, direction: minimize}}
  - {{metric: {quality}, direction: maximize}}
report: [psnr_db, psnr_db:worst, psnr_db:p90]
reference: {{noise: 0}}
sampler: {{name: grid}}
measurement: {{warmup: 0, min_repeats: 1, max_repeats: 1{measurement}}}
budget: {{trials: 4}}
"""
    )
