"""What an output costs: the spec's ``cost`` block, the device-hour price a trial is charged, and the metrics.

A team compares settings by what one output costs, not only by seconds: a setting twice as fast on a GPU
twice as dear is no better. The spec (or the environment) gives a price per device-hour::

    cost:
      gpu_hour_usd: 3.79                      # one price, or a table by GPU type (matched in the GPU's name):
      # gpu_hour_usd: {H200: 3.79, H100: 2.49, A100: 1.29}
      cpu_hour_usd: 0.20                      # a CPU trial's slot-hour (a CPU slot counts as one device)

``TUNER_GPU_HOUR_USD`` / ``TUNER_CPU_HOUR_USD`` replace the spec's price for a run (a number). From a trial's
measured throughput (``throughput_items_per_s``: items served per second of one call at a time; an item is
one video, one answer) and the devices its slot holds, the worker reports:

* ``outputs_per_device_hour`` = throughput x 3600 / devices (maximize);
* ``cost_per_output_usd`` = price / outputs_per_device_hour (minimize);
* ``cost_per_1k_outputs_usd`` = 1000 x cost_per_output_usd (minimize; answers are priced per thousand).

Without a price the two costs are unavailable with the reason (``outputs_per_device_hour`` stands). This is
the throughput of calls measured one at a time; sustained load at many concurrent requests is another
measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tuner.results import Metric

GPU_PRICE_ENV = "TUNER_GPU_HOUR_USD"
CPU_PRICE_ENV = "TUNER_CPU_HOUR_USD"
SECONDS_PER_HOUR = 3600.0
PRICE_METRICS = ("outputs_per_device_hour", "cost_per_output_usd", "cost_per_1k_outputs_usd")


class CostSpec(BaseModel):
    """``gpu_hour_usd``: USD per GPU-hour, or GPU type (a part of its name, case-insensitive) -> USD;
    ``cpu_hour_usd``: USD per CPU slot-hour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_hour_usd: float | dict[str, float] | None = Field(default=None)
    cpu_hour_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    def check(self) -> str | None:
        """Why the block is wrong (``cost.<key>: problem``), or None."""
        prices = self.gpu_hour_usd if isinstance(self.gpu_hour_usd, dict) else {"": self.gpu_hour_usd}
        for key, price in prices.items():
            if price is not None and not (math.isfinite(price) and price > 0):
                where = f"cost.gpu_hour_usd.{key}" if key else "cost.gpu_hour_usd"
                return f"{where}: a price is a positive number of USD, got {price}"
        if isinstance(self.gpu_hour_usd, dict) and not self.gpu_hour_usd:
            return "cost.gpu_hour_usd: an empty table (give GPU type: price pairs, or one price)"
        return None


def device_hour_price(
    cost: Mapping[str, Any], device: str, gpu_name: str | None, environ: Mapping[str, str]
) -> tuple[float | None, str | None]:
    """The USD per device-hour a trial on ``device`` (``cuda`` / ``cpu``; ``gpu_name``: the GPU's name) is
    charged, from the environment's override or ``cost`` (a :class:`CostSpec` as a dict); else None and why."""
    env_name, key = (GPU_PRICE_ENV, "gpu_hour_usd") if device == "cuda" else (CPU_PRICE_ENV, "cpu_hour_usd")
    override = environ.get(env_name, "").strip()
    if override:
        try:
            price = float(override)
        except ValueError:
            price = math.nan
        if not (math.isfinite(price) and price > 0):
            return None, f"{env_name}={override!r} is not a positive number of USD"
        return price, None
    given = cost.get(key)
    if given is None:
        return None, f"no price for a {device} trial: give cost.{key} in the spec or {env_name}"
    if isinstance(given, Mapping):
        name = (gpu_name or "").lower()
        matches = sorted((k for k in given if k.lower() in name), key=len, reverse=True)
        if not matches:
            return None, f"cost.{key} has no price for GPU {gpu_name!r} (its types: {', '.join(given)})"
        return float(given[matches[0]]), None
    return float(given), None


def price_metrics(
    throughput_items_per_s: float | None, price: float | None, why_no_price: str | None, devices: int
) -> list[Metric]:
    """The :data:`PRICE_METRICS` of a trial (see the module docstring); unavailable with the reason when the
    throughput or the price is missing."""
    if throughput_items_per_s is None or not throughput_items_per_s > 0:
        why = "no measured throughput"
        return [
            Metric.unavailable("outputs_per_device_hour", "1/h", "maximize", why),
            Metric.unavailable("cost_per_output_usd", "USD", "minimize", why),
            Metric.unavailable("cost_per_1k_outputs_usd", "USD", "minimize", why),
        ]
    per_hour = throughput_items_per_s * SECONDS_PER_HOUR / max(1, devices)
    rate = Metric("outputs_per_device_hour", per_hour, "1/h", "maximize")
    if price is None:
        why = why_no_price or "no price"
        return [
            rate,
            Metric.unavailable("cost_per_output_usd", "USD", "minimize", why),
            Metric.unavailable("cost_per_1k_outputs_usd", "USD", "minimize", why),
        ]
    return [
        rate,
        Metric("cost_per_output_usd", price / per_hour, "USD", "minimize"),
        Metric("cost_per_1k_outputs_usd", 1000.0 * price / per_hour, "USD", "minimize"),
    ]
