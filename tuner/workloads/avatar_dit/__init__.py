"""Built-in talking-avatar video DiT workload (untrained, seeded; see :mod:`.workload`)."""

from tuner.workloads.avatar_dit.workload import AvatarDiTWorkload

__all__ = ["AvatarDiTWorkload"]
