"""bench/gpu_check.sh, gpu_check.py and the wheels they carry, checked without a GPU.

* without a GPU the script says so in one line and exits 0; without the tuner and without
  wheels, in one line and exits 1 (no ``pip install`` from a registry);
* ``gpu_check.py --cpu-plumbing`` runs every phase on host stand-ins, in an interpreter that
  sees only the GPU image's packages and the carried wheels (bench/gpu_wheels_check.py's
  import guard), and writes the phase structure;
* the JSON is rewritten after every phase: a SIGKILL or SIGTERM after the first phase keeps
  it; a phase past its cap is killed, workers and all, and the next one runs; a phase whose
  cap no longer fits the budget is skipped;
* bench/gpu_wheels.sh + bench/gpu_wheels_check.py: the wheel set is complete for the image
  (this downloads about 15 MB from the package index).

No test depends on how fast this machine is: they poll files and processes with generous
deadlines, and caps are scaled up (or, for the overrun, down to a fraction of a second).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
CHECK = BENCH / "gpu_check.py"
PHASE_NAMES = ["device_facts", "latency_truth", "vram_spike", "carry_over", "sampler_cost", "avatar",
               "wan21_diffusers", "slot_pinning", "gpu_tests"]


def _gpu_listed() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return listed.returncode == 0 and any(line.startswith("GPU ") for line in listed.stdout.splitlines())


def _report(out: Path) -> dict[str, Any]:
    return json.loads((out / "gpu_check.json").read_text())


def _wait_for(condition: Any, what: str, timeout_s: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting ({timeout_s:.0f} s) for {what}")


def _processes_under(path: Path) -> list[psutil.Process]:
    """Living processes whose command line or working directory names ``path`` (a check's work dir)."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd", "status"]):
        info = process.info
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if str(path) in " ".join(info["cmdline"] or []) or str(info["cwd"] or "").startswith(str(path)):
            found.append(process)
    return found


def _phase_status(out: Path, name: str) -> str | None:
    try:
        return _report(out)["phases"][name]["status"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="module")
def import_guard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose sitecustomize.py limits an interpreter to the GPU image's and the carried packages."""
    directory = tmp_path_factory.mktemp("guard")
    subprocess.run([sys.executable, str(BENCH / "gpu_wheels_check.py"), "--import-guard", str(directory)],
                   check=True, capture_output=True, timeout=120)
    return directory


def _guarded_env(guard: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(guard), os.environ.get("PYTHONPATH")]))}


@pytest.mark.skipif(_gpu_listed(), reason="a GPU is listed here: the script would run its GPU checks")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], capture_output=True, text=True,
                          timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no NVIDIA GPU"), done.stdout
    assert not list(tmp_path.iterdir()), "nothing is written in the no-GPU mode"


def test_without_the_tuner_and_without_wheels_it_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    """A GPU is listed (a stand-in nvidia-smi) but the interpreter has neither the tuner nor ./.whl: no pip."""
    (tmp_path / "bench").mkdir()
    shutil.copy(BENCH / "gpu_check.sh", tmp_path / "bench" / "gpu_check.sh")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-standin)'\n")
    (fake_bin / "python").write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")  # -S: no site-packages
    for name in ("nvidia-smi", "python"):
        (fake_bin / name).chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "bench" / "gpu_check.sh")], capture_output=True, text=True,
                          timeout=120, check=False, env={"PATH": f"{fake_bin}:/usr/bin:/bin",
                                                         "PYTHON": str(fake_bin / "python")})
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and "cannot import the tuner" in lines[0] and "no wheels" in lines[0], done.stdout
    assert "pip" not in done.stderr


