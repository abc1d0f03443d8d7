"""Conformance checks that every :class:`~tuner.workloads.base.Workload` must pass.

Each ``check_*`` function drives fresh workloads the way the worker does
(``setup`` -> ``run`` ... -> ``teardown``) and raises ``AssertionError`` with a
message naming the broken rule. They need no pytest, so any test module can
call them::

    from tuner.testing.workload_conformance import check_workload_conformance

    def test_conformance(tmp_path):
        context = RunContext(device="cpu", seed=0, inputs={}, workdir=tmp_path)
        check_workload_conformance(MyWorkload, {"steps": 2}, context,
                                   invalid_params=[{"steps": -1}])

Rules checked
-------------
* ``setup`` + ``run`` return a :class:`WorkloadOutput` whose fields keep their
  documented types: ``items`` an int >= 1; ``video`` uint8 (B, T, H, W, 3)
  with B == ``items``, or (T, H, W, 3); ``audio`` float32 mono in [-1, 1] with a
  positive ``audio_rate``; ``text`` a list of str; ``counters`` finite numbers
  under string names.
* ``run`` is deterministic: two calls on one instance, and calls on two fresh
  instances, give identical outputs for the same seed and params.
* The output survives :meth:`WorkloadOutput.save` / :meth:`WorkloadOutput.load`
  (the reference cache format).
* Every invalid parameter set raises :class:`InvalidSetting` from ``setup`` or
  ``run``.
* A lighter warm-up (``warmup_settings``), where the workload offers one, runs
  and leaves nothing behind: the setting's next output is the one made without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from tuner.workloads.base import InvalidSetting, RunContext, Workload, WorkloadOutput

WorkloadFactory = Callable[[], Workload]
"""Builds a fresh, not yet set up workload (a Workload class itself qualifies)."""


def _expect(condition: bool, message: str) -> None:
    """Raise AssertionError(message) unless ``condition`` (works under ``python -O`` too)."""
    if not condition:
        raise AssertionError(message)


def run_once(
    factory: WorkloadFactory, params: Mapping[str, Any], context: RunContext, repeats: int = 1
) -> list[WorkloadOutput]:
    """Set up a fresh workload, ``run`` it ``repeats`` times, synchronise and tear down."""
    workload = factory()
    workload.setup(params, context)
    try:
        outputs = [workload.run(params, context) for _ in range(repeats)]
        workload.synchronize()
    finally:
        workload.teardown()
    return outputs


def check_output_contract(output: object) -> None:
    """The fields of one ``run`` result have the documented types and shapes."""
    _expect(isinstance(output, WorkloadOutput), f"run returned {type(output).__name__}, not WorkloadOutput")
    assert isinstance(output, WorkloadOutput)
    _expect(
        isinstance(output.items, int) and not isinstance(output.items, bool) and output.items >= 1,
        f"items must be an int >= 1, got {output.items!r}",
    )
    if output.video is not None:
        video = output.video
        _expect(isinstance(video, np.ndarray), f"video must be a numpy array, got {type(video).__name__}")
        _expect(video.dtype == np.uint8, f"video dtype must be uint8, got {video.dtype}")
        _expect(
            video.ndim in (4, 5) and video.shape[-1] == 3,
            f"video must be (B, T, H, W, 3) or (T, H, W, 3), got shape {video.shape}",
        )
        _expect(all(size > 0 for size in video.shape), f"video has an empty axis: {video.shape}")
        if video.ndim == 5:
            _expect(
                video.shape[0] == output.items, f"video batch axis {video.shape[0]} differs from items={output.items}"
            )
    if output.audio is not None:
        audio = output.audio
        _expect(
            isinstance(audio, np.ndarray) and audio.dtype == np.float32 and audio.ndim == 1,
            f"audio must be 1-D float32, got {getattr(audio, 'dtype', type(audio))} {getattr(audio, 'shape', '')}",
        )
        _expect(bool(np.all(np.abs(audio) <= 1.0)), "audio samples must lie in [-1, 1]")
        _expect(
            isinstance(output.audio_rate, int) and output.audio_rate > 0,
            f"audio needs a positive int audio_rate, got {output.audio_rate!r}",
        )
    if output.text is not None:
        _expect(
            isinstance(output.text, list) and all(isinstance(t, str) for t in output.text), "text must be a list of str"
        )
    _expect(isinstance(output.counters, dict), "counters must be a dict")
    for name, value in output.counters.items():
        _expect(isinstance(name, str), f"counter name {name!r} is not a str")
        _expect(
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
            f"counter {name!r} must be a finite number, got {value!r}",
        )


def assert_outputs_equal(first: WorkloadOutput, second: WorkloadOutput, what: str) -> None:
    """Same items, text, audio and video (bit for bit); ``what`` names the comparison."""
    _expect(first.items == second.items, f"{what}: items differ ({first.items} vs {second.items})")
    _expect(first.text == second.text, f"{what}: text differs")
    _expect(first.audio_rate == second.audio_rate, f"{what}: audio_rate differs")
    for name in ("video", "audio"):
        a, b = getattr(first, name), getattr(second, name)
        _expect((a is None) == (b is None), f"{what}: {name} present in only one output")
        if a is not None:
            _expect(a.shape == b.shape, f"{what}: {name} shapes differ ({a.shape} vs {b.shape})")
            _expect(bool(np.array_equal(a, b)), f"{what}: {name} differs")


def check_returns_output(factory: WorkloadFactory, params: Mapping[str, Any], context: RunContext) -> None:
    """``setup`` + ``run`` return a WorkloadOutput that keeps the contract."""
    check_output_contract(run_once(factory, params, context)[0])


def check_deterministic(factory: WorkloadFactory, params: Mapping[str, Any], context: RunContext) -> None:
    """Two runs on one instance, and a run on a second fresh instance, agree exactly."""
    first, second = run_once(factory, params, context, repeats=2)
    assert_outputs_equal(first, second, "two runs of one instance")
    (fresh,) = run_once(factory, params, context)
    assert_outputs_equal(first, fresh, "runs of two fresh instances")


def check_save_load_roundtrip(factory: WorkloadFactory, params: Mapping[str, Any], context: RunContext) -> None:
    """The output written with ``save`` reads back with ``load`` unchanged (counters aside)."""
    (output,) = run_once(factory, params, context)
    path = context.workdir / "conformance_output.npz"
    output.save(path)
    loaded = WorkloadOutput.load(path)
    assert_outputs_equal(output, loaded, "save/load round trip")


def check_light_warmup(factory: WorkloadFactory, params: Mapping[str, Any], context: RunContext) -> None:
    """Where ``warmup_settings(params)`` offers a lighter call, it runs, and the setting's output after it equals
    a fresh instance's (a warm-up changes timings, never the result)."""
    workload = factory()
    workload.setup(params, context)
    try:
        light = workload.warmup_settings(params)
        if light is None:
            return
        _expect(isinstance(light, Mapping), f"warmup_settings returned {type(light).__name__}, not a mapping")
        check_output_contract(workload.run(light, context))
        after = workload.run(params, context)
        workload.synchronize()
    finally:
        workload.teardown()
    (fresh,) = run_once(factory, params, context)
    assert_outputs_equal(after, fresh, "a run after the light warm-up and a fresh instance's")


def check_rejects_invalid(
    factory: WorkloadFactory, invalid_params: Iterable[Mapping[str, Any]], context: RunContext
) -> None:
    """Each parameter set raises :class:`InvalidSetting` from ``setup`` or ``run``."""
    for params in invalid_params:
        workload = factory()
        try:
            workload.setup(params, context)
            workload.run(params, context)
        except InvalidSetting:
            continue
        except Exception as error:  # noqa: BLE001 - report which rule broke, with the real error
            raise AssertionError(
                f"params {dict(params)} raised {type(error).__name__}: {error}, not InvalidSetting"
            ) from error
        finally:
            workload.teardown()
        raise AssertionError(f"params {dict(params)} were accepted; expected InvalidSetting")


def check_workload_conformance(
    factory: WorkloadFactory,
    params: Mapping[str, Any],
    context: RunContext,
    invalid_params: Iterable[Mapping[str, Any]] = (),
) -> None:
    """All the checks above for one valid ``params`` and any number of invalid sets."""
    check_returns_output(factory, params, context)
    check_deterministic(factory, params, context)
    check_save_load_roundtrip(factory, params, context)
    check_light_warmup(factory, params, context)
    check_rejects_invalid(factory, invalid_params, context)
