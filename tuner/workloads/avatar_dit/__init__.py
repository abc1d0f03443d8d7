"""Built-in talking-avatar video DiT workload (trained on procedural faces; see :mod:`.workload`)."""

from tuner.workloads.avatar_dit.workload import AvatarDiTWorkload

__all__ = ["AvatarDiTWorkload"]
