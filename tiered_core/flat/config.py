"""Settings of the container layer (RocketMQ's tiered-store keys, with its defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FlatFileConfig:
    """Where segments go and how big they grow.

    ``cluster`` and ``broker`` name the directory layout
    ``{md5(cluster)[:8]}_{cluster}/{broker}/{topic}/{queue}/{TYPE}/{name}``.
    """

    cluster: str = "DefaultCluster"
    broker: str = "broker-a"
    commit_log_max_size: int = 1 << 30  # tieredStoreCommitLogMaxSize
    consume_queue_max_size: int = 100 << 20  # tieredStoreConsumeQueueMaxSize
    max_group_commit_count: int = 10000  # tieredStoreMaxGroupCommitCount
    rolling_min_size: int = 16 << 20  # commitLogRollingMinimumSize
    rolling_interval_ms: int = 24 * 3600 * 1000  # commitLogRollingInterval (hours -> ms)
    file_reserved_hours: int = 72  # tieredStoreFileReservedTime
    recover_concurrency: int = 16  # queues recovered at once
