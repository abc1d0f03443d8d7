"""The ``command`` adapter: a user's program, run once per measured call, never through a shell.

Built by the worker from the spec's ``workload.command`` block
(:class:`tuner.spec.adapters.CommandSpec`). Per call it:

* renders ``argv`` (one template item = one argv item; ``{flag, when}`` items only
  when the bool is true), ``env`` (added to the worker's environment, which
  already pins the slot's GPUs through ``CUDA_VISIBLE_DEVICES`` and thread counts)
  and ``cwd`` (default: a fresh ``<trial>/run`` directory, where relative output
  paths land);
* starts the program with ``execve`` (no shell) in the worker's process group,
  so the worker's process-tree memory sampler counts it and its children
  (torchrun's ranks), and a trial timeout kills them all (the runner finds even
  those in other sessions by their process tag, :mod:`tuner.runner.reaper`);
* keeps stdout and stderr per call in ``<trial>/command/call_<n>.stdout|.stderr``; with a
  ``chunks`` block, the markers' stream goes through a pipe that a :class:`~tuner.adapters.chunk_tap.ChunkTap`
  reads as the program prints (into the same log file), timing each marker line as a chunk
  (``PYTHONUNBUFFERED=1`` is set unless the spec's ``env`` says otherwise, so a Python program's
  markers are not held in its buffer); the streaming figures of the last call are measured metrics;
* classifies a failure (non-zero exit or death by a signal), first rule that holds:

  1. INVALID -- a log line shows the program refused its arguments: a line
     matching an argument-parser pattern (:data:`~tuner.spec.adapters.DEFAULT_INVALID_PATTERNS`:
     ``error: unrecognized arguments``, ``error: argument --x: ...``, ``invalid
     choice``, click's ``Error: No such option`` ... plus ``invalid_patterns``), or
     argparse's ``parser.error()`` shape (a ``usage:`` line, then ``<prog>: error: ...``).
     This holds whatever the exit status (torchrun turns a rank's 2 into 1);
  2. OOM -- a log line matches an OOM pattern (``CUDA out of memory``,
     ``torch.OutOfMemoryError``, ... plus ``oom_patterns``), or the kernel's OOM
     killer killed a process of this cgroup during the call (:func:`tuner.host.oom_kill_count`
     rose: a rank that was OOM-killed, or the program itself);
  3. INVALID -- the exit status is in ``invalid_exit_codes`` (argparse's 2);
  4. CRASH -- anything else; a SIGKILL without the evidence above is a CRASH whose
     reason says it came from outside the tuner and nothing showed an OOM.

  The reason starts with the program, its status and the whole log line that
  decided (never a fragment), followed by the end of its log in whole lines;
* reads the declared outputs (video / audio / text) and the declared regex metrics.
  The output's audio (for the lip-sync proxy) is, first found: the declared ``audio``
  file; the audio track of a ``video`` container (``.mp4`` ..., decoded with PyAV:
  OpenCV, which reads the frames, drops audio); the file named by the input
  ``outputs.audio_from_input`` (the program copies it, time-aligned, into its video).
  When none is found the output is a :class:`CommandOutput` whose
  ``audio_unavailable_reason`` says why, and the lip-sync metrics carry that reason.

Outputs stay inside the trial directory. Before each call the declared outputs are
deleted (a stale file must not pass for a new one), so every rendered output path is
first resolved (following symlinks, also a dangling one) and must lie inside the
trial directory (``RunContext.workdir``); otherwise the call is refused as INVALID with
the path in the reason and nothing is deleted or read (the spec check refuses the
shapes that could escape; this catches values such as ``../`` in a parameter, a ``cwd:``
outside, or a symlink the program left in the trial directory). The same check runs
again before the outputs are read.

Wall time is measured from outside by the worker around :meth:`run`. The exact
argv, env and cwd are kept in :attr:`CommandWorkload.invocation`, which the worker
reports and the coordinator stores as the trial's ``invocation``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.adapters.chunk_tap import ChunkTap
from tuner.adapters.media import MediaError, is_container, read_audio, read_container_audio, read_text, read_video
from tuner.adapters.template import TemplateError, command_values, render_command, render_text
from tuner.errors import WorkloadError
from tuner.host import oom_kill_count
from tuner.results import Metric
from tuner.secrets import child_environment
from tuner.spec.adapters import DEFAULT_INVALID_PATTERNS, DEFAULT_OOM_PATTERNS
from tuner.workloads.base import InvalidSetting, RunContext, Workload, WorkloadOutput

LOG_TAIL_CHARS = 1500
_ARGPARSE_ERROR = re.compile(r"^usage: [^\n]*\n(?:[^\n]*\n){0,200}?(\S+: error: [^\n]*)", re.MULTILINE)
"""argparse's ``parser.error()``: a ``usage:`` line, then (within 200 lines) ``<prog>: error: <message>``."""


