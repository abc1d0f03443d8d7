"""The ``outputs`` block of a command workload: which files the program writes, and where its audio is.

Output paths (``outputs.video|audio|text``) are deleted before each call, so their shape
must keep them inside the trial directory (:func:`output_syntax_problem`, checked with the
block; the placeholder and ``cwd:`` rules are in :func:`tuner.spec.adapters.output_path_problems`).
``audio_from_input`` names the input whose audio file the program copies into its video
(:func:`audio_from_input_problem`, checked once the spec's inputs are known).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


OUTPUT_KINDS = ("video", "audio", "text")
"""The declared output files of a command block (``outputs.<kind>``)."""

OUTPUT_HINT = (
    "an output must be a relative path inside the trial directory that starts with a name, "
    "like 'out.wav' or 'results/{seed}/out_{steps}.wav'"
)
"""What to write instead, appended to every refusal of an output path."""


def output_refusal(template: str, why: str) -> str:
    """The refusal of output path ``template`` because of ``why``, with :data:`OUTPUT_HINT`."""
    return (
        f"{template!r} may point outside the trial directory: {why} ({OUTPUT_HINT}); "
        f"the tuner deletes outputs before each call"
    )


def output_syntax_problem(template: str) -> str | None:
    """Why ``template`` (an ``outputs.<kind>`` value) could name a file outside the trial directory
    whatever values fill it, or None when its shape is safe.

    Refused: an empty path, an absolute path, a ``..`` segment, a path that is only ``.``
    segments (the directory itself), and a path that starts with a placeholder (its value
    could make the path absolute: ``{audio}``, ``{dir}/out.wav``). Values that still escape
    (a parameter value holding ``../``) are refused when the call runs
    (:mod:`tuner.adapters.command`).
    """
    if not template.strip():
        return output_refusal(template, "it is empty")
    if template.startswith("/"):
        return output_refusal(template, "it is an absolute path")
    segments = template.split("/")
    if ".." in segments:
        return output_refusal(template, "it has a '..' segment")
    if all(segment in ("", ".") for segment in segments):
        return output_refusal(template, "it names the directory itself, not a file")
    if template.startswith("{") and not template.startswith("{{"):
        return output_refusal(template, "it starts with a placeholder, whose value could make it any path")
    return None


class CommandOutputs(_Strict):
    """Files the program writes, relative to its working directory (templates allowed).

    ``video``: ``.npz`` (array ``video``) or a container OpenCV reads (``.mp4``, ``.avi``);
    ``audio``: ``.wav`` (PCM) or ``.npz`` (``audio``, ``audio_rate``); ``text``: a UTF-8
    file, one answer per line. ``text_from_stdout`` takes the answer from stdout instead.
    The output's audio (for the lip-sync proxy) is, first found: the ``audio`` file; the
    audio track of a ``video`` container; the input named by ``audio_from_input`` (a
    .wav / .npz path the program copies, time-aligned, into its video).
    """

    video: str | None = None
    audio: str | None = None
    text: str | None = None
    text_from_stdout: bool = False
    audio_from_input: str | None = None

    @field_validator("video", "audio", "text")
    @classmethod
    def _inside_trial_directory(cls, value: str | None) -> str | None:
        """Contract: the tuner deletes a declared output before each call, so every path must stay
        inside the trial directory. Shapes that could leave it are refused here
        (:func:`output_syntax_problem`); placeholders naming inputs by :func:`output_path_problems`
        (which needs the spec's inputs); rendered paths that resolve outside (``..`` in a value,
        a symlink) when the call runs (:mod:`tuner.adapters.command`). (Kept out of the class
        docstring, which is the JSON schema's description.)"""
        if value is not None:
            problem = output_syntax_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _audio_from_input_needs_a_video(self) -> CommandOutputs:
        """``audio_from_input`` stands in for a video's missing audio track: it needs a ``video``
        output and no ``audio`` file (which would always win). That it names an input holding a
        path is checked by :func:`audio_from_input_problem`, which needs the spec's inputs."""
        if self.audio_from_input is None:
            return self
        key = "workload.command.outputs.audio_from_input"
        if self.audio is not None:
            raise ValueError(
                f"{key}: give audio (a file the program writes) or audio_from_input (an input "
                f"the program copies into its video), not both: the audio file would always win"
            )
        if self.video is None:
            raise ValueError(
                f"{key}: needs a video output: it is the audio of the video when the video "
                f"file has no audio track of its own"
            )
        return self

    def declared(self) -> list[tuple[str, str]]:
        """(kind, template) of every declared output file."""
        return [(kind, getattr(self, kind)) for kind in OUTPUT_KINDS if getattr(self, kind) is not None]


AUDIO_INPUT_SUFFIXES = (".wav", ".npz")
"""What ``outputs.audio_from_input`` may name: an audio file :func:`tuner.adapters.media.read_audio` reads."""


def audio_from_input_problem(outputs: CommandOutputs, inputs: dict[str, Any]) -> str | None:
    """Why ``outputs.audio_from_input`` does not name a usable input, or None.

    It must be the name of an input (not a ``{placeholder}``) whose value is a path
    ending in ``.wav`` or ``.npz``. Whether the file exists is checked when the call's
    outputs are read (a missing file makes the lip-sync metrics unavailable, with why).
    """
    name = outputs.audio_from_input
    if name is None:
        return None
    if name not in inputs:
        return (
            f"'{name}' is not an input (give the name of the input holding the audio file the program "
            f"copies into its video, e.g. audio; inputs: {sorted(inputs)})"
        )
    value = inputs[name]
    if not isinstance(value, str) or not value.lower().endswith(AUDIO_INPUT_SUFFIXES):
        return (
            f"input '{name}' is {value!r}, not the path of a .wav or .npz audio file "
            f"(audio_from_input names the input holding the program's audio file)"
        )
    return None
