"""Claims on settings: a setting (canonical candidate key) is run by one trial of a study, fleet-wide.

Coordinators on many hosts ask Optuna at the same time and may be proposed the
same setting. Before a trial runs, its coordinator claims the setting's key in
a table of tuner's own (``tuner_candidate_claims``) in the storage's database —
an atomic insert, so of two coordinators claiming at once exactly one wins. The
loser reads the holder: measured with values -> the proposal is a copy of it;
still running -> the proposal waits to be copied; finished without a result
(interrupted, crashed, taken over as stale) -> the claim is taken over by an
atomic update naming the old holder, so again exactly one coordinator re-runs it.

Every database call rides through a storage outage (:func:`tuner.storage.outage.call_through_outage`);
a claim found held by the claiming trial itself (its insert committed just before the connection
dropped) is that trial's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner.storage.attributes import is_measured
from tuner.storage.outage import call_through_outage
from tuner.storage.store import engine_of, trial_by_number
from tuner.storage.store_rows import ensure_tables


def claims_table(metadata: Any) -> Any:
    """The ``tuner_candidate_claims`` table in ``metadata``."""
    from sqlalchemy import Column, Integer, String, Table

    return Table(
        "tuner_candidate_claims",
        metadata,
        Column("study_name", String(255), primary_key=True),
        Column("candidate_key", String(64), primary_key=True),
        Column("trial_number", Integer, nullable=False),
    )


@dataclass
class Claims:
    """The claims of ``study_name`` in the database behind ``engine`` (a SQLAlchemy engine)."""

    engine: Any
    study_name: str
    _ready: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        from sqlalchemy import MetaData

        self._metadata = MetaData()
        self._claims = claims_table(self._metadata)

    def _create(self) -> None:
        if not self._ready:
            ensure_tables(self._metadata, self.engine)
            self._ready = True

    def claim(self, key: str, trial_number: int) -> int | None:
        """Claim ``key`` for ``trial_number``: None when it is now this trial's, else the holder's number."""
        self._create()
        return call_through_outage(self._claim, key, trial_number)

    def _claim(self, key: str, trial_number: int) -> int | None:
        from sqlalchemy import insert, select
        from sqlalchemy.exc import IntegrityError

        try:
            with self.engine.begin() as connection:
                connection.execute(
                    insert(self._claims).values(
                        study_name=self.study_name, candidate_key=key, trial_number=trial_number
                    )
                )
            return None
        except IntegrityError:
            with self.engine.begin() as connection:
                row = connection.execute(
                    select(self._claims.c.trial_number).where(
                        (self._claims.c.study_name == self.study_name) & (self._claims.c.candidate_key == key)
                    )
                ).first()
            return None if row is None or int(row.trial_number) == trial_number else int(row.trial_number)

    def take_over(self, key: str, holder: int, trial_number: int) -> bool:
        """Move the claim on ``key`` from ``holder`` to ``trial_number``; False when another won it."""
        return call_through_outage(self._take_over, key, holder, trial_number)

    def _take_over(self, key: str, holder: int, trial_number: int) -> bool:
        from sqlalchemy import update

        with self.engine.begin() as connection:
            result = connection.execute(
                update(self._claims)
                .where(
                    (self._claims.c.study_name == self.study_name)
                    & (self._claims.c.candidate_key == key)
                    & (self._claims.c.trial_number == holder)
                )
                .values(trial_number=trial_number)
            )
        return bool(result.rowcount == 1)


def claims_for(study: Any) -> Claims | None:
    """The :class:`Claims` of an ``optuna.Study`` in an RDB storage; None for other storages."""
    engine = engine_of(study)
    return None if engine is None else Claims(engine, study.study_name)


def claim_setting(study: Any, claims: Claims | None, trial_number: int, key: str, role: str) -> Any:
    """Claim setting ``key`` for trial ``trial_number``: None when it is that trial's to run, else the
    ``FrozenTrial`` holding it — measured with values (copy it) or not finished (wait, then copy).

    A holder that finished without a result is taken over; a ``reference`` / ``baseline`` trial
    (queued on purpose) always takes the claim over. Without claims (not an RDB storage): None.
    """
    if claims is None:
        return None
    number = claims.claim(key, trial_number)
    while number is not None:
        holder = trial_by_number(study, number)
        result = is_measured(holder) and holder.values is not None
        if role == "search" and (not holder.state.is_finished() or result):
            return holder
        if claims.take_over(key, number, trial_number):
            return None
        number = claims.claim(key, trial_number)  # another coordinator moved it: look again
    return None
