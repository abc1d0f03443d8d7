"""What a trial leaves in its directory past the limit: deleted (largest first) or kept, and named.

:func:`tuner.runner.base.with_trial_disk_usage` calls :func:`tidy` once a trial is over -- the
worker has ended, its result is read and the trial's processes are dead -- when the trial
directory takes more than the limit (``workload.max_trial_dir_gb``). Nothing the tuner needs is
ever deleted (:func:`needed_paths`): ``request.json``, ``result.json``, ``worker.log``, the
samples (``sample/``), the command adapter's logs (``command/``) and the result's
``output_path`` (a reference's saved output, when it lies inside the directory). Everything else
is the program's: with ``clean`` its regular files are deleted, largest first, until the
directory is within the limit (a declared output the tuner has already read goes only when the
scratch alone does not bring the directory under the limit); without, nothing is deleted and
the largest files are named. Symbolic links are never followed or deleted, and a file with
another hard link is left alone (deleting it would free nothing).

The caller records the :class:`ScratchReport`: its :meth:`~ScratchReport.note` in the trial's
reason and at the end of its ``worker.log``, its :meth:`~ScratchReport.info` in the trial's
``info["trial_scratch"]``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BYTES_PER_GB = 1e9
TUNER_FILES = ("request.json", "result.json", "result.json.tmp", "worker.log")
"""Files of a trial directory the runner and the views read (``tuner show``, the MLflow tracker)."""
TUNER_DIRS = ("sample", "command")
"""Directories of a trial directory written for the tuner: samples (:mod:`tuner.runner.measure.samples`) and
the command adapter's logs (:mod:`tuner.adapters.command`)."""
NAMED_IN_NOTE = 5
NAMED_IN_INFO = 20


def gb_text(size_gb: float) -> str:
    """A size in GB as notes show it: two decimals, or two significant digits below 0.1 GB."""
    return f"{size_gb:.2f}" if size_gb >= 0.1 else f"{size_gb:.2g}"


@dataclass(frozen=True)
class ScratchReport:
    """What :func:`tidy` found and did in one trial directory (sizes in bytes, allocated blocks).

    ``files``: relative path and size of each file deleted (``cleaned``) or of the largest files
    kept (not ``cleaned``), largest first; ``failures``: files that could not be deleted, with why.
    """

    workdir: str
    size_bytes: int
    limit_gb: float
    cleaned: bool
    freed_bytes: int = 0
    files: list[tuple[str, int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def left_bytes(self) -> int:
        return self.size_bytes - self.freed_bytes

    def note(self) -> str:
        """One line for the trial's reason and log: the size, the limit, what was deleted or kept."""
        head = (
            f"note: the trial directory takes {gb_text(self.size_bytes / BYTES_PER_GB)} GB after the trial "
            f"({self.workdir}), over the {self.limit_gb:g} GB limit (workload.max_trial_dir_gb)"
        )
        named = ", ".join(f"{path} ({gb_text(size / BYTES_PER_GB)} GB)" for path, size in self.files[:NAMED_IN_NOTE])
        more = f" and {len(self.files) - NAMED_IN_NOTE} more" if len(self.files) > NAMED_IN_NOTE else ""
        if not self.cleaned:
            return (
                f"{head}; kept (workload.trial_scratch: keep); largest: {named or 'none'}{more}: remove what "
                f"the program leaves there or write its outputs elsewhere"
            )
        text = (
            f"{head}; deleted {len(self.files)} file(s) the tuner does not need, "
            f"{gb_text(self.freed_bytes / BYTES_PER_GB)} GB, largest first: {named or 'none'}{more}; "
            f"{gb_text(self.left_bytes / BYTES_PER_GB)} GB left"
        )
        if self.left_bytes > self.limit_gb * BYTES_PER_GB:
            text += " (still over: the rest is the tuner's own files and the trial's output)"
        if self.failures:
            text += f"; not deleted: {'; '.join(self.failures[:NAMED_IN_NOTE])}"
        return (
            f"{text}. Write scratch outside the trial directory or remove it in the program "
            f"(workload.trial_scratch: keep keeps it)"
        )

    def info(self) -> dict[str, Any]:
        """The report as the trial's ``info["trial_scratch"]`` (JSON; sizes in GB)."""
        return {
            "size_gb": self.size_bytes / BYTES_PER_GB,
            "limit_gb": self.limit_gb,
            "action": "cleaned" if self.cleaned else "kept",
            "cleaned_gb": self.freed_bytes / BYTES_PER_GB,
            "left_gb": self.left_bytes / BYTES_PER_GB,
            ("deleted" if self.cleaned else "largest"): [
                {"path": path, "gb": size / BYTES_PER_GB} for path, size in self.files[:NAMED_IN_INFO]
            ],
            "files": len(self.files),
            **({"failures": self.failures} if self.failures else {}),
        }


def needed_paths(workdir: Path, extra: Iterable[str | None]) -> set[str]:
    """Paths relative to ``workdir`` that are never deleted: :data:`TUNER_FILES` and each of ``extra``
    (a result's samples and ``output_path``) that lies inside ``workdir``."""
    root = os.path.realpath(workdir)
    needed = set(TUNER_FILES)
    for path in extra:
        if not path:
            continue
        relative = os.path.relpath(os.path.realpath(path), root)
        if relative != "." and not relative.startswith(".." + os.sep) and relative != "..":
            needed.add(relative)
    return needed


def scratch_files(workdir: Path, needed: set[str]) -> list[tuple[str, int]]:
    """The regular files under ``workdir`` that may be deleted, with their allocated bytes, largest first.

    Skipped: ``needed`` paths, everything under :data:`TUNER_DIRS`, symbolic links (never followed),
    files with more than one hard link.
    """
    found: list[tuple[str, int]] = []
    stack = [""]
    while stack:
        relative_dir = stack.pop()
        try:
            entries = list(os.scandir(workdir / relative_dir if relative_dir else workdir))
        except OSError:
            continue
        for entry in entries:
            relative = os.path.join(relative_dir, entry.name) if relative_dir else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if relative_dir or entry.name not in TUNER_DIRS:
                    stack.append(relative)
            elif stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and relative not in needed:
                blocks = getattr(info, "st_blocks", None)
                found.append((relative, blocks * 512 if blocks is not None else info.st_size))
    found.sort(key=lambda item: (-item[1], item[0]))
    return found


def tidy(workdir: Path, size_bytes: int, limit_gb: float, clean: bool, needed: set[str]) -> ScratchReport:
    """Bring ``workdir`` (``size_bytes`` on disk, over ``limit_gb``) within the limit by deleting its
    scratch largest first (``clean``), or only name its largest files; see the module docstring."""
    candidates = scratch_files(workdir, needed)
    if not clean:
        return ScratchReport(str(workdir), size_bytes, limit_gb, False, files=candidates[:NAMED_IN_INFO])
    limit_bytes = limit_gb * BYTES_PER_GB
    deleted: list[tuple[str, int]] = []
    failures: list[str] = []
    freed = 0
    for relative, size in candidates:
        if size_bytes - freed <= limit_bytes:
            break
        try:
            os.unlink(workdir / relative)
        except OSError as error:
            failures.append(f"{relative}: {error.strerror or error}")
            continue
        deleted.append((relative, size))
        freed += size
    return ScratchReport(str(workdir), size_bytes, limit_gb, True, freed, deleted, failures)


def append_note(log_path: Path, note: str) -> None:
    """Add ``note`` as the last line of the trial's log (when there is one); never raises."""
    if not log_path.is_file():
        return
    try:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\ntuner: {note}\n")
    except OSError:
        pass
