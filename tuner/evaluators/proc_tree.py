"""A process tree read from ``/proc`` cheaply: open files per member, births found by pid (Linux).

Used by :class:`tuner.evaluators.process_tree.ProcessTreeSampler` (issue 27: the sampler's own
cost). Each member's ``statm`` (current RSS, ~4 us a read) and ``status`` (``VmHWM``, the kernel's
RSS high-water mark, ~40 us) stay open: a read is one ``pread``, and the open file pins the
process, so a reused pid is never taken for it. A birth anywhere on the host moves
``/proc/loadavg``'s last pid; only the pids created since are examined. :class:`PsutilTree` is
the fallback where ``/proc`` is not usable (current RSS only). Bytes throughout.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import psutil

from tuner import gpu

_MAX_PID_SCAN = 512
"""More new pids than this since the last look (or a wrapped counter): scan all of ``/proc`` instead."""
_STATUS_FIELDS = re.compile(rb"^(Tgid|PPid|VmRSS|VmHWM):\s+(\d+)", re.M)
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _read_fields(fd: int) -> dict[bytes, int] | None:
    """``Tgid``, ``PPid`` and (a process with memory) ``VmRSS`` / ``VmHWM`` in bytes of an open
    ``status`` file; None when the process is gone."""
    try:
        data = os.pread(fd, 4096, 0)
    except OSError:
        return None
    fields = {name: int(value) for name, value in _STATUS_FIELDS.findall(data)}
    for name in (b"VmRSS", b"VmHWM"):
        if name in fields:
            fields[name] *= 1024
    return fields or None


def _read_rss(fd: int) -> int | None:
    """Current RSS in bytes of an open ``statm`` file (0 for a zombie); None when the process is gone."""
    try:
        return int(os.pread(fd, 256, 0).split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class _Member:
    status_fd: int
    statm_fd: int
    last_hwm: int
    """``VmHWM`` at the previous read of it (0 for a process born in the window: all of its mark counts)."""

    def close(self) -> None:
        """Close both files."""
        os.close(self.status_fd)
        os.close(self.statm_fd)


def _open_status(pid: int) -> tuple[int, dict[bytes, int]] | None:
    """A process's ``status`` opened and read; None when it is not there or unreadable."""
    try:
        fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    fields = _read_fields(fd)
    if fields is None:
        os.close(fd)
    return None if fields is None else (fd, fields)


def _member(pid: int, status_fd: int, last_hwm: int) -> _Member | None:
    """A member from its open ``status`` (closed here on failure); its ``statm`` is opened too."""
    try:
        return _Member(status_fd, os.open(f"/proc/{pid}/statm", os.O_RDONLY | os.O_CLOEXEC), last_hwm)
    except OSError:
        os.close(status_fd)
        return None


