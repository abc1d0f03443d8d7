"""Optuna's RDB storage with every database call riding through an outage (:mod:`tuner.storage.outage`).

:class:`OutageTolerantRDBStorage` is an ``optuna.storages.RDBStorage`` whose methods — the public
ones and the private ones Optuna's ``_CachedStorage`` calls — retry connection-level errors until
the storage is back or the outage bound has passed (opening it does not wait: a storage never
reached is a wrong URL or a server that is not up, one line at once). It is what :func:`tuner.storage.opening.open_storage`
returns, so Optuna's study objects, the coordinator, the heartbeats and the reading commands all use it.

One write is made safe to repeat: ``set_trial_state_values``. When a retried attempt finds the trial
already finished in exactly the state (and values) it was asked to set, the first attempt's commit
landed before its connection dropped, and the call succeeds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from tuner.storage.optuna_private import RDB_PRIVATE_METHODS, RDB_STORAGE_MODULE
from tuner.storage.outage import TRANSIENT_WORDS, call_through_outage

# RDBStorage methods that reach the database: its public ones, and the private ones _CachedStorage and Optuna call
# (named in tuner.storage.optuna_private with every other use of Optuna's private API).
RETRIED_METHODS = (
    "create_new_study",
    "delete_study",
    "set_study_user_attr",
    "set_study_system_attr",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_all_studies",
    "create_new_trial",
    "set_trial_param",
    "get_trial_id_from_study_id_trial_number",
    "get_trial_number_from_id",
    "get_trial_param",
    "get_trial_params",
    "get_trial_user_attrs",
    "get_trial_system_attrs",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "get_trial",
    "get_all_trials",
    "get_n_trials",
    "get_best_trial",
    "record_heartbeat",
    "get_current_version",
    *RDB_PRIVATE_METHODS,
)


def _retried(method: Callable[..., Any]) -> Callable[..., Any]:
    def through_outage(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
        return call_through_outage(method, self, *args, **kwargs)

    through_outage.__name__ = method.__name__
    through_outage.__doc__ = method.__doc__
    return through_outage


class _QuietDuringOutage(logging.Filter):
    """Drops Optuna's warning that it "falls back to a slower alternative" when the error it caught is a
    lost connection: the slower query fails the same way, and the outage is said once, by the tuner."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage().lower()
        return not ("falling back to a slower alternative" in text and any(word in text for word in TRANSIENT_WORDS))


logging.getLogger(RDB_STORAGE_MODULE).addFilter(_QuietDuringOutage())


class OutageTolerantRDBStorage(RDBStorage):
    """An ``RDBStorage`` that waits out connection-level errors (see the module docstring)."""

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        def already_done(error: BaseException) -> bool | None:
            if not isinstance(error, UpdateFinishedTrialError):
                return None
            stored = RDBStorage.get_trial(self, trial_id)
            same_values = values is None or (
                stored.values is not None
                and len(stored.values) == len(values)
                and all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(stored.values, values))
            )
            return True if stored.state == state and same_values else None

        return call_through_outage(
            RDBStorage.set_trial_state_values, self, trial_id, state, values, retrying=already_done
        )


for _name in RETRIED_METHODS:
    setattr(OutageTolerantRDBStorage, _name, _retried(getattr(RDBStorage, _name)))

__all__ = ["OutageTolerantRDBStorage", "RETRIED_METHODS"]
