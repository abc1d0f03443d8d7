"""The spec's ``sampler`` block: which Optuna sampler proposes settings, and whether proposals the current front
surely beats are skipped::

    sampler:
      name: tpe                        # tpe, nsga2, gp, random, grid
      options: {n_startup_trials: 8}   # to the sampler's constructor
      skip_dominated: {audit_share: 0.1}

``skip_dominated`` (off unless given): a search proposal whose predicted best case is dominated by the current
front is recorded ``SKIPPED_PREDICTED_DOMINATED`` and not run; a seeded ``audit_share`` of them runs anyway to
measure how often the skip was wrong (:mod:`tuner.search.dominance`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SamplerName = Literal["tpe", "nsga2", "gp", "random", "grid"]
DEFAULT_SAMPLER: SamplerName = "tpe"


class SkipDominatedSpec(BaseModel):
    """Skip proposals predicted dominated (:mod:`tuner.search.dominance`); ``audit_share`` of them (a fraction,
    0-1) run anyway and say how often a skip was wrong."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    audit_share: float = Field(default=0.1, ge=0.0, le=1.0)


class SamplerSpec(BaseModel):
    """Optuna sampler by name; ``options`` go to its constructor; ``skip_dominated`` (None: off) see above."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SamplerName = DEFAULT_SAMPLER
    options: dict[str, Any] = Field(default_factory=dict)
    skip_dominated: SkipDominatedSpec | None = None
