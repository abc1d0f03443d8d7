"""What a worker is asked to do for one trial: the :class:`~tuner.runner.base.TrialRequest` the loop builds.

The setting and its inputs, the measurement (the spec's, with a resume's overrides), the timeout (by role,
from the finished references), where the trial's files go, and how its quality is compared
(:class:`~tuner.study.shapes.Comparison`: the spec's reference, a shape's, or itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.runner.base import TrialRequest
from tuner.runner.scoring import scores_off_device
from tuner.search.guards import measurement_settings, trial_timeout_s

SCORING_DIR = "scoring"
"""Under the study's directory: the outputs of trials whose quality a scorer still owes (one file each, deleted
once scored; :mod:`tuner.runner.scoring`)."""

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from tuner.search.dominance import RepeatLimits
    from tuner.spec.candidate import Candidate
    from tuner.spec.models import StudySpec
    from tuner.study.reference import ReferenceHandOff
    from tuner.study.shapes import Comparison
    from tuner.study.snapshot import StudySnapshot


def trial_request(
    study_name: str,
    spec: StudySpec,
    number: int,
    candidate: Candidate,
    role: str,
    device: str,
    study_dir: Path,
    stored: Mapping[str, Any],
    references: Sequence[FrozenTrial],
    quality_metrics: list[str],
    comparison: Comparison,
    input_fields: Mapping[str, Any],
    limits: RepeatLimits | None = None,
) -> TrialRequest:
    """The request for trial ``number`` of ``role`` running ``candidate`` on ``device``; ``stored``: the study's
    attributes (a resume's overrides of the timeout and the measurement); ``references``: the finished
    references (the timeout of a search trial follows theirs); files under ``study_dir/trial_<number>``;
    ``input_fields``: the spec's inputs as a request carries them (:func:`tuner.spec.quality.cases.request_input_fields`);
    ``limits``: where its repeats may stop early (:class:`tuner.search.dominance.RepeatLimits`; None: nowhere).
    A search trial with quality to compare is scored off the device when ``measurement.score_off_device`` says so
    on ``device`` (:func:`tuner.runner.scoring.scores_off_device`): its outputs go to :data:`SCORING_DIR`."""
    measurement = measurement_settings(spec, stored)
    off_device = (
        bool(quality_metrics)
        and not comparison.compare_with_self
        and comparison.reference_output is not None
        and scores_off_device(measurement.get("score_off_device", False), device)
    )
    return TrialRequest(
        study_name=study_name,
        trial_number=number,
        workload_class=spec.workload.target,
        settings=candidate.settings,
        workload_options=spec.workload.options,
        **input_fields,
        seed=spec.seed,
        device=device,
        measurement=measurement,
        timeout_s=trial_timeout_s(spec, role, stored, references, len(input_fields.get("input_sets") or ()) or 1),
        workdir=str(study_dir / f"trial_{number:05d}"),
        quality_metrics=quality_metrics,
        reference_output=comparison.reference_output,
        save_output=comparison.save_output,
        compare_with_self=comparison.compare_with_self,
        reference_settings=comparison.reference_settings,
        reference_missing=comparison.reference_missing,
        resize_to_reference=comparison.resize_to_reference,
        record_env=list(spec.record_env),
        cost=spec.cost.model_dump() if spec.cost is not None else {},
        latency_ceiling_s=limits.ceiling_s if limits is not None else None,
        latency_thresholds_s=list(limits.thresholds_s) if limits is not None else [],
        score_outputs=str(study_dir / SCORING_DIR / f"trial_{number:05d}.npz") if off_device else None,
    )


class TrialRequests:
    """The requests one coordinator builds for ``study`` of ``spec`` on ``device``: the spec's quality metrics
    and inputs worked out once, the reference's output handed over through ``handoff`` (fetched once from
    another host if need be), the finished references read from ``snapshot``."""

    def __init__(
        self,
        study: optuna.Study,
        spec: StudySpec,
        device: str,
        study_dir: Path,
        handoff: ReferenceHandOff,
        snapshot: StudySnapshot,
    ) -> None:
        from tuner.spec.extras import quality_metric_installed
        from tuner.spec.metrics import trial_quality_metrics
        from tuner.spec.quality.cases import request_input_fields

        self.study, self.spec, self.device, self.study_dir = study, spec, device, study_dir
        self._handoff, self._snapshot = handoff, snapshot
        self.quality_metrics = trial_quality_metrics(
            spec.measured_metrics, {*spec.parameters, *spec.derived}, quality_metric_installed
        )
        self._input_fields = request_input_fields(spec, spec.used_metrics)

    def reference_output(self, stored: Mapping[str, Any]) -> str | None:
        """A verified local copy of the reference's output (fetched once from another host if need be);
        ``stored``: the study's attributes."""
        from tuner.storage import attributes as names

        if self._handoff.path is not None:
            return self._handoff.path
        references = sorted(
            self._snapshot.references + [t for t in self._snapshot.unfinished if names.role_of(t) == names.REFERENCE],
            key=lambda t: t.number,
        )
        return self._handoff.output(references, stored)

    def build(
        self,
        trial: optuna.Trial,
        candidate: Candidate,
        role: str,
        comparison: Comparison | None,
        limits: RepeatLimits | None,
    ) -> TrialRequest:
        """The request of ``trial`` (``role``, ``candidate``): compared as ``comparison`` says (a shape's
        reference; None or the spec's reference: the study's reference output, or itself for the reference);
        ``limits``: where its repeats may stop early."""
        from tuner.spec.quality.reference_shape import resized_comparison
        from tuner.storage import attributes as names
        from tuner.study.reference import reference_settings
        from tuner.study.shapes import Comparison

        stored = names.attributes_of(self.study)  # the resume's overrides of the timeout and the measurement
        if comparison is None or (comparison.compared_with or {}).get("trial") == "reference":
            reference = role == names.REFERENCE  # compared with the spec's reference (or it is the reference)
            comparison = Comparison(
                str(self.study_dir / "reference_output.npz") if reference else None,
                reference,
                None if reference else self.reference_output(stored),
                reference_settings(self.spec),
                resize_to_reference=resized_comparison(self.spec, candidate.params, self.spec.reference or {}),
            )
        return trial_request(
            self.study.study_name,
            self.spec,
            trial.number,
            candidate,
            role,
            self.device,
            self.study_dir,
            stored,
            self._snapshot.references,
            self.quality_metrics,
            comparison,
            self._input_fields,
            limits,
        )