def test_cpu_plumbing_runs_every_phase_with_only_the_image_and_carried_packages(tmp_path: Path,
                                                                               import_guard: Path) -> None:
    """Every phase on host stand-ins, in the phase order, each with ok, status, seconds and figures."""
    out, work = tmp_path / "out", tmp_path / "work"
    done = subprocess.run([sys.executable, str(CHECK), "--cpu-plumbing", "--out", str(out), "--work", str(work),
                           "--budget-s", "100000", "--cap-scale", "20"], capture_output=True, text=True,
                          timeout=1800, check=False, cwd=ROOT, env=_guarded_env(import_guard))
    report = _report(out)
    phases = report["phases"]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert report["mode"] == "cpu-plumbing" and report["finished"] and report["ok"]
    assert list(phases) == PHASE_NAMES and [p["name"] for p in report["plan"]] == PHASE_NAMES
    for name, phase in phases.items():
        assert phase["status"] == "ok" and phase["ok"] is True and phase["seconds"] > 0, (name, phase)
        assert "figures" in phase and "error" not in phase, (name, phase)
    latency = phases["latency_truth"]["figures"]["trials"]
    assert sorted(t["kernel_ms"] for t in latency) == [20, 100]
    for trial in latency:  # a sleep never ends early; the error is a finite comparison of two measurements
        assert trial["outcome"] == "OK" and trial["true_ms"] >= trial["kernel_ms"]
        assert trial["reported_ms"] >= trial["kernel_ms"] and 0 <= trial["error"] < 1
    assert phases["vram_spike"]["figures"]["rss_rise_gb"] >= 0.9 * 0.25 * 2**30 / 1e9
    carry = phases["carry_over"]["figures"]
    assert carry["one_worker"] and [t["role"] for t in carry["trials"]] == ["reference", "baseline"]
    assert [t["spike_gib"] for t in carry["trials"]] == [0.5, 0.05]
    sampler = phases["sampler_cost"]["figures"]
    assert set(sampler["p50_s"]) == {"0", "100"} and all(v > 0 for v in sampler["on_over_off"].values())
    assert sampler["achieved_sample_hz"]["0"] == [None, None]  # off: no samples, an honest 'unavailable'
    avatar = phases["avatar"]["figures"]
    assert avatar["ok_trials"] == 3 and avatar["fp32_over_bf16_latency"] > 0
    assert {t["precision"] for t in avatar["trials"] if t["role"] in ("reference", "baseline")} == {"fp32", "bf16"}
    wan = phases["wan21_diffusers"]["figures"]  # diffusers' real WanPipeline under the image guard
    assert wan["ok_trials"] == 3 and all(t["weights"] == "random:tiny:0" for t in wan["trials"])
    assert wan["like_with_like"] and all(t["compared_with"]["shape"] == {"num_frames": 5} for t in wan["trials"])
    assert wan["latency_ratios"]["more_steps_over_base"] > 0 and wan["latency_ratios"]["cfg_on_over_off"] > 0
    slots = phases["slot_pinning"]["figures"]["trials"]
    assert len(slots) >= 3 and all(t["slot"] == "cpu:0" and t["cuda_visible_devices"] == "" for t in slots)
    assert all(t["nvml_indices"] == "not recorded" or isinstance(t["nvml_indices"], list) for t in slots)
    tests = phases["gpu_tests"]["figures"]
    assert "tests/test_gpu.py" in tests["files"] and tests["counts"].get("skipped", 0) >= 1
    assert "gpu_check: every phase OK" in done.stdout
    assert (out / "gpu_check_logs.tar.gz").stat().st_size > 0
    assert list((work / "latency_truth" / "gpu_latency_truth").glob("trial_*/worker.log")), "homes are kept"


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_stopped_after_its_first_phase_the_file_keeps_the_finished_phases(tmp_path: Path, stop: int) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    process = subprocess.Popen([sys.executable, str(CHECK), "--cpu-plumbing", "--out", str(out), "--work", str(work),
                                "--phases", "device_facts,latency_truth,vram_spike", "--budget-s", "100000",
                                "--cap-scale", "20"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: _phase_status(out, "device_facts") in ("ok", "failed"), "the first phase to finish")
        process.send_signal(stop)
        output = process.communicate(timeout=120)[0].decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    report = _report(out)
    facts = report["phases"]["device_facts"]
    assert facts["status"] == "ok" and facts["figures"]["cuda_initialised"] is False, output
    assert report["finished"] is False and report["ok"] is not True
    later = {report["phases"][name]["status"] for name in ("latency_truth", "vram_spike")}
    if stop == signal.SIGKILL:  # nothing ran after the kill: a phase in flight still reads "running"
        assert later <= {"pending", "running", "ok", "failed"}, later
    else:  # the handler killed a phase in flight and recorded it
        assert report["interrupted"] == "SIGTERM" and process.returncode == 1, output
        assert later <= {"pending", "interrupted", "ok", "failed"}, later
    # the phase's child dies with the check (PR_SET_PDEATHSIG), its workers with their runner (reaper)
    _wait_for(lambda: not _processes_under(work), "the phase's processes to end", timeout_s=120)


def test_a_phase_past_its_cap_is_killed_and_the_next_one_runs(tmp_path: Path) -> None:
    """Caps scaled to a fraction of a second: no study can finish (imports alone take longer)."""
    out, work = tmp_path / "out", tmp_path / "work"
    done = subprocess.run([sys.executable, str(CHECK), "--cpu-plumbing", "--out", str(out), "--work", str(work),
                           "--phases", "b,c", "--cap-scale", "0.002"], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)
    report = _report(out)
    assert done.returncode == 1, done.stdout + done.stderr
    for name in ("latency_truth", "vram_spike"):
        phase = report["phases"][name]
        assert phase["status"] == "timed_out" and phase["ok"] is False and "cap" in phase["error"], phase
        assert "log_tail" in phase
    assert report["finished"] is True and report["ok"] is False
    _wait_for(lambda: not _processes_under(work), "the killed phases' processes to end", timeout_s=120)


def test_a_phase_whose_cap_no_longer_fits_the_budget_is_skipped(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(CHECK), "--cpu-plumbing", "--out", str(out), "--work",
                           str(tmp_path / "work"), "--phases", "a,b", "--budget-s", "40"], capture_output=True,
                          text=True, timeout=600, check=False, cwd=ROOT)
    report = _report(out)
    assert report["phases"]["device_facts"]["status"] == "ok", done.stdout + done.stderr
    skipped = report["phases"]["latency_truth"]
    assert skipped["status"] == "skipped" and "budget" in skipped["reason"] and done.returncode == 1


