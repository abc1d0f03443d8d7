"""The study package's one error: :class:`StudyError` (re-exported by :mod:`tuner.study.storage`)."""

from __future__ import annotations


class StudyError(RuntimeError):
    """A study or storage that cannot be created, found, opened or reached; the message says why, in one line."""