class CommandOutOfMemory(WorkloadError, MemoryError):
    """The program ran out of (device or host) memory: outcome OOM."""


class CommandFailed(WorkloadError, RuntimeError):
    """The program exited with an error that is neither OOM nor a refused setting: outcome CRASH."""


@dataclass
class CommandOutput(WorkloadOutput):
    """A command's output. ``audio_unavailable_reason``: why ``audio`` is None although a video was
    read (no audio track, no ``audio_from_input``, an unreadable file); the lip-sync proxy reports it."""

    audio_unavailable_reason: str | None = None


class CommandWorkload(Workload):
    """Runs the spec's ``command`` block (see module docs). ``options`` = the block as plain data."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self.invocation: dict[str, Any] | None = None
        self._run_dir: Path | None = None
        self._log_dir: Path | None = None
        self._calls = 0
        self._found: dict[str, float] = {}
        self._tap: ChunkTap | None = None
        patterns = list(DEFAULT_OOM_PATTERNS) + list(self.options.get("oom_patterns", []))
        self._oom = re.compile("|".join(f"(?:{p})" for p in patterns), re.MULTILINE)
        refusals = list(DEFAULT_INVALID_PATTERNS) + list(self.options.get("invalid_patterns", []))
        self._invalid = re.compile("|".join(f"(?:{p})" for p in refusals), re.MULTILINE)

    def setup(self, params: Mapping[str, Any], context: RunContext) -> None:
        """Render the invocation and make the trial's directories (not timed)."""
        try:
            rendered = render_command(self.options, params, context.inputs, context.seed)
        except TemplateError as error:
            raise InvalidSetting(f"command: {error}") from None
        self.invocation = {"kind": "command", **rendered}
        self._run_dir = Path(rendered["cwd"]) if rendered["cwd"] is not None else context.workdir / "run"
        self._run_dir.mkdir(parents=True, exist_ok=True)
        self._log_dir = context.workdir / "command"
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self._found = {}

    def run(self, params: Mapping[str, Any], context: RunContext) -> WorkloadOutput:
        if self.invocation is None or self._run_dir is None or self._log_dir is None:
            self.setup(params, context)
        assert self.invocation is not None and self._run_dir is not None and self._log_dir is not None
        outputs = self._output_paths(params, context)
        for path in outputs.values():
            path.unlink(missing_ok=True)  # inside the trial directory: checked by _output_paths
        self._calls += 1
        stdout_path = self._log_dir / f"call_{self._calls}.stdout"
        stderr_path = self._log_dir / f"call_{self._calls}.stderr"
        unbuffered = {"PYTHONUNBUFFERED": "1"} if self.options.get("chunks") else {}  # markers as printed
        env = {**child_environment(), **unbuffered, **self.invocation["env"]}  # no tuner secrets; the spec's env wins
        self._tap = ChunkTap(self.options["chunks"]) if self.options.get("chunks") else None
        oom_kills_before = oom_kill_count()
        returncode = self._launch(env, {"stdout": stdout_path, "stderr": stderr_path}, self._tap)
        stdout = stdout_path.read_text(errors="replace")
        stderr = stderr_path.read_text(errors="replace")
        if returncode != 0:
            oom_kills_after = oom_kill_count()
            oom_kills = (
                oom_kills_after - oom_kills_before
                if oom_kills_before is not None and oom_kills_after is not None
                else 0
            )
            self._raise_for_failure(returncode, stdout, stderr, oom_kills)
        self._parse_metrics(stdout + "\n" + stderr)
        for kind, path in outputs.items():
            _require_inside(path, context.workdir, f"outputs.{kind} ({path}, after the call)")
        return self._read_outputs(outputs, stdout, context.inputs)

    def measured_metrics(self) -> list[Metric]:
        """The declared regex metrics of the last call (unavailable, with a reason, when not printed), and
        with a ``chunks`` block its streaming figures (:mod:`tuner.adapters.chunk_tap`)."""
        metrics = []
        for declared in self.options.get("metrics", []):
            name = declared["name"]
            value = self._found.get(name)
            if value is None:
                metrics.append(
                    Metric.unavailable(
                        name,
                        declared["unit"],
                        declared["direction"],
                        f"the program printed no line matching {declared['regex']!r}",
                    )
                )
            else:
                metrics.append(Metric(name, value, declared["unit"], declared["direction"]))
        return metrics + (self._tap.metrics() if self._tap is not None else [])

    # ----------------------------------------------------------------- helpers
    def _launch(self, env: dict[str, str], logs: dict[str, Path], tap: ChunkTap | None) -> int:
        """Run the program to its exit, its ``stdout`` / ``stderr`` into the ``logs`` files (the chunk markers'
        stream through ``tap``, read as it is printed); its exit status."""
        assert self.invocation is not None
        piped = tap.stream if tap is not None else None
        with ExitStack() as files:
            sinks = {
                name: subprocess.PIPE if name == piped else files.enter_context(open(path, "wb"))
                for name, path in logs.items()
            }
            if tap is not None:
                tap.begin(logs[tap.stream])
            try:
                process = subprocess.Popen(
                    self.invocation["argv"],
                    cwd=self._run_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=sinks["stdout"],
                    stderr=sinks["stderr"],
                )
            except OSError as error:
                if tap is not None:
                    tap.finish()
                raise CommandFailed(f"cannot start {self.invocation['argv'][0]!r}: {error}") from None
            try:
                if tap is not None:
                    pipe = process.stdout if piped == "stdout" else process.stderr
                    assert pipe is not None
                    tap.follow(pipe)
                return process.wait()
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
                if tap is not None:
                    tap.finish()

    def _output_paths(self, params: Mapping[str, Any], context: RunContext) -> dict[str, Path]:
        """kind -> rendered output path; InvalidSetting when one resolves outside the trial directory."""
        assert self._run_dir is not None
        values = command_values(params, context.inputs, int(self.options.get("gpus", 1)), context.seed)
        paths: dict[str, Path] = {}
        for kind in ("video", "audio", "text"):
            template = dict(self.options.get("outputs", {})).get(kind)
            if template is not None:
                try:
                    rendered = render_text(template, values, f"outputs.{kind}")
                except TemplateError as error:
                    raise InvalidSetting(f"command: {error}") from None
                paths[kind] = self._run_dir / rendered
                _require_inside(paths[kind], context.workdir, f"outputs.{kind} {template!r} ({paths[kind]})")
        return paths

    def _raise_for_failure(self, returncode: int, stdout: str, stderr: str, oom_kills: int = 0) -> None:
        """Raise the exception that classifies a failed call (rules in the module docstring)."""
        tail = _tail_lines(stderr, LOG_TAIL_CHARS) or _tail_lines(stdout, LOG_TAIL_CHARS)
        program = Path(self.invocation["argv"][0]).name if self.invocation else "command"
        status = (
            f"killed by signal {signal.Signals(-returncode).name}"
            if returncode < 0 and -returncode in signal.valid_signals()
            else f"exit status {returncode}"
        )
        refusal = self._refusal_line(stderr) or self._refusal_line(stdout)
        if refusal is not None:
            raise InvalidSetting(f"{program} refused the setting ({status}): {refusal}\n{tail}")
        match = self._oom.search(stderr) or self._oom.search(stdout)
        if match is not None:
            raise CommandOutOfMemory(f"{program}: out of memory ({status}): {_line_of(match)}\n{tail}")
        if oom_kills > 0:
            raise CommandOutOfMemory(
                f"{program}: out of memory ({status}): the kernel's OOM killer killed "
                f"{oom_kills} process(es) of this cgroup during the call "
                f"(memory.events oom_kill)\n{tail}"
            )
        if returncode in self.options.get("invalid_exit_codes", [2]):
            raise InvalidSetting(f"{program} refused the setting ({status})\n{tail}")
        if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
            raise CommandFailed(
                f"{program}: {status}, not sent by the tuner; no sign of out-of-memory (the "
                f"cgroup's oom_kill count did not rise, no OOM message in its log)\n{tail}"
            )
        raise CommandFailed(f"{program}: {status}\n{tail}")

    def _refusal_line(self, text: str) -> str | None:
        """The whole log line that shows an argument-parser refusal, or None."""
        match = self._invalid.search(text)
        if match is not None:
            return _line_of(match)
        usage = _ARGPARSE_ERROR.search(text)
        return usage.group(1).strip() if usage is not None else None

    def _parse_metrics(self, text: str) -> None:
        for declared in self.options.get("metrics", []):
            matches = list(re.finditer(declared["regex"], text))
            if not matches:
                self._found.pop(declared["name"], None)
                continue
            last = matches[-1]
            raw = last.group(1) if last.groups() else last.group(0)
            try:
                self._found[declared["name"]] = float(raw)
            except ValueError:
                self._found.pop(declared["name"], None)

    def _read_outputs(self, paths: dict[str, Path], stdout: str, inputs: Mapping[str, Any]) -> CommandOutput:
        output = CommandOutput()
        for kind, path in paths.items():
            if not path.exists():
                raise CommandFailed(f"the program exited 0 but did not write its {kind} output {path}")
        if "video" in paths:
            output.video = read_video(paths["video"])
        if "audio" in paths:
            output.audio, output.audio_rate = read_audio(paths["audio"])
        elif "video" in paths:
            output.audio, output.audio_rate, output.audio_unavailable_reason = self._audio_of_video(
                paths["video"], inputs
            )
        if "text" in paths:
            output.text = read_text(paths["text"])
        elif dict(self.options.get("outputs", {})).get("text_from_stdout"):
            output.text = [stdout.strip()]
        output.counters["command_calls"] = float(self._calls)
        return output

    def _audio_of_video(self, video: Path, inputs: Mapping[str, Any]) -> tuple[Any, int | None, str | None]:
        """(mono float32 samples, rate in Hz, None), or (None, None, why): the video container's
        audio track, else the file of the ``outputs.audio_from_input`` input (see module docs)."""
        if not is_container(video):
            missing = f"the video output {video.name} is a numpy array file, which has no audio track"
        else:
            try:
                track = read_container_audio(video)
            except MediaError as error:
                track, missing = None, f"the audio track of the video output {video.name} cannot be read ({error})"
            else:
                if track is not None:
                    return track[0], track[1], None
                missing = f"the video output {video.name} has no audio track"
        name = dict(self.options.get("outputs", {})).get("audio_from_input")
        if name is None:
            return (
                None,
                None,
                (
                    f"{missing}, and the spec declares neither outputs.audio (an audio file the "
                    f"program writes) nor outputs.audio_from_input (the input whose audio file "
                    f"the program copies into its video)"
                ),
            )
        source = inputs.get(name)
        try:
            audio, rate = read_audio(Path(str(source)))
        except (MediaError, OSError, KeyError) as error:
            return (
                None,
                None,
                (f"{missing}, and the audio file of input {name!r} (outputs.audio_from_input) cannot be read: {error}"),
            )
        return audio, rate, None


def _require_inside(path: Path, trial_dir: Path, what: str) -> None:
    """Raise InvalidSetting unless ``path``, resolved through every symlink (a dangling one too),
    lies strictly inside ``trial_dir``; ``what`` names the output in the reason."""
    root = Path(os.path.realpath(trial_dir))
    resolved = Path(os.path.realpath(path))
    if root in resolved.parents:
        return
    raise InvalidSetting(
        f"command: {what} resolves to {resolved}, outside the trial directory {root}: the tuner "
        f"refuses to delete or read it (an output must be a relative path inside the trial "
        f"directory, like 'out.wav')"
    )


def _tail_lines(text: str, limit: int) -> str:
    """The last whole lines of ``text`` that fit in ``limit`` characters (the last line alone if longer)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text.find("\n", len(text) - limit)
    return text[cut + 1 :] if cut >= 0 else text[-limit:]


def _line_of(match: re.Match[str]) -> str:
    """The whole log line holding ``match``."""
    text = match.string
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end >= 0 else len(text)].strip()