def test_killing_a_phase_kills_its_trial_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill_phase on a phase whose study has a worker running: the tree and every tagged process end."""
    monkeypatch.setattr(sys, "path", [str(BENCH), *sys.path])  # gpu_check adds to it too: all undone after
    from gpu_check import kill_phase

    from tuner.runner.reaper import TAG_ENV, tagged_pids
    home = tmp_path / "latency_truth"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH), str(ROOT),
                                                                      os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, str(BENCH / "gpu_check_phases.py"), "latency_truth", "--device",
                                "cpu", "--home", str(home), "--result", str(tmp_path / "result.json"),
                                "--cap-s", "600"], cwd=ROOT, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def tagged_descendant() -> tuple[list[int], str] | None:
        try:
            members = psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        for member in members:
            try:
                tag = member.environ().get(TAG_ENV)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if tag and list((home / "gpu_latency_truth").glob("trial_*")):
                return [m.pid for m in members], tag.split("/", 1)[0]
        return None

    try:
        pids, tag = _wait_for(tagged_descendant, "a trial worker of the phase")
        assert kill_phase(process) >= 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _wait_for(lambda: not tagged_pids(tag), f"the processes tagged {tag} to end", timeout_s=60)
    _wait_for(lambda: not [pid for pid in pids if _alive(pid)], "the phase's process tree to end", timeout_s=60)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---------------------------------------------------------------------------------------- the carried wheels


@pytest.fixture(scope="module")
def carried_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/gpu_wheels.sh's wheel set, fetched from the package index into a temporary directory."""
    wheels = tmp_path_factory.mktemp("wheels") / "whl"
    started = time.monotonic()
    done = subprocess.run(["bash", str(BENCH / "gpu_wheels.sh"), str(wheels)], capture_output=True, text=True,
                          timeout=1200, check=False, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"bench/gpu_wheels.sh fetched {len(list(wheels.glob('*.whl')))} wheels in "
          f"{time.monotonic() - started:.1f} s")
    return wheels


def _wheels_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "gpu_wheels_check.py"), *args], capture_output=True,
                          text=True, timeout=600, check=False, cwd=ROOT)


def test_the_carried_wheels_are_complete_for_the_image(carried_wheels: Path) -> None:
    """Installed into an empty target as CPython 3.12 x86-64 takes them, every Requires-Dist of every carried
    distribution is met by the carried set or the image; the tuner's own core requirements are checked too
    (any problem there names the tuner, never a carried wheel)."""
    done = _wheels_check("--wheels", str(carried_wheels), "--no-project")
    assert done.returncode == 0 and "gpu_wheels_check: complete" in done.stdout, done.stdout + done.stderr
    assert "typing_extensions 4.16.0" in done.stdout and "MiB" in done.stdout
    with_project = _wheels_check("--wheels", str(carried_wheels))
    problems = [line for line in with_project.stdout.splitlines() if "PROBLEM" in line]
    print("\n".join(problems))  # the tuner's core requirements the image + wheels do not meet, when any
    assert all("needed by tuner (pyproject core dependencies)" in line for line in problems), problems
    assert with_project.returncode == (1 if problems else 0)


