"""The fleet: many hosts on one study — ``tuner worker``'s loop, the ``tuner serve`` HTTP API,
and the hand-off of the reference output between hosts.

May import everything below it (``tuner.ship``, ``tuner.tracking``, ``tuner.study``, ``tuner.search``, ``tuner.storage``, ...),
never ``tuner.cli``. Imports nothing itself.
"""
