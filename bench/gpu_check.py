"""One prepared run of the tuner's CUDA paths on a real GPU, phase by phase; figures to ``gpu_check_run<N>.json``.

Run through ``bench/gpu_check.sh --run 1`` and ``--run 2`` (finds the interpreter and the carried wheels,
says so in one line and exits 0 on a machine without an NVIDIA GPU, bounds each run to
:data:`gpu_check_plan.RUN_LIMIT_S`, install included, so both runs fit one GPU window). The phases
(:data:`gpu_check_plan.PLAN`, in order of value, each with its own cap and the runs it belongs to; ``--run N``
takes run N's, ``--phases`` names some, neither takes all) run one after another, each in a child process
(``bench/gpu_check_phases.py``) started in a session of its own:

* a phase past its cap is killed with everything it started -- its process tree
  and every process carrying one of that tree's runner tags
  (:mod:`tuner.runner.reaper`) -- recorded as ``timed_out``, and the next phase runs;
* a phase whose cap no longer fits the remaining ``--budget-s`` is skipped, with the
  reason;
* the JSON (``gpu_check_run<N>.json`` for ``--run N``, else ``gpu_check.json``; in ``--out``, else ``$OUT``,
  else ``./gpu_check_out``) is rewritten atomically before and after every phase, so a kill keeps every
  finished phase. Each phase records ``status`` (pending / running / ok / failed / timed_out /
  skipped / interrupted), ``ok``, ``seconds``, ``cap_s``, its ``figures``, and on
  failure ``error`` and ``log_tail`` (the phase's own log; failed trials carry
  their worker log's tail in ``figures.failures``);
* nothing is deleted: the phases' tuner homes (studies, trial directories,
  worker logs) stay in ``--work`` (default ``/tmp/gpu_check_work/<UTC time>[-run<N>]``),
  and their text logs are packed into ``gpu_check[_run<N>]_logs.tar.gz`` beside the JSON
  after a failed phase and at the end.

This process never imports torch, so it holds no CUDA context while trials run;
its children inherit ``PYTORCH_NVML_BASED_CUDA_CHECK=1``. No network is used.
``--cpu-plumbing`` runs every phase on the CPU with host stand-ins (tests); its
figures say nothing about a GPU.
Usage: ``python bench/gpu_check.py [--run N | --phases NAMES] [--out DIR] [--work DIR] [--cpu-plumbing]
[--budget-s S] [--cap-scale F]``; exit status 0 when every selected phase ran and passed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from gpu_check_plan import FINISH_MARGIN_S, PLAN, RUN_LIMIT_S, PhasePlan, run_phases  # noqa: E402
from gpu_check_study import die_with_parent, write_json_atomically  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PHASES_SCRIPT = ROOT / "bench" / "gpu_check_phases.py"
LOG_TAIL_CHARS = 3000
BUNDLE_SUFFIXES = (".log", ".yaml", ".json", ".txt", ".db")
BUNDLE_FILE_BYTES = 512 * 1024
BUNDLE_DB_BYTES = 4 * 2**20
BUNDLE_TOTAL_BYTES = 12 * 2**20


class Interrupted(Exception):
    """SIGTERM or SIGINT reached the check (e.g. gpu_check.sh's ``timeout``)."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def select_phases(names: str | None, run: int | None = None) -> list[PhasePlan]:
    """Prepared run ``run``'s phases, else the plan's phases named (or lettered) in the comma list ``names``, in
    plan order; all when neither is given."""
    if run is not None:
        if names:
            raise SystemExit("gpu_check: --run and --phases exclude each other")
        return run_phases(run)
    if not names:
        return list(PLAN)
    wanted = {name.strip() for name in names.split(",") if name.strip()}
    known = {p.name for p in PLAN} | {p.letter for p in PLAN}
    if wanted - known:
        raise SystemExit(
            f"gpu_check: unknown phase(s) {sorted(wanted - known)}; known: "
            + ", ".join(f"{p.letter}={p.name}" for p in PLAN)
        )
    return [p for p in PLAN if p.name in wanted or p.letter in wanted]


def kill_phase(process: subprocess.Popen[bytes]) -> int:
    """SIGKILL a phase's child and everything it started; the number of processes signalled.

    The tree is read first (workers, fork servers, pytest); each member's runner tag
    (``TUNER_PROCESS_TAG``) is noted, the members and the child's process group are
    killed, then every process still carrying a noted tag (those that left the tree)
    is killed with :func:`tuner.runner.reaper.kill_tagged`. The runners' reaper
    sidecars are left to notice their closed pipe and exit (waited for 10 s).
    """
    import psutil

    from tuner.runner.reaper import TAG_ENV, kill_tagged

    try:
        root = psutil.Process(process.pid)
        members = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        members = []
    tags: set[str] = set()
    reapers: list[psutil.Process] = []
    victims: list[psutil.Process] = []
    for member in members:
        try:
            tag = member.environ().get(TAG_ENV)
            is_reaper = "tuner.runner.reaper" in " ".join(member.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if tag:
            tags.add(tag.split("/", 1)[0])
        (reapers if is_reaper else victims).append(member)
    for member in victims:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = len(victims) + sum(kill_tagged(tag) for tag in tags)
    process.wait()
    _, alive = psutil.wait_procs(reapers, timeout=10)
    for reaper in alive:
        reaper.kill()
    return killed


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    """The last ``chars`` characters of ``path`` ('' when missing)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - chars))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def run_phase(phase: PhasePlan, device: str, work: Path, cap_s: float) -> dict[str, Any]:
    """Run one phase in a child (see the module docstring); its record without ``status`` bookkeeping."""
    home = work / phase.name
    home.mkdir(parents=True, exist_ok=True)
    result_path, log_path = home / "phase_result.json", home / "phase.log"
    result_path.unlink(missing_ok=True)
    started = time.monotonic()
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                str(PHASES_SCRIPT),
                phase.name,
                "--device",
                device,
                "--home",
                str(home),
                "--result",
                str(result_path),
                "--cap-s",
                f"{cap_s:.1f}",
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        try:
            process.wait(timeout=cap_s)
            record: dict[str, Any] = {}
        except subprocess.TimeoutExpired:
            killed = kill_phase(process)
            record = {
                "status": "timed_out",
                "ok": False,
                "error": f"ran past its cap of {cap_s:.0f} s; killed with {killed} process(es) it started",
            }
        except BaseException:
            kill_phase(process)
            raise
    seconds = round(time.monotonic() - started, 1)
    if not record:
        if result_path.exists():
            record.update(json.loads(result_path.read_text()))
            record["status"] = "ok" if record.get("ok") else "failed"
        else:
            record.update(
                status="failed",
                ok=False,
                error=f"the phase's process exited with {process.returncode} and wrote no result",
            )
    record["seconds"] = seconds
    if not record.get("ok"):
        record["log_tail"] = log_tail(log_path)
    return record


def write_log_bundle(work: Path, out: Path, stem: str = "gpu_check") -> Path:
    """Pack the text logs, specs, results and storages under ``work`` into ``out/<stem>_logs.tar.gz``
    (each text file's last 512 KiB, storages whole up to 4 MiB, 12 MiB in all, newest files first)."""
    path = out / f"{stem}_logs.tar.gz"
    temporary = path.with_name(path.name + ".tmp")
    files = sorted(
        (p for p in work.rglob("*") if p.is_file() and p.suffix in BUNDLE_SUFFIXES), key=_modified, reverse=True
    )
    total = 0
    with tarfile.open(temporary, "w:gz") as bundle:
        for file in files:
            try:
                status = file.stat()
                size = status.st_size
                whole = file.suffix == ".db"  # a storage is useful whole or not at all
                keep = size if whole else min(size, BUNDLE_FILE_BYTES)
                if total + keep > BUNDLE_TOTAL_BYTES or (whole and size > BUNDLE_DB_BYTES):
                    continue
                with file.open("rb") as handle:
                    handle.seek(size - keep)
                    data = handle.read()
            except OSError:  # gone meanwhile
                continue
            info = tarfile.TarInfo(str(file.relative_to(work)))
            info.size, info.mtime = len(data), int(status.st_mtime)
            bundle.addfile(info, io.BytesIO(data))
            total += len(data)
    os.replace(temporary, path)
    return path


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def shown(record: dict[str, Any]) -> str:
    """A phase's record in one line: status, seconds and its scalar figures."""
    figures = {
        k: v
        for k, v in (record.get("figures") or {}).items()
        if isinstance(v, (int, float, str, bool)) and v is not None
    }
    extra = f" error: {record['error']}" if record.get("error") else ""
    return f"{record['status'].upper()} in {record.get('seconds', 0):.1f} s {figures}{extra}"[:600]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=None, help="Directory of the JSON (default $OUT, else ./gpu_check_out)."
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="Kept tuner homes of the phases (default /tmp/gpu_check_work/<UTC time>).",
    )
    parser.add_argument("--cpu-plumbing", action="store_true", help="Every phase on the CPU with stand-ins (tests).")
    parser.add_argument(
        "--run",
        type=int,
        default=None,
        help="A prepared run's phases (1: the new and most valuable, 2: the rest); JSON gpu_check_run<N>.json.",
    )
    parser.add_argument("--phases", default=None, help="Comma list of phase names or letters (default: all).")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=float(RUN_LIMIT_S - FINISH_MARGIN_S),
        help="Seconds for all phases; a phase whose cap no longer fits is skipped (default: a "
        "run's limit less the finish margin; gpu_check.sh passes what its run has left).",
    )
    parser.add_argument("--cap-scale", type=float, default=1.0, help="Multiply every cap (slow CPU test machines).")
    args = parser.parse_args(argv)
    started = time.monotonic()
    phases = select_phases(args.phases, args.run)
    out = args.out or Path(os.environ.get("OUT") or "gpu_check_out")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    stem = "gpu_check" if args.run is None else f"gpu_check_run{args.run}"
    work = args.work or Path("/tmp/gpu_check_work") / (stamp if args.run is None else f"{stamp}-run{args.run}")
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "bench"), str(ROOT), os.environ.get("PYTHONPATH")])
    )
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    device = "cpu" if args.cpu_plumbing else "cuda"
    report: dict[str, Any] = {
        "mode": "cpu-plumbing" if args.cpu_plumbing else "gpu",
        "run": args.run,
        "run_limit_s": RUN_LIMIT_S,
        "started": stamp,
        "budget_s": args.budget_s,
        "cap_scale": args.cap_scale,
        "work_dir": str(work.resolve()),
        "finished": False,
        "ok": None,
        "plan": [
            {
                "letter": p.letter,
                "name": p.name,
                "cap_s": p.cap_s * args.cap_scale,
                "checks": p.summary,
                "runs": list(p.runs),
            }
            for p in phases
        ],
        "phases": {p.name: {"status": "pending", "ok": None} for p in phases},
    }
    path = out / f"{stem}.json"

    def save() -> None:
        report["elapsed_s"] = round(time.monotonic() - started, 1)
        report["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json_atomically(path, report)

    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    save()
    try:
        for phase in phases:
            cap_s = phase.cap_s * args.cap_scale
            left = args.budget_s - (time.monotonic() - started)
            if left < cap_s:
                report["phases"][phase.name] = {
                    "status": "skipped",
                    "ok": False,
                    "cap_s": cap_s,
                    "reason": f"budget: {left:.0f} s left of {args.budget_s:.0f} s, the phase's cap is {cap_s:.0f} s",
                }
                print(
                    f"gpu_check: [{phase.letter}] {phase.name}: SKIPPED ({report['phases'][phase.name]['reason']})",
                    flush=True,
                )
                save()
                continue
            try:  # marking it running is inside: a stop landing during that save still reads "interrupted"
                report["phases"][phase.name] = {"status": "running", "ok": None, "cap_s": cap_s}
                save()
                record = run_phase(phase, device, work, cap_s)
            except Interrupted as signal_name:
                report["phases"][phase.name] = {
                    "status": "interrupted",
                    "ok": False,
                    "cap_s": cap_s,
                    "error": f"{signal_name} while it ran; killed",
                }
                raise
            report["phases"][phase.name] = {"cap_s": cap_s, **record}
            save()
            print(f"gpu_check: [{phase.letter}] {phase.name}: {shown(report['phases'][phase.name])}", flush=True)
            if not record.get("ok"):
                write_log_bundle(work, out, stem)
    except Interrupted as signal_name:
        report["interrupted"] = str(signal_name)
        for record in report["phases"].values():  # a stop between two statements must not leave one "running"
            if record["status"] == "running":
                record.update(status="interrupted", ok=False, error=f"{signal_name} while it ran; killed")
    failed = [name for name, record in report["phases"].items() if not record.get("ok")]
    report.update(finished="interrupted" not in report, ok=not failed)
    save()
    bundle = write_log_bundle(work, out, stem)
    print(
        f"gpu_check: {'every phase OK' if not failed else 'NOT OK: ' + ', '.join(failed)}; "
        f"{report['elapsed_s']:.0f} s; figures in {path}, logs in {bundle}, "
        f"homes in {work}",
        flush=True,
    )
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
