"""A reference per output shape: the spec's ``reference_shape`` block and what it says of a setting.

A diffusion model given another frame count or resolution generates other content (other latent noise,
other motion), so a quality metric that compares a 9-frame video with the first 9 frames of a 17-frame
reference compares two different videos. The spec says which parameters change what is generated::

    reference_shape:
      per: [num_frames, height, width]   # each value of these gets its own reference
      same_content: []                   # these only resize the same scene: compared resized
      same_shape: [infer_frames]         # these change how it is generated, not its frame count or size

A trial is then compared with the reference setting *at the trial's shape*: every reference value, the
``per`` parameters taken from the trial (:func:`reference_at`). The default reference is the one at the
reference's own shape; another shape's reference is measured once, when a trial first needs it. A
``same_content`` parameter keeps the resized comparison with the reference (a talking head at two
resolutions driven by the same image and audio shows the same scene) -- a choice the spec writes, never a
default.

Pure functions of the spec; no storage, no runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class ReferenceShapeSpec(BaseModel):
    """``per``: parameters whose value changes what is generated (a reference per value combination);
    ``same_content``: parameters that only change the size of the same scene (compared resized);
    ``same_shape``: parameters that look like shape parameters but leave the output's frame count and size as
    they are (an avatar's clip length when the video covers the audio): compared frame by frame, as any
    parameter; naming them only silences :func:`shape_warning` (a trial whose output does differ in shape
    still gets its frame-by-frame metrics unavailable, with the reason)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per: list[str] = Field(default_factory=list)
    same_content: list[str] = Field(default_factory=list)
    same_shape: list[str] = Field(default_factory=list)


class SpecWithReference(Protocol):
    """What these functions read of a :class:`~tuner.spec.models.StudySpec` (which validates through them)."""

    @property
    def parameters(self) -> Mapping[str, Any]: ...

    @property
    def reference(self) -> dict[str, Any] | None: ...

    @property
    def reference_shape(self) -> ReferenceShapeSpec | None: ...


@dataclass(frozen=True)
class ShapeReference:
    """The reference a setting is compared with: ``shape`` (the ``per`` parameters' values, in the spec's
    order), the reference's ``params`` at that shape, and whether that is the spec's own reference."""

    shape: dict[str, Any]
    params: dict[str, Any]
    default: bool

    @property
    def label(self) -> str:
        """``num_frames=5, height=48`` (empty for a spec without ``per``)."""
        return ", ".join(f"{name}={value}" for name, value in self.shape.items())


def check_reference_shape(spec: SpecWithReference) -> str | None:
    """Why the spec's ``reference_shape`` block is wrong (``key: problem``), or None when fine (or absent)."""
    block = spec.reference_shape
    if block is None:
        return None
    for key in ("per", "same_content", "same_shape"):
        names = getattr(block, key)
        unknown = [name for name in names if name not in spec.parameters]
        if unknown:
            return f"reference_shape.{key}: {unknown} are not parameters (known: {sorted(spec.parameters)})"
        if len(set(names)) != len(names):
            return f"reference_shape.{key}: a parameter is named twice: {names}"
    for first, second in (("per", "same_content"), ("per", "same_shape"), ("same_content", "same_shape")):
        both = sorted(set(getattr(block, first)) & set(getattr(block, second)))
        if both:
            return f"reference_shape: {both} named in both {first} and {second} (a parameter is one or the other)"
    if block.per and spec.reference is None:
        return "reference_shape.per: a reference per shape needs a reference setting (reference:)"
    return None


def resized_comparison(spec: SpecWithReference, params: Mapping[str, Any], reference: Mapping[str, Any]) -> bool:
    """Whether a setting's frames are compared resized with its reference's: it differs from ``reference`` in a
    ``same_content`` parameter (the same scene at another size). Never without that declaration."""
    same = spec.reference_shape.same_content if spec.reference_shape is not None else []
    return any(params.get(name) != reference.get(name) for name in same)


def reference_at(spec: SpecWithReference, params: Mapping[str, Any]) -> ShapeReference | None:
    """The reference that a setting with ``params`` is compared with; None for a spec without a reference.

    Without ``reference_shape.per`` it is always the spec's reference (``default``). With it, the ``per``
    parameters come from ``params`` and every other value from the reference; ``default`` when that is
    the reference's own shape."""
    if spec.reference is None:
        return None
    per = spec.reference_shape.per if spec.reference_shape is not None else []
    shape = {name: params.get(name, spec.reference.get(name)) for name in per}
    at_shape = {**spec.reference, **shape}
    return ShapeReference(shape, at_shape, all(spec.reference.get(name) == shape[name] for name in per))


SHAPE_PARAMETER_NAMES = frozenset(
    {
        "num_frames",
        "frame_num",
        "frames",
        "height",
        "width",
        "resolution",
        "size",
        "num_clip",
        "infer_frames",
        "max_frames",
        "fps",
        "video_fps",
    }
)
"""Parameter names that usually change the shape of a generated video (the diffusers pipelines' ``num_frames`` /
``height`` / ``width``, Wan's ``frame_num`` / ``size``, an avatar's clips and frames): :func:`shape_warning`."""

REFERENCE_VIDEO_METRICS = frozenset(
    {
        "psnr_db",
        "ssim",
        "psnr_mouth_db",
        "ssim_mouth",
        "stlpips_alex",
        "lpips_alex",
        "flicker_ratio",
        "warping_error_ratio",
        "seam_score_ratio",
    }
)
"""The metrics that compare a trial's video frame by frame with the reference's."""


def _varies(parameter: Any) -> bool:
    """Whether a spec parameter can take more than one value."""
    choices = getattr(parameter, "choices", None)
    if choices is not None:
        return len(choices) > 1
    low, high = getattr(parameter, "low", None), getattr(parameter, "high", None)
    return low is None or high is None or low != high


def shape_warning(spec: SpecWithReference, measured_metrics: set[str]) -> str | None:
    """A warning for a spec whose searched parameters look like they change a video's shape (by name:
    :data:`SHAPE_PARAMETER_NAMES`) while neither ``reference_shape.per`` nor ``same_content`` names them and a
    frame-by-frame metric is asked: those trials' metrics will be unavailable, never truncated or resized."""
    if spec.reference is None or not measured_metrics & REFERENCE_VIDEO_METRICS:
        return None
    block = spec.reference_shape
    declared = set(block.per) | set(block.same_content) | set(block.same_shape) if block is not None else set()
    suspects = [
        name
        for name, parameter in spec.parameters.items()
        if name in SHAPE_PARAMETER_NAMES and name not in declared and _varies(parameter)
    ]
    if not suspects:
        return None
    return (
        f"reference_shape: {suspects} usually change the generated video's frame count or size, and no "
        "reference_shape list names them (per: a reference per value; same_content: the same scene, compared "
        "resized; same_shape: the output keeps its frame count and size): a trial whose output has another "
        "shape than the reference's gets its frame-by-frame metrics unavailable, never compared truncated or "
        "resized"
    )
