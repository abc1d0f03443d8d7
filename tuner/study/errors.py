"""The study package's error: :class:`StudyError`, defined with the whole tree in :mod:`tuner.errors`
(imported from here and from :mod:`tuner.study.storage` by older call sites)."""

from __future__ import annotations

from tuner.errors import StudyError

__all__ = ["StudyError"]
