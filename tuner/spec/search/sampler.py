"""The spec's ``sampler`` block: which Optuna sampler proposes settings, and whether proposals the current front
surely beats are skipped::

    sampler:
      name: tpe                        # tpe, nsga2, gp, random, grid
      options: {n_startup_trials: 8}   # to the sampler's constructor
      skip_dominated: {audit_share: 0.1}   # the default; null turns it off
      reload_lookahead: 3              # default 3 (1 with predicted_gain); 1 runs proposals in the order asked
      predicted_gain: {after: 10, start: spread}   # the default; null: the sampler alone proposes

``skip_dominated`` (on by default): a search proposal whose predicted best case is dominated by the current
front is recorded ``SKIPPED_PREDICTED_DOMINATED`` and not run; a seeded ``audit_share`` of them runs anyway to
measure how often the skip was wrong; a trial that runs stops repeating once its calls prove it slower than a
front trial it cannot beat elsewhere (:mod:`tuner.search.dominance`). The default by evidence: on every replayed
table it reached 95 % of the front's hypervolume for fewer device-seconds than the plain default, with no
hypervolume lost at the end and no audited skip wrong (``bench/cost_aware.py``, docs/benchmarks.md).

``reload_lookahead`` (a warm python workload with ``reload_on`` only): up to that many proposals are asked ahead
and the one the worker's loaded model serves starts first, so a reload_on value (precision, offload, compile)
flips less often; every proposal asked still runs (:mod:`tuner.study.load_order`). Unset, it is
:data:`DEFAULT_RELOAD_LOOKAHEAD`, or 1 with ``predicted_gain`` on: a proposal chosen by predicted gain is best run
at once (asked ahead it waits while trials it did not see are told; on the replayed tables it reached the front
later that way, docs/benchmarks.md).

``predicted_gain`` (on by default; not with ``grid``): once ``after`` trials are measured and feasible, each
proposal is the setting whose predicted objective values add most hypervolume to the current front per predicted
second, and whenever no setting is predicted to add anything the named sampler proposes. Before that, ``start``:
``spread`` (the default) proposes, once the latency is predicted, the setting farthest from every one asked so
far for its predicted device-seconds (a space-filling start that prefers cheap settings); ``sampler``: the named
sampler proposes (:mod:`tuner.search.predicted_gain`). The default by evidence: ``bench/cost_aware.py``,
docs/benchmarks.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SamplerName = Literal["tpe", "nsga2", "gp", "random", "grid"]
DEFAULT_SAMPLER: SamplerName = "tpe"
DEFAULT_RELOAD_LOOKAHEAD = 3
"""Proposals asked ahead at most, by default, to start first one the loaded model serves (1: in order)."""
DEFAULT_PREDICTED_GAIN_AFTER = 10
"""Measured feasible trials before proposals are chosen by predicted gain, by default."""
DEFAULT_AUDIT_SHARE = 0.1
"""The share of predicted-dominated proposals that run anyway, by default (to count wrong skips)."""


class SkipDominatedSpec(BaseModel):
    """Skip proposals predicted dominated (:mod:`tuner.search.dominance`); ``audit_share`` of them (a fraction,
    0-1) run anyway and say how often a skip was wrong."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    audit_share: float = Field(default=DEFAULT_AUDIT_SHARE, ge=0.0, le=1.0)


class PredictedGainSpec(BaseModel):
    """Propose by predicted hypervolume gain per second (:mod:`tuner.search.predicted_gain`) once ``after``
    trials are measured and feasible (the predictions need that many to fit); before, ``start`` says who
    proposes (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after: int = Field(default=DEFAULT_PREDICTED_GAIN_AFTER, ge=3, le=1000)
    start: Literal["spread", "sampler"] = "spread"


class SamplerSpec(BaseModel):
    """Optuna sampler by name; ``options`` go to its constructor; ``skip_dominated`` (None: off),
    ``reload_lookahead`` (proposals, 1: in order) and ``predicted_gain`` (None: off) see above."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SamplerName = DEFAULT_SAMPLER
    options: dict[str, Any] = Field(default_factory=dict)
    skip_dominated: SkipDominatedSpec | None = Field(default_factory=SkipDominatedSpec)
    reload_lookahead: int | None = Field(default=None, ge=1, le=16)
    predicted_gain: PredictedGainSpec | None = Field(default_factory=PredictedGainSpec)

    def summary(self, name: SamplerName | None = None) -> str:
        """One phrase for a run's and a study's header: what proposes and what is skipped; ``name`` (``--sampler``)
        stands for the spec's. E.g. ``tpe, a spread start, then by predicted gain per device-second from 10
        measured trials; proposals the front surely beats skipped (10% audited)``; ``random alone`` without
        predicted gain (never around ``grid``)."""
        chosen = name or self.name
        gain = None if chosen == "grid" else self.predicted_gain
        if gain is None:
            line = f"{chosen} alone"
        else:
            start = ", a spread start" if gain.start == "spread" else ""
            line = f"{chosen}{start}, then by predicted gain per device-second from {gain.after} measured trials"
        if self.skip_dominated is not None:
            line += f"; proposals the front surely beats skipped ({self.skip_dominated.audit_share:.0%} audited)"
        return line

    def lookahead(self) -> int:
        """Proposals asked ahead at most: ``reload_lookahead`` when set, else 1 with ``predicted_gain`` on and
        :data:`DEFAULT_RELOAD_LOOKAHEAD` without."""
        if self.reload_lookahead is not None:
            return self.reload_lookahead
        return 1 if self.predicted_gain is not None else DEFAULT_RELOAD_LOOKAHEAD
