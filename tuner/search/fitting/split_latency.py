"""A call's latency as its once-per-call phases plus the rest, each predicted apart (issue 38, item 2: the
call's structure where the workload reports it).

A workload that reports its cost structure (:mod:`tuner.evaluators.runtime.structure`) records per trial the
phases a call runs once -- a diffusion call's text encoding and VAE decode (``text_s``, ``decode_s``), an
AV-LLM call's encoders and prefill (``prefill_s``) -- beside its latency. What is left, ``latency - once``, is
the repeated part: ``steps x passes`` denoiser calls, or one decoding step per new token (with whatever the call
spends outside its phases). Each part is close to a product of the knobs that drive it (frames x pixels for the
encoders, steps x frames for the loop, tokens x beams for decoding), so each is log-linear on its own, while
their sum is not: one line through log(latency) must bend where one part takes over from the other.
:class:`SplitLatency` fits one :class:`~tuner.search.prediction.LogRidge` per part and predicts their sum.

:func:`split_or_plain` keeps whichever of the split and the plain model of log(latency) has the smaller held-out
(leave-one-out) error on the same runs, so a study whose phases explain little keeps the plain model; a
workload that reports no phases (a command, an HTTP service) only ever has the plain one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tuner.search.fitting.recorded_errors import rank_bounds

if TYPE_CHECKING:
    import numpy as np

ONCE_PER_CALL = ("text_s", "decode_s", "prefill_s")
"""The structure metrics (s) of phases a call runs once, not once per step or token."""
REST_FLOOR = 0.01
"""The repeated part is at least this share of the latency (the phases' medians over the timed calls may add up
to a little more than the calls' median latency)."""

Sample = tuple[list[float], float, bool]
"""(feature row, log value, from a warm start's other hardware), as :mod:`tuner.search.prediction` keeps them."""


class PartModel(Protocol):
    """What the split needs of a part's fitted model (:class:`tuner.search.prediction.LogRidge`): its predicted
    logs of many rows and its held-out residuals (log units) of the runs it was fitted on -- of the whole model
    (``loo``) and of its line alone (``line_loo``)."""

    loo: np.ndarray
    line_loo: np.ndarray
    with_prior: bool

    def centres(self, rows: np.ndarray) -> np.ndarray: ...


Model = TypeVar("Model", bound=PartModel)


def split_parts(latency: float, figures: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(once, rest)`` of a measured call (s): the sum of its :data:`ONCE_PER_CALL` phases and what is left of
    ``latency``; None when the trial recorded none of those phases."""
    once = 0.0
    for name in ONCE_PER_CALL:
        value = (figures.get(name) or {}).get("value")
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            once += float(value)
    if once <= 0.0 or not latency > 0:
        return None
    return once, max(latency - once, REST_FLOOR * latency)


class SplitLatency:
    """log(exp(once) + exp(rest)): the two parts' models (fitted on the same runs) summed. ``errors``: the held-out
    errors of the sum on those runs (log units; each part's leave-one-out prediction, summed); ``bounds``: the
    interval's low and high offsets from the centre (log units), as :class:`tuner.search.prediction.LogRidge`
    takes them from its own errors."""

    def __init__(self, once: PartModel, rest: PartModel, errors: np.ndarray, bounds: tuple[float, float]) -> None:
        self.once, self.rest, self.errors, self.bounds = once, rest, errors, bounds
        self.with_prior = once.with_prior

    def centres(self, rows: np.ndarray) -> np.ndarray:
        """The predicted log latency of many feature rows at once."""
        import numpy as np

        return np.logaddexp(self.once.centres(rows), self.rest.centres(rows))  # type: ignore[no-any-return]

    def predict(self, row: Sequence[float]) -> tuple[float, float, float]:
        """The predicted log latency and its interval's low and high logs."""
        import numpy as np

        centre = float(self.centres(np.asarray(row, dtype=float)[None, :])[0])
        return centre, centre + self.bounds[0], centre + self.bounds[1]


def split_or_plain(
    plain: Model,
    parts: tuple[PartModel, PartModel],
    logs: tuple[Sequence[float], Sequence[float], Sequence[float]],
    interval: tuple[float, float],
    floor: float,
) -> Model | SplitLatency:
    """The split model when its held-out error (mean square, log units) is below the plain model's on the same
    runs, else ``plain``. ``parts``: the once and rest models; ``logs``: the runs' log latency, once and rest, in
    the order all three models were fitted on them; ``interval``: the shares of the held-out errors (finite-sample ranks) that bound
    a prediction, at least ``floor`` (log units) either side."""
    import numpy as np

    latency, once, rest = (np.asarray(values, dtype=float) for values in logs)
    if not len(latency) == len(plain.loo) == len(parts[0].loo) == len(parts[1].loo):
        return plain
    errors = [
        latency - np.logaddexp(once - once_held_out, rest - rest_held_out)
        for once_held_out, rest_held_out in (
            (parts[0].loo, parts[1].loo),
            (parts[0].line_loo, parts[1].line_loo),
        )
    ]
    if float(np.mean(errors[0] ** 2)) >= float(np.mean(plain.loo**2)):
        return plain
    everything = np.concatenate(errors)
    return SplitLatency(parts[0], parts[1], everything, rank_bounds(everything, interval, floor))


__all__ = ["ONCE_PER_CALL", "PartModel", "Sample", "SplitLatency", "split_or_plain", "split_parts"]
