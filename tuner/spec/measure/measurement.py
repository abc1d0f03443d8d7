"""How each trial of a study is measured and when the study stops: the spec's ``measurement`` and ``budget``
blocks (fields of :class:`~tuner.spec.models.StudySpec`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SustainedSpec(_Strict):
    """Sustained load after the measured repeats (:mod:`tuner.evaluators.runtime.sustained`): each level of
    ``streams`` concurrent streams driven for ``duration_s`` seconds; the knee is where one more level raises
    throughput by less than ``knee_gain`` (a fraction)."""

    streams: list[int] = Field(default_factory=lambda: [1], min_length=1, max_length=16)
    duration_s: float = Field(default=10.0, gt=0, le=3600, allow_inf_nan=False)
    knee_gain: float = Field(default=0.10, gt=0, le=10, allow_inf_nan=False)

    @field_validator("streams", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _ascending(self) -> SustainedSpec:
        if any(n < 1 or n > 256 for n in self.streams):
            raise ValueError(f"sustained.streams must lie in 1..256 (got {self.streams})")
        if list(self.streams) != sorted(set(self.streams)):
            raise ValueError(f"sustained.streams must ascend without repeats (got {self.streams})")
        return self

    @property
    def total_s(self) -> float:
        """The seconds every level's window takes together (the calls in flight at each end come on top)."""
        return len(self.streams) * self.duration_s


class MeasurementSpec(_Strict):
    """Latency measurement: warmup calls, adaptive repeats until CV <= cv_target."""

    warmup: Annotated[int, Field(ge=0)] | Literal["auto"] = 1
    """Untimed calls first; ``auto``: the calls the workload says the setting needs in its process (none for one
    already warm), one where it cannot tell (:mod:`tuner.runner.measure.warmup`)."""
    min_repeats: int = Field(default=3, ge=1)
    max_repeats: int = Field(default=10, ge=1)
    cv_target: float = Field(default=0.05, gt=0, allow_inf_nan=False)
    noisy_cv: float = Field(default=0.10, gt=0, allow_inf_nan=False)
    max_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    memory_sample_hz: float = Field(default=100.0, ge=0, allow_inf_nan=False)
    """Rate of the process-tree memory sampler (RSS and NVML of the trial's processes), Hz;
    >= 50 to catch short peaks, or 0 to turn it off (allocator peaks and the RSS
    high-water mark remain; ``peak_vram_nvml_gb`` is then unavailable)."""
    bare_twin: int = Field(default=0, ge=0, le=50)
    """Bare calls timed after the measured repeats, in the same worker with the same loaded workload and no
    memory sampler (:mod:`tuner.evaluators.runtime.bare_twin`): ``bare_p50_s`` and ``twin_ratio``; 0: none."""
    score_off_device: bool | Literal["auto"] = "auto"
    """Where a trial's quality is scored (:mod:`tuner.runner.scoring`): ``true``, in a scorer process on the CPU
    while the slot's next trial runs -- the worker saves the outputs, frees the device, and the trial is told
    once its quality is scored; ``false``, in the worker, after the measured calls, while the device waits;
    ``auto`` (default): off the device on a GPU (the scorer's few CPU threads leave the device's calls alone),
    in the worker on a CPU device (there the scorer would take the cores the next trial is timed on). The
    reference is always scored in its worker (it compares with itself, and later trials wait for it)."""
    sustained: SustainedSpec | None = None
    """Sustained load at one or more stream counts after the measured repeats, under the memory sampler
    (:mod:`tuner.evaluators.runtime.sustained`); None: none. Each trial's timeout grows by twice its levels'
    seconds (:func:`tuner.search.guards.trial_timeout_s`)."""

    @model_validator(mode="after")
    def _check(self) -> MeasurementSpec:
        if self.min_repeats > self.max_repeats:
            raise ValueError(f"min_repeats must be <= max_repeats ({self.min_repeats} > {self.max_repeats})")
        if 0 < self.memory_sample_hz < 50:
            raise ValueError(
                f"memory_sample_hz must be >= 50 to catch short peaks, or 0 for no sampler "
                f"(got {self.memory_sample_hz:g})"
            )
        return self


class BudgetSpec(_Strict):
    """When the study stops: after ``trials`` measured trials, ``wall_time_s`` of this invocation and/or
    ``device_hours`` (device-hours the study's runs held, every host: :mod:`tuner.storage.cost`)."""

    trials: int | None = Field(default=None, ge=1)
    wall_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    device_hours: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _check(self) -> BudgetSpec:
        if self.trials is None and self.wall_time_s is None and self.device_hours is None:
            raise ValueError("a budget needs trials, wall_time_s and/or device_hours")
        return self
