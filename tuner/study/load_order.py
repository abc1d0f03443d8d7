"""Which asked proposal runs next on a warm worker: one its loaded model serves, where one is at hand.

A warm worker (``workload.worker: warm``, a ``python`` workload) loads its model again whenever a ``reload_on``
value changes (``precision``, ``offload``, ``compile``...): a reload costs the load and, after it, a warm-up of
every shape the new load has not run. When the sampler flips such a value from one proposal to the next, the
study pays that again and again. :class:`LoadOrder` asks a few proposals ahead (``sampler.reload_lookahead``,
the most asked proposals waiting to start at once, the one about to start included) and starts first the one
whose ``reload_on`` values are those the slot's worker has loaded; the others wait, set aside, and start when
their values are loaded, when the sampler proposes the same setting again (it has little new left to ask: a grid
near its end), or when no more may be asked (the budget, a grid that proposed every setting).

What it does not change (why it does not bias the search): every proposal asked runs -- none is dropped or
chosen by its outcome, only its turn moves, and never past ``reload_lookahead - 1`` switches (the oldest one
set aside starts whenever nothing more may be asked: first in, first out); no more is asked ahead than the
trial budget still allows, so a study that ends on its trial budget runs everything it asked. The sampler sees
what a study with that many parallel slots sees: proposals asked before the results of the ones waiting are
told. A study stopped early (wall time, cancel, interrupt) gives the waiting proposals back, queued again for
a resume. Only search proposals wait (the sampler's, and settings queued as search trials, whose values are
fixed anyway), and a search trial parked for its shape's reference (:mod:`tuner.study.shapes`), which runs at the
reference's own values and so often leaves others loaded; the reference, the baseline and shape references start
in their turn. Off (in order) with ``reload_lookahead: 1``, without ``reload_on`` or with a fresh worker.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.runner.base import Slot
from tuner.spec.search.reload import reload_values, reloads_on

if TYPE_CHECKING:
    from tuner.spec.candidate import Candidate
    from tuner.spec.models import StudySpec

Held = tuple[Any, "Candidate", str]
"""An asked proposal that must run here: (the asked Optuna trial, its candidate, its role); the coordinator's
:data:`~tuner.study.coordinator_state.Held`."""

SEARCH_ROLE = "search"
"""The role of the proposals that may wait (the sampler's own)."""


@dataclass
class LoadOrder:
    """Orders asked proposals by the slot's loaded ``reload_on`` values (see the module docstring).

    ``window``: the most proposals asked and not started at once (1: in order). ``loaded``: slot index -> the
    ``reload_on`` values of the last trial started there. ``aside``: the proposals waiting, oldest first.
    """

    reload_on: tuple[str, ...]
    window: int
    loaded: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    aside: list[Held] = field(default_factory=list)

    @staticmethod
    def of(spec: StudySpec) -> LoadOrder:
        """The spec's order: its ``reload_on`` on a warm python workload, ``sampler.lookahead()`` proposals."""
        reload_on = reloads_on(spec)
        return LoadOrder(reload_on, spec.sampler.lookahead() if reload_on else 1)

    @property
    def active(self) -> bool:
        """Whether proposals are ever set aside (a window over one and something that reloads)."""
        return self.window > 1 and bool(self.reload_on)

    def started(self, slot: Slot, candidate: Candidate) -> None:
        """``candidate`` starts on ``slot``: its worker has (or loads) its ``reload_on`` values."""
        if self.reload_on:
            self.loaded[slot.index] = reload_values(self.reload_on, candidate.settings)

    def next_aside(self, slot: Slot | None, remaining: int | None, wanted: Collection[str] = ()) -> Held | None:
        """The waiting proposal to start on ``slot`` now, taken out: the oldest its worker's loaded values
        serve; else the oldest whose setting later proposals wait for (``wanted``: candidate keys, their twins
        are copied once it is measured -- a sampler that proposes it again has little new left to ask); else the
        oldest of all when no more may be asked (``remaining``: trials the budget still allows to start, None: no
        trial budget); else None (ask another)."""
        if not self.aside:
            return None
        loaded = self.loaded.get(slot.index) if slot is not None else None
        for index, held in enumerate(self.aside):
            if loaded is not None and reload_values(self.reload_on, held[1].settings) == loaded:
                return self.aside.pop(index)
        for index, held in enumerate(self.aside):
            if held[1].key in wanted:
                return self.aside.pop(index)
        if not self._room(1, remaining):
            return self.aside.pop(0)
        return None

    def keep(self, held: Held, slot: Slot | None, remaining: int | None) -> Held | None:
        """What starts on ``slot`` now that ``held`` was asked: ``held`` when its values are loaded there (or
        nothing is known loaded, or it is not a search proposal, or the order is off); None when ``held`` was set
        aside and another may be asked; the oldest waiting one when no more may be asked (``held`` waits)."""
        loaded = self.loaded.get(slot.index) if slot is not None else None
        if not self.active or loaded is None or held[2] != SEARCH_ROLE:
            return held
        if reload_values(self.reload_on, held[1].settings) == loaded:
            return held
        if self._room(2, remaining):
            self.aside.append(held)
            return None
        if not self.aside:
            return held
        self.aside.append(held)
        return self.aside.pop(0)

    def waiting_note(self, candidate: Candidate) -> str:
        """Why ``candidate``, set aside, has not started (the trial's ``waiting`` attribute)."""
        values = ", ".join(
            f"{n}={v}" for n, v in zip(self.reload_on, reload_values(self.reload_on, candidate.settings), strict=True)
        )
        return f"asked ahead: waits for a worker with {values} loaded"

    def waiting(self) -> int:
        """How many proposals wait, set aside."""
        return len(self.aside)

    def take_all(self) -> list[Held]:
        """Every waiting proposal, taken out (the study stops: they are given back)."""
        taken, self.aside = self.aside, []
        return taken

    def _room(self, asked: int, remaining: int | None) -> bool:
        """Whether the waiting proposals plus ``asked`` more fit the window and the trial budget left."""
        needed = len(self.aside) + asked
        return needed <= self.window and (remaining is None or needed <= remaining)
