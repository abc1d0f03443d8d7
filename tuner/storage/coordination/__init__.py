"""The rows coordinators share through the storage: one run per setting fleet-wide (:mod:`.claims`), trial
heartbeats and stale trials reclaimed (:mod:`.heartbeats`), one coordinator per device of a host (:mod:`.lock`)."""
