"""Settings of the container layer (RocketMQ's tiered-store keys, with its defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from tiered_core.configdef import KEYS


@dataclass(frozen=True)
class FlatFileConfig:
    """Where segments go and how big they grow.

    ``cluster`` and ``broker`` name the directory layout
    ``{md5(cluster)[:8]}_{cluster}/{broker}/{topic}/{queue}/{TYPE}/{name}``. The key-bound
    fields take their defaults (and meaning) from the declaration
    (:mod:`tiered_core.configdef.keys`); ``StoreConfig.section(FlatFileConfig)`` fills them.
    """

    cluster: str = KEYS.cluster.field()
    broker: str = KEYS.broker.field()
    commit_log_max_size: int = KEYS.commit_log_max_size.field()
    consume_queue_max_size: int = KEYS.consume_queue_max_size.field()
    max_group_commit_count: int = KEYS.max_group_commit_count.field()
    rolling_min_size: int = KEYS.rolling_min_size.field()
    rolling_interval_ms: int = KEYS.rolling_interval_ms.field()
    file_reserved_hours: int = KEYS.file_reserved_hours.field()
    recover_concurrency: int = 16  # queues recovered at once (not a config key)
