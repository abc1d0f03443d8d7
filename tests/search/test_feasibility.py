"""The monotone memory model on hand-made observations (tuner.search.feasibility)."""

from __future__ import annotations

from typing import Any

from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from tuner.search.feasibility import FeasibilityModel, Observation, observation_of, order_keys
from tuner.search.objectives import plan_constraints
from tuner.spec.loading import parse_spec

SPEC = """\
name: memory_unit
workload: {class: "tuner.workloads.fake:FakeWorkload"}
parameters:
  frames: {type: int, low: 8, high: 64, step: 8}
  size: {type: categorical, choices: ["256*256", "512*512"]}
  chunks: {type: categorical, choices: [1, 2, 4]}
  mode: {type: categorical, choices: [fast, exact]}
  offload: {type: bool}
objectives:
  - {metric: latency_p50_s, direction: minimize}
constraints:
  - {metric: peak_vram_gb, max: "0.85 * gpu_memory_gb"}
budget: {trials: 4}
"""


def setting(
    frames: int = 16, size: str = "256*256", chunks: int = 1, mode: str = "fast", offload: bool = False
) -> dict[str, Any]:
    return {"frames": frames, "size": size, "chunks": chunks, "mode": mode, "offload": offload}


def model(gpu_memory_gb: float | None = 48.0, prior: tuple[Observation, ...] = ()) -> FeasibilityModel:
    spec = parse_spec(SPEC)
    return FeasibilityModel(spec, plan_constraints(spec, {"gpu_memory_gb": gpu_memory_gb}), prior)


def peak(params: dict[str, Any], gb: float, number: int, source: str = "local") -> Observation:
    return Observation(params, {"peak_vram_gb": gb}, False, source, number)


def oom(params: dict[str, Any], number: int, source: str = "local") -> Observation:
    return Observation(params, {}, True, source, number)


def test_numbers_and_resolutions_are_ordered_other_choices_are_not() -> None:
    keys = order_keys(parse_spec(SPEC))
    assert set(keys) == {"frames", "size", "chunks"}
    assert keys["size"]("512*512") > keys["size"]("256*256")


def test_the_spec_says_how_memory_moves_with_a_parameter() -> None:
    text = SPEC.replace(
        "  chunks: {type: categorical, choices: [1, 2, 4]}",
        "  chunks: {type: categorical, choices: [1, 2, 4], memory: decreases}",
    )
    text = text.replace(
        "  mode: {type: categorical, choices: [fast, exact]}",
        "  mode: {type: categorical, choices: [fast, exact], memory: none}",
    )
    text = text.replace("  offload: {type: bool}", "  offload: {type: bool, memory: decreases}")
    spec = parse_spec(text)
    memory = FeasibilityModel(spec, plan_constraints(spec, {"gpu_memory_gb": 48.0}))
    memory.observe(oom(setting(frames=16, chunks=2, mode="fast", offload=True), 1))
    assert memory.predict(setting(frames=16, chunks=1, mode="exact", offload=False)).skip, "fewer chunks, no offload"
    assert not memory.predict(setting(frames=16, chunks=4, mode="fast", offload=True)).skip, "more chunks"
    assert not memory.predict(setting(frames=8, chunks=1, mode="fast", offload=False)).skip, "fewer frames"
    hinted = parse_spec(
        text.replace("  offload: {type: bool, memory: decreases}", "  offload: {type: bool, memory: increases}")
    )
    assert order_keys(hinted)["offload"](True) > order_keys(hinted)["offload"](False)  # type: ignore[misc]


def test_a_costlier_setting_inherits_the_largest_peak_of_those_no_costlier() -> None:
    memory = model()  # limit 0.85 * 48 = 40.8 GB
    memory.observe(peak(setting(frames=16), 30.0, 2))
    memory.observe(peak(setting(frames=24), 43.0, 3))
    skipped = memory.predict(setting(frames=32, size="512*512", chunks=2))
    assert skipped.skip and skipped.predicted_peak_gb == 43.0 and skipped.witness == "trial 3"
    assert skipped.reason is not None
    assert skipped.reason.startswith(
        "predicted peak 43.0 GB > limit 40.8 GB (x1.05 margin) on peak_vram_gb, from trial 3 (frames=24 size=256*256"
    ), skipped.reason
    assert memory.predict(setting(frames=16, chunks=4)).predicted_peak_gb == 30.0
    assert not memory.predict(setting(frames=16, chunks=4)).skip


def test_parameters_without_an_order_must_be_equal() -> None:
    memory = model()
    memory.observe(oom(setting(frames=16), 4))
    assert memory.predict(setting(frames=64)).skip
    assert not memory.predict(setting(frames=64, offload=True)).skip, "a bool is not ordered"
    assert not memory.predict(setting(frames=64, mode="exact")).skip, "a string choice is not ordered"
    assert not memory.predict(setting(frames=8)).skip, "cheaper than the OOM"


