"""The plan of ``bench/gpu_check.py``: its phases (name, letter, cap, what each checks) and the two prepared runs
they are split into, each bounded so that both fit one GPU window.

A GPU window is :data:`GPU_WINDOW_S` of device time, the machine's start (:data:`MACHINE_START_S`) included.
The check is two prepared runs of at most :data:`RUN_LIMIT_S` each, wheel install included (``bash
bench/gpu_check.sh --run 1``, then ``--run 2`` on the warm machine, or either alone); each run's phase caps add up
to at most :func:`phase_budget_s` (the limit less :data:`INSTALL_MARGIN_S` and :data:`FINISH_MARGIN_S`), so no
phase of a run is skipped for time unless the install or an earlier phase overran. Run 1 holds what is new and
most valuable (the Wan settings with the bare twin, utilization and joules per video; the audio-visual LLM at
full size), run 2 the checks that passed on the first H200 and guard against regressions; ``device_facts`` opens
both, so each run's JSON names its machine. A phase belongs to the runs its :attr:`PhasePlan.runs` lists: adding
one to a run is one line of :data:`PLAN` (the sustained-load probe rides in the avatar phase, 2 s per setting),
plus its function in ``gpu_check_phases.PHASES``; the run's caps must still fit (tests/test_gpu_check.py).
"""

from __future__ import annotations

from dataclasses import dataclass

GPU_WINDOW_S = 900
"""Seconds of device time a session is lent a GPU for, machine start included."""
MACHINE_START_S = 60
"""Seconds the lent machine takes to start, out of the window."""
RUN_LIMIT_S = 360
"""Seconds one prepared run may take, wheel install included (``gpu_check.sh``'s ``limit``): two runs and the
machine's start fit the window, with what is left for the transfers."""
INSTALL_MARGIN_S = 40
"""Seconds set aside for finding the interpreter and installing the carried wheels before the phases start."""
FINISH_MARGIN_S = 20
"""Seconds kept for the last kill and write: ``gpu_check.sh`` gives ``gpu_check.py`` its time left less this."""


@dataclass(frozen=True)
class PhasePlan:
    """One phase: ``name`` (also its JSON key), ``letter`` (a short name, stable across plans), ``cap_s``
    (seconds; the child is killed after it), ``summary`` (what it checks), ``runs`` (the prepared runs that
    hold it)."""

    name: str
    letter: str
    cap_s: float
    summary: str
    runs: tuple[int, ...]


PLAN: tuple[PhasePlan, ...] = (
    PhasePlan(
        "device_facts", "a", 20, "GPU, driver, torch and CUDA from NVML; no CUDA context before the trials", (1, 2)
    ),
    PhasePlan(
        "wan21_diffusers",
        "g",
        150,
        "Wan2.1-T2V-1.3B (diffusers, random weights, bf16, 480p): steps, CFG, "
        "frames, batch, First-Block Cache, VAE tiling, one knob at a time; per setting the bare twin "
        "(tuner p50 / bare p50), GPU utilization, power and joules per video",
        (1,),
    ),
    PhasePlan(
        "av_llm_omni",
        "j",
        130,
        "the Qwen2.5-Omni-7B thinker (transformers, random weights, bf16, built on "
        "the GPU): fps x max_frames x max_new_tokens, a handful of settings",
        (1,),
    ),
    PhasePlan("latency_truth", "b", 35, "reported p50 of a 20 and a 100 ms CUDA sleep kernel within 2 %", (2,)),
    PhasePlan("vram_spike", "c", 30, "a 2 GiB, 50 ms spike caught by the allocator peak and the NVML sampler", (2,)),
    PhasePlan("carry_over", "d", 30, "one warm worker, 8 GiB then 1 GiB: the small trial's peaks are its own", (2,)),
    PhasePlan("sampler_cost", "e", 50, "p50 latency with the memory sampler at 100 Hz and off", (2,)),
    PhasePlan(
        "avatar",
        "f",
        55,
        "the avatar demo on CUDA: precision x streams x steps, bf16 against fp32; the "
        "sustained-load probe (one stream, 2 s per setting) and the spans of each call",
        (2,),
    ),
    PhasePlan("slot_pinning", "h", 25, "the Live Avatar stand-in, gpus: 1: the device each trial really used", (2,)),
    PhasePlan("gpu_tests", "i", 55, "pytest -m gpu on the test files that hold GPU tests", (2,)),
)
"""Every phase, in order of value: a run runs its phases in this order (a window may end before the last)."""

RUNS: tuple[int, ...] = tuple(sorted({run for phase in PLAN for run in phase.runs}))
"""The prepared runs, ``--run N``."""


def run_phases(run: int) -> list[PhasePlan]:
    """The phases of prepared run ``run``, in plan order (SystemExit naming the runs for an unknown one)."""
    if run not in RUNS:
        raise SystemExit(f"gpu_check: unknown run {run}; the runs are {', '.join(map(str, RUNS))}")
    return [phase for phase in PLAN if run in phase.runs]


def phase_budget_s() -> float:
    """Seconds of phase caps one run may hold: :data:`RUN_LIMIT_S` less the install and finish margins."""
    return float(RUN_LIMIT_S - INSTALL_MARGIN_S - FINISH_MARGIN_S)