class ProcTree:
    """A process tree kept from ``/proc``: members with open ``status`` / ``statm``, births found by pid.

    :meth:`update` adds the descendants created since the last look (``/proc/loadavg``'s last pid
    says whether any process was created on the host at all); :meth:`sample` reads each member
    and drops those that are gone. Members stay until they exit (an orphan still counts).
    """

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.members: dict[int, _Member] = {}
        self._loadavg_fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        self._last_pid = self._read_last_pid()
        self._full_scan(born_in_window=False)

    @staticmethod
    def usable() -> bool:
        """True where ``/proc/loadavg`` and this process's ``status`` (with ``VmHWM``) can be read."""
        opened = _open_status(os.getpid())
        if opened is None:
            return False
        os.close(opened[0])
        return b"VmHWM" in opened[1] and os.access("/proc/loadavg", os.R_OK)

    def _read_last_pid(self) -> int | None:
        try:
            return int(os.pread(self._loadavg_fd, 256, 0).split()[-1])
        except (OSError, ValueError, IndexError):
            return None

    def update(self, full: bool) -> bool:
        """Add descendants born since the last look (all of ``/proc`` when ``full``); True if any was added."""
        before = len(self.members)
        last_pid = self._read_last_pid()
        if full or last_pid is None or self._last_pid is None or not (0 <= last_pid - self._last_pid <= _MAX_PID_SCAN):
            self._full_scan(born_in_window=True)
        elif last_pid != self._last_pid:
            for pid in range(self._last_pid + 1, last_pid + 1):  # parents before their children
                self._consider(pid)
        self._last_pid = last_pid
        return len(self.members) > before

    def _full_scan(self, born_in_window: bool) -> None:
        try:
            pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
        except OSError:
            return
        found = {pid: opened for pid in pids if pid not in self.members and (opened := _open_status(pid))}
        children: dict[int, list[int]] = {}
        for pid, (_, fields) in found.items():
            children.setdefault(fields.get(b"PPid", 0), []).append(pid)
        queue = [self.root_pid] + list(self.members)
        while queue:
            pid = queue.pop()
            if pid in found:
                fd, fields = found.pop(pid)
                member = _member(pid, fd, 0 if born_in_window else fields.get(b"VmHWM", 0))
                if member is not None:
                    self.members[pid] = member
            if pid in self.members:
                queue += children.get(pid, [])
        for fd, _ in found.values():
            os.close(fd)

    def _consider(self, pid: int) -> None:
        opened = _open_status(pid)
        if opened is None:
            return
        fd, fields = opened
        is_process = fields.get(b"Tgid") == pid  # a thread's id is a pid too: skip threads
        if is_process and pid not in self.members and fields.get(b"PPid") in self.members:
            member = _member(pid, fd, 0)  # born in the window: all of its high-water mark is the window's
            if member is not None:
                self.members[pid] = member
        else:
            os.close(fd)

    def sample(self, marks: bool) -> tuple[int | None, bool]:
        """(summed RSS of the members, True if one exited since the last sample).

        With ``marks`` (and for a member not read yet) a member counts its ``VmHWM`` when that
        rose since its previous read -- the spike in between -- else its current RSS; without,
        its current RSS (``statm``, a tenth of the cost of ``status``). None when no member has memory.
        """
        total: int | None = None
        exited = False
        for pid, member in list(self.members.items()):
            if marks or member.last_hwm == 0:
                fields = _read_fields(member.status_fd)
                rss = None if fields is None else fields.get(b"VmRSS", 0)  # a zombie has no Vm lines
                hwm = 0 if fields is None else fields.get(b"VmHWM", 0)
                if rss is not None and hwm > member.last_hwm:
                    rss, member.last_hwm = max(rss, hwm), hwm
            else:
                rss = _read_rss(member.statm_fd)
            if rss is None:
                member.close()
                del self.members[pid]
                exited = True
                continue
            total = (total or 0) + rss
        return total, exited

    def close(self) -> None:
        """Close every member's files and ``/proc/loadavg``."""
        for member in self.members.values():
            member.close()
        self.members = {}
        os.close(self._loadavg_fd)


class PsutilTree:
    """Where ``/proc`` is not usable: the tree walked with psutil, current RSS only (no high-water marks)."""

    def __init__(self, root_pid: int, refresh_s: float) -> None:
        self.root_pid = root_pid
        self._refresh_s = refresh_s
        self._refreshed_at = -float("inf")
        self.members: dict[int, psutil.Process] = {}

    def update(self, full: bool) -> bool:
        """Re-walk the tree when ``refresh_s`` has passed (or ``full``); True if a process was added."""
        now = time.monotonic()
        if not full and now - self._refreshed_at < self._refresh_s:
            return False
        self._refreshed_at = now
        current = gpu.process_tree_pids(self.root_pid)
        found = {pid: self.members.get(pid) or _process_or_none(pid) for pid in current}
        added = bool(set(found) - set(self.members))
        self.members = {pid: p for pid, p in found.items() if p is not None}
        return added

    def sample(self, marks: bool) -> tuple[int | None, bool]:
        """(summed current RSS of the members, True if one was found gone); no marks to read here."""
        total: int | None = None
        exited = False
        for pid, process in list(self.members.items()):
            try:
                total = (total or 0) + int(process.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                exited = True
                del self.members[pid]
        return total, exited

    def close(self) -> None:
        """Nothing to release."""
        self.members = {}


def _process_or_none(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