def test_the_margin_tolerates_a_peak_just_over_the_limit() -> None:
    memory = model()
    memory.observe(peak(setting(frames=16), 42.0, 1))  # 40.8 < 42.0 <= 40.8 * 1.05
    within = memory.predict(setting(frames=24))
    assert not within.skip and within.predicted_peak_gb == 42.0
    memory.observe(peak(setting(frames=24), 43.0, 2))
    assert memory.predict(setting(frames=32)).skip


def test_an_oom_no_costlier_is_a_witness_without_a_predicted_peak() -> None:
    memory = model()
    memory.observe(oom(setting(frames=16), 7))
    prediction = memory.predict(setting(frames=16, size="512*512"))
    assert prediction.skip and prediction.predicted_peak_gb is None and prediction.witness == "trial 7"
    assert prediction.reason == (
        "OOM at trial 7 (frames=16 size=256*256 chunks=1 mode=fast offload=False) which is no costlier"
    )
    assert prediction.attributes() == {"predicted_peak_gb": None, "prediction_witness": "trial 7"}


def test_a_measurement_at_a_costlier_setting_that_fits_releases_the_region() -> None:
    memory = model()
    memory.observe(oom(setting(frames=16), 2))  # e.g. a transient OOM: something else held the GPU
    assert memory.predict(setting(frames=24)).skip
    memory.observe(peak(setting(frames=32), 30.0, 5))  # measured: it fits, so the monotone guess was wrong
    assert not memory.predict(setting(frames=24)).skip
    assert not memory.predict(setting(frames=32)).skip
    assert memory.predict(setting(frames=40)).skip, "past every measurement that fits, the OOM still counts"


def test_local_evidence_drops_the_prior() -> None:
    source = "warm_start:h100"
    memory = model(prior=(oom(setting(frames=24), 9, source), peak(setting(frames=8, chunks=2), 60.0, 3, source)))
    prediction = memory.predict(setting(frames=32))
    assert prediction.skip and prediction.witness == "warm_start:h100 trial 9"
    assert memory.predict(setting(frames=8, chunks=4)).witness == "warm_start:h100 trial 3"
    memory.observe(peak(setting(frames=24, chunks=2), 35.0, 4))  # fits here, at least as costly as both
    assert memory.live_prior() == []
    assert not memory.predict(setting(frames=24, chunks=2)).skip
    assert memory.predict(setting(frames=32, chunks=2)).predicted_peak_gb == 35.0


def test_without_a_limit_only_ooms_inform_it() -> None:
    memory = model(gpu_memory_gb=None)  # a CPU host: the peak_vram_gb constraint is disabled
    assert memory.limits == {}
    memory.observe(peak(setting(frames=16), 500.0, 1))
    assert not memory.predict(setting(frames=64)).skip
    memory.observe(oom(setting(frames=32), 2))
    assert memory.predict(setting(frames=40)).skip


def test_a_disabled_model_never_skips() -> None:
    spec = parse_spec(SPEC)
    memory = FeasibilityModel(spec, plan_constraints(spec, {"gpu_memory_gb": 48.0}), enabled=False)
    memory.observe(oom(setting(frames=8), 1))
    assert not memory.predict(setting(frames=64)).skip


def _trial(number: int, outcome: str, peak_gb: float | None = None, **attrs: Any) -> Any:
    metrics = {"peak_vram_gb": {"value": peak_gb, "unit": "GB"}} if peak_gb is not None else {}
    trial = create_trial(
        state=TrialState.COMPLETE,
        values=[1.0],
        params={"frames": 8 * (number + 1)},
        distributions={"frames": IntDistribution(8, 64, step=8)},
        user_attrs={"outcome": outcome, "measured": True, "metrics": metrics, **attrs},
    )
    trial.number = number
    return trial


def test_only_trials_that_ran_are_evidence() -> None:
    assert observation_of(_trial(0, "OK", 12.5)) == Observation(
        {"frames": 8}, {"peak_vram_gb": 12.5}, False, "local", 0
    )
    out_of_memory = observation_of(_trial(1, "OOM"))
    assert out_of_memory is not None and out_of_memory.oom
    assert observation_of(_trial(2, "OK", 12.5, duplicate_of=0)) is None, "a copy adds nothing"
    assert observation_of(_trial(3, "SKIPPED_PREDICTED_OOM", measured=False)) is None, "a prediction is no evidence"
    assert observation_of(_trial(4, "CRASH")) is None
    memory = model()
    memory.update([_trial(0, "OK", 12.5), _trial(1, "OOM")])
    memory.update([_trial(0, "OK", 12.5), _trial(1, "OOM")])
    assert memory.observations == 2, "each finished trial is taken once"
