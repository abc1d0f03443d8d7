"""Chunk markers of a command: the lines a program prints when a chunk of its output is ready.

The spec's ``workload.command.chunks`` block (:class:`tuner.spec.adapters.ChunkMarkers`) names a
regular expression, the stream it is printed on and each chunk's seconds of output. For every call
the command adapter pipes that stream (the other one still goes straight to its log file) and a
:class:`ChunkTap` thread:

* reads the pipe as the program runs (``select`` + ``os.read``: the program never blocks on a full
  pipe while the tap is alive) and writes every byte, unchanged and unbuffered, to the call's log
  file (``call_<n>.stdout|.stderr``), so the log is whole even when the trial is killed;
* splits what it read into lines (``\\n``, ``\\r\\n`` or ``\\r``: a progress bar's rewrites end a
  line too) and, for each line the pattern matches (``re.search``, one chunk per line), marks a
  chunk on a wall-clock :class:`~tuner.evaluators.runtime.streaming.ChunkClock` the moment the line
  is read: a program that prints a marker has already synchronised its device work for that chunk;
* keeps reading after the program exits until end of file, so no line is lost; a line without a
  final newline counts at end of file. When processes the program left behind still hold the pipe
  open, the tap stops reading :data:`EXIT_GRACE_S` after the program's exit and goes on draining
  the pipe into the log in the background (nothing more counts for the call).

The clock starts just before the program is started, so ``time_to_first_chunk_s`` includes its
start-up (imports, loading weights): what a user waiting for the stream sees. A chunk's seconds of
output come from the pattern's ``(?P<seconds>...)`` group, else ``output_s``. When no marker was
printed, or a marker holds no usable seconds, every streaming figure of the call is unavailable with
the reason; none is invented.
"""

from __future__ import annotations

import math
import os
import re
import select
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tuner.evaluators.runtime.streaming import ChunkClock
from tuner.results import Direction, Metric
from tuner.spec.metrics import STREAMING_METRICS, catalogue_entry

EXIT_GRACE_S = 1.0
"""Seconds the tap waits for end of file after the program exits (longer only when something it
started still holds the pipe)."""
MAX_LINE_BYTES = 1 << 20
"""A longer line without a line end is matched on its last MiB only (the log keeps it whole)."""
_LINE_END = re.compile(rb"\r\n|\r|\n")


class ChunkTap:
    """The chunk markers of one call of a command (see the module docs); ``options`` = the chunks block."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.stream: str = options.get("stream", "stdout")
        self.pattern = str(options["pattern"])
        self._marker = re.compile(self.pattern)
        self._output_s: float | None = options.get("output_s")
        self._clock = ChunkClock()
        self._problem: str | None = None
        self._markers = 0
        self._lines = 0
        self._stop_at: float | None = None
        self._thread: threading.Thread | None = None
        self._log: IO[bytes] | None = None

    def begin(self, log_path: Path) -> None:
        """The call starts now: open its log file for the marker stream (call just before starting the program)."""
        self._log = open(log_path, "wb", buffering=0)  # noqa: SIM115 - open for the call, closed by finish()
        self._clock.begin()

    def follow(self, pipe: IO[bytes]) -> None:
        """Read ``pipe`` (the program's marker stream) into the log on a daemon thread."""
        assert self._log is not None, "begin() first"
        self._thread = threading.Thread(target=self._read, args=(pipe, self._log), daemon=True, name="chunk-tap")
        self._thread.start()

    def finish(self) -> None:
        """The program has exited (or never started): wait for the rest of its lines (at most
        :data:`EXIT_GRACE_S` without end of file)."""
        self._stop_at = time.monotonic() + EXIT_GRACE_S
        if self._thread is not None:
            self._thread.join(EXIT_GRACE_S + 1.0)
        elif self._log is not None:
            self._log.close()

    def metrics(self) -> list[Metric]:
        """The call's :data:`~tuner.spec.metrics.STREAMING_METRICS`, or each unavailable with the reason."""
        reason = self._problem
        if reason is None and self._markers == 0:
            reason = (
                f"the program printed no chunk marker: none of its {self._lines} {self.stream} line(s) "
                f"matches chunks.pattern {self.pattern!r}"
            )
        if reason is None:
            return self._clock.metrics()
        return [Metric.unavailable(name, *_catalogued(name), reason) for name in STREAMING_METRICS]

    # ----------------------------------------------------------------- the thread
    def _read(self, pipe: IO[bytes], log: IO[bytes]) -> None:
        """Copy ``pipe`` into ``log`` until end of file (or the grace after exit), marking chunks line by line."""
        fd, pending, at_end = pipe.fileno(), b"", False
        try:
            while not self._past_grace():
                ready, _, _ = select.select([fd], [], [], 0.05)
                if not ready:
                    continue
                data = os.read(fd, 65536)
                if not data:
                    at_end = True
                    break
                _write(log, data)
                *lines, pending = _LINE_END.split(pending + data)
                pending = pending[-MAX_LINE_BYTES:]
                for line in lines:
                    self._line(line)
            if pending:
                self._line(pending)  # printed without a final line end
        finally:
            if at_end:
                log.close()
                pipe.close()
            else:
                _drain_later(pipe, log)

    def _past_grace(self) -> bool:
        stop_at = self._stop_at
        return stop_at is not None and time.monotonic() > stop_at

    def _line(self, raw: bytes) -> None:
        """One whole line: a chunk when the marker pattern matches it."""
        self._lines += 1
        text = raw.decode("utf-8", errors="replace")
        match = self._marker.search(text)
        if match is None or self._problem is not None:
            return
        seconds: Any = match.groupdict().get("seconds")
        if seconds is None:
            seconds = self._output_s
        try:
            output_s = float(seconds) if seconds is not None else math.nan
        except ValueError:
            output_s = math.nan
        if not math.isfinite(output_s) or output_s < 0:
            self._problem = f"{self.stream} line {self._lines} {text.strip()[:200]!r} matches chunks.pattern but " + (
                f"its group 'seconds' holds {seconds!r}, not a number of seconds >= 0"
                if seconds is not None
                else "without its group 'seconds', and chunks.output_s is not set"
            )
            return
        self._markers += 1
        self._clock.chunk(output_s)


def _catalogued(name: str) -> tuple[str, Direction]:
    """(unit, direction) of a streaming figure."""
    entry = catalogue_entry(name)
    assert entry is not None, name
    return entry


def _write(log: IO[bytes], data: bytes) -> None:
    """Append to the log; a full disk must not stop the pipe from being drained."""
    try:
        log.write(data)
    except OSError:
        pass


def _drain_later(pipe: IO[bytes], log: IO[bytes]) -> None:
    """Keep copying what processes left behind by the program print, on another daemon thread, so they never
    block on a full pipe; nothing of it counts as a chunk."""

    def drain() -> None:
        try:
            for data in iter(lambda: os.read(pipe.fileno(), 65536), b""):
                _write(log, data)
        finally:
            log.close()
            pipe.close()

    threading.Thread(target=drain, daemon=True, name="chunk-tap-drain").start()
