"""The spec's ``sampler`` block: which Optuna sampler proposes settings, and whether proposals the current front
surely beats are skipped::

    sampler:
      name: tpe                        # tpe, nsga2, gp, random, grid
      options: {n_startup_trials: 8}   # to the sampler's constructor
      skip_dominated: {audit_share: 0.1}   # the default; null turns it off
      reload_lookahead: 3              # the default; 1 runs proposals in the order asked

``skip_dominated`` (on by default): a search proposal whose predicted best case is dominated by the current
front is recorded ``SKIPPED_PREDICTED_DOMINATED`` and not run; a seeded ``audit_share`` of them runs anyway to
measure how often the skip was wrong; a trial that runs stops repeating once its calls prove it slower than a
front trial it cannot beat elsewhere (:mod:`tuner.search.dominance`). The default by evidence: on every replayed
table it reached 95 % of the front's hypervolume for fewer device-seconds than the plain default, with no
hypervolume lost at the end and no audited skip wrong (``bench/cost_aware.py``, docs/benchmarks.md).

``reload_lookahead`` (a warm python workload with ``reload_on`` only): up to that many proposals are asked ahead
and the one the worker's loaded model serves starts first, so a reload_on value (precision, offload, compile)
flips less often; every proposal asked still runs (:mod:`tuner.study.load_order`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SamplerName = Literal["tpe", "nsga2", "gp", "random", "grid"]
DEFAULT_SAMPLER: SamplerName = "tpe"
DEFAULT_RELOAD_LOOKAHEAD = 3
"""Proposals asked ahead at most, by default, to start first one the loaded model serves (1: in order)."""
DEFAULT_AUDIT_SHARE = 0.1
"""The share of predicted-dominated proposals that run anyway, by default (to count wrong skips)."""


class SkipDominatedSpec(BaseModel):
    """Skip proposals predicted dominated (:mod:`tuner.search.dominance`); ``audit_share`` of them (a fraction,
    0-1) run anyway and say how often a skip was wrong."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    audit_share: float = Field(default=DEFAULT_AUDIT_SHARE, ge=0.0, le=1.0)


class SamplerSpec(BaseModel):
    """Optuna sampler by name; ``options`` go to its constructor; ``skip_dominated`` (None: off) and
    ``reload_lookahead`` (proposals, 1: in order) see above."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SamplerName = DEFAULT_SAMPLER
    options: dict[str, Any] = Field(default_factory=dict)
    skip_dominated: SkipDominatedSpec | None = Field(default_factory=SkipDominatedSpec)
    reload_lookahead: int = Field(default=DEFAULT_RELOAD_LOOKAHEAD, ge=1, le=16)
