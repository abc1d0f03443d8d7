"""The ``warnings`` of an exported ``tuner.config/v1`` document: why some of its numbers are not facts.

Noisy numbers are not facts: :func:`noise_warnings` says when the shipped trial or the
baseline under the speed-up is noisy (latency CV above :data:`tuner.storage.records.NOISY_CV`)
or was cut short by the time limit, with the resulting uncertainty (one standard error of the
medians, a fraction). :func:`random_weights_warnings` says when the measuring trial ran a
network with random weights, so its quality figures are not output quality.
:func:`tuner.ship.export.build_config` writes both into the document's ``warnings``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tuner.storage.attributes import RUNTIME
from tuner.storage.records import NOISY_CV, TrialRecord

__all__ = ["noise_warnings", "random_weights_warnings"]


def _relative_se(record: TrialRecord) -> float:
    """Relative standard error of the record's median latency: sqrt(pi/2) x CV / sqrt(repeats)."""
    repeats = record.metric_value("repeats") or 1.0
    return math.sqrt(math.pi / 2) * (record.latency_cv or 0.0) / math.sqrt(max(1.0, repeats))


def noise_warnings(record: TrialRecord, base: TrialRecord | None, speedup: float | None) -> list[str]:
    """Why numbers of an export of ``record`` (against ``base``, at ``speedup``) are not facts; [] when none.

    One warning when the shipped trial is noisy, one when the baseline is; each names the
    CV, the threshold and the resulting uncertainty (one standard error of the medians).
    One more for each of them the time limit cut short (fewer repeats than the spec asks).
    """
    warnings: list[str] = []
    ratio_se = math.hypot(_relative_se(record), _relative_se(base)) if base is not None else None
    against = (
        f"; the speed-up {speedup:.3g}x over the baseline is uncertain by about ±{ratio_se:.0%}"
        if speedup is not None and ratio_se is not None
        else ""
    )
    for what, trial in (("the shipped trial", record), ("the baseline", base)):
        if trial is None or not trial.noisy:
            continue
        cv = f"{trial.latency_cv:.2g}" if trial.latency_cv is not None else "unknown"
        p50 = trial.metric_value("latency_p50_s")
        median = f"its median latency {p50:.4g} s" if p50 is not None else "its latency"
        warnings.append(
            f"{what} (trial {trial.number}) is noisy: latency CV {cv} > {NOISY_CV:g}, so {median} is "
            f"uncertain by about ±{_relative_se(trial):.0%}{against}; re-measure it (tuner check) "
            f"on a quiet machine before relying on it"
        )
    for what, trial in (("the shipped trial", record), ("the baseline", base)):
        if trial is not None and trial.cut_short:
            warnings.append(
                f"{what} (trial {trial.number}) was measured with fewer repeats than the spec asks: "
                f"{trial.cut_short}; re-measure it (tuner check) or give the study a larger "
                f"workload.timeout_s"
            )
    return warnings


def random_weights_warnings(trial_attrs: Mapping[str, Any]) -> list[str]:
    """One warning when the measuring trial ran a network with random weights (``runtime.weights_identity``
    ``random:...``): its speed and memory are the architecture's, its quality figures are not."""
    runtime = trial_attrs.get(RUNTIME)
    identity = runtime.get("weights_identity") if isinstance(runtime, Mapping) else None
    if not (isinstance(identity, str) and identity.startswith("random:")):
        return []
    return [
        f"measured with random weights ({identity}): latency and memory are the architecture's, but the "
        f"quality figures are agreement with the reference setting of an untrained network, not output "
        f"quality; re-measure with the real weights before shipping"
    ]