def test_the_wheels_check_finds_what_would_break_on_the_image(carried_wheels: Path, tmp_path: Path) -> None:
    """Without typing_extensions (the image's is older than pydantic 2.14 needs), with two versions of one
    package, and for a project whose core needs what neither the image nor the wheels provide."""
    partial = tmp_path / "partial"
    partial.mkdir()
    for wheel in carried_wheels.glob("*.whl"):
        if not wheel.name.startswith("typing_extensions"):
            (partial / wheel.name).symlink_to(wheel)
    done = _wheels_check("--wheels", str(partial), "--no-project")
    assert done.returncode == 1
    assert "unknown version: typing-extensions>=4.16.0 (needed by pydantic 2.14.4)" in done.stdout, done.stdout
    project = tmp_path / "pyproject.toml"
    project.write_text('[project]\nname = "x"\nversion = "0"\ndependencies = ["optuna==5.0.*", "torch>=2.5", '
                       '"numpy>=1.26", "tqdm", "mlflow>=3", "torch>=2.12", "psutil>=5.9", "pydantic[email]>=2.6"]\n')
    done = _wheels_check("--wheels", str(carried_wheels), "--pyproject", str(project))
    problems = [line.split("PROBLEM: ", 1)[1] for line in done.stdout.splitlines() if "PROBLEM" in line]
    assert done.returncode == 1 and len(problems) == 4, done.stdout
    assert problems[0].startswith("missing: mlflow>=3 (needed by tuner")
    assert problems[1].startswith("too old/new: torch>=2.12") and "torch 2.11.0" in problems[1]
    assert problems[2].startswith("unknown version: psutil>=5.9")
    assert problems[3].startswith("missing: email-validator>=2.0.0") and "(needed by pydantic 2.14.4)" in problems[3]
    doubled = tmp_path / "doubled"
    shutil.copytree(carried_wheels, doubled)
    packaging = next(doubled.glob("packaging-*.whl"))
    shutil.copy(packaging, doubled / "packaging-25.0-py3-none-any.whl")
    done = _wheels_check("--wheels", str(doubled), "--no-project")
    assert done.returncode == 1 and "two wheels of packaging" in done.stdout, done.stdout


def test_the_import_guard_hides_what_the_image_lacks(import_guard: Path) -> None:
    code = ("import importlib.metadata as m, optuna, pydantic\n"
            "try:\n    import mlflow\nexcept ModuleNotFoundError as e:\n    print('refused:', e)\n"
            "try:\n    m.version('mlflow')\nexcept m.PackageNotFoundError:\n    print('hidden')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          env=_guarded_env(import_guard), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "refused: No module named 'mlflow' (gpu image guard" in done.stdout and "hidden" in done.stdout


# ------------------------------------------------------------------------- the check's CUDA ground truth


class _SimulatedTorchCuda:
    """The slice of ``torch.cuda`` CudaSleepWorkload uses, on the simulated device (2e6 cycles per ms)."""

    CYCLES_PER_MS = 2e6

    def __init__(self) -> None:
        from tuner.testing.simulated_cuda import SimulatedCudaDevice

        self.device = SimulatedCudaDevice()  # strict: a kernel is complete only once the host waited for it

    def is_available(self) -> bool:
        return True

    def synchronize(self) -> None:
        self.device.synchronize()

    def _sleep(self, cycles: int) -> None:
        self.device.launch(cycles / self.CYCLES_PER_MS / 1000.0)

    def Event(self, enable_timing: bool = False) -> Any:  # noqa: N802 - torch's name
        return self.device.event()


def test_cuda_sleep_reads_the_previous_kernel_only_after_waiting_for_it(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """Two runs with no synchronisation between them (an unsynchronised warm-up): the second waits on the
    first's end event before reading its duration, which CUDA refuses while the kernel still runs."""
    import types

    from tuner.workloads.base import RunContext

    cuda = _SimulatedTorchCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(sys, "path", [str(BENCH), *sys.path])
    from gpu_check_workloads import CudaSleepWorkload

    context = RunContext(device="cuda", seed=0, inputs={}, workdir=tmp_path, gpu_slot="0")
    workload = CudaSleepWorkload()
    params = {"kernel_ms": 30, "launches": 3}
    workload.setup(params, context)
    launched = cuda.device.kernels_launched
    first = workload.run(params, context)
    second = workload.run(params, context)  # the first run's kernels were never waited for
    assert "kernel_ms_previous" not in first.counters
    assert second.counters["kernel_ms_previous"] == pytest.approx(30, rel=0.05)
    assert cuda.device.kernels_launched - launched == 6
