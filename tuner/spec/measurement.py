"""How each trial of a study is measured and when the study stops: the spec's ``measurement`` and ``budget``
blocks (fields of :class:`~tuner.spec.models.StudySpec`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MeasurementSpec(_Strict):
    """Latency measurement: warmup calls, adaptive repeats until CV <= cv_target."""

    warmup: int = Field(default=1, ge=0)
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

    @model_validator(mode="after")
    def _check(self) -> "MeasurementSpec":
        if self.min_repeats > self.max_repeats:
            raise ValueError(f"min_repeats must be <= max_repeats ({self.min_repeats} > {self.max_repeats})")
        if 0 < self.memory_sample_hz < 50:
            raise ValueError(f"memory_sample_hz must be >= 50 to catch short peaks, or 0 for no sampler "
                             f"(got {self.memory_sample_hz:g})")
        return self


class BudgetSpec(_Strict):
    """When the study stops: after ``trials`` measured trials, ``wall_time_s`` of this invocation and/or
    ``device_hours`` (device-hours the study's runs held, every host: :mod:`tuner.storage.cost`)."""

    trials: int | None = Field(default=None, ge=1)
    wall_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    device_hours: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _check(self) -> "BudgetSpec":
        if self.trials is None and self.wall_time_s is None and self.device_hours is None:
            raise ValueError("a budget needs trials, wall_time_s and/or device_hours")
        return self
