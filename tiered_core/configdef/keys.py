"""Every config key of the tiered store, each declared exactly once.

Everything else is made from these declarations: the fields and defaults of
:class:`~tiered_core.config.StoreConfig`, its validation, the broker.conf mapping, the
``TIERED_*`` overrides, the key table in README.md (``python -m tiered_core.config
--markdown``) and the defaults of every sub-config (``FlatFileConfig``, ``LocalStoreConfig``,
``IndexConfig``, ``DispatchConfig``, ``FileSegment``). To add a setting, add a ``Key`` here,
bind it where it is used (``KEYS.name.field()`` in a sub-config), and regenerate the README
table (``python -m tiered_core.config --update-readme README.md``); tests/test_config_keys.py
fails until the README matches.

Defaults are RocketMQ's (see the digest's config table) unless the doc says otherwise.
"""

from __future__ import annotations

from tiered_core.common import INT_MAX
from tiered_core.configdef.key_spec import IgnoredKey, Key, Keys, Switch
from tiered_core.configdef.types import (
    BOOL,
    COMPONENT,
    COUNT,
    DURATION_MS,
    FLUSH,
    HOURS,
    HOURS_TO_MS,
    NAME,
    OPTIONAL_PATH,
    OPTIONS,
    PATH,
    QUARTER,
    CENTURY_MS,
    RECOVERY,
    SIZE,
    STORAGE_LEVEL,
)

#: ``file_reserved_hours`` meaning "never expire" (about 245,000 years).
NEVER_EXPIRE_HOURS = INT_MAX

# Upper bounds: every size, count and duration has one, so that a typo (an extra digit, a
# value in the wrong unit) is refused by name instead of overflowing or waiting forever.
#: A tiered segment is one backend object; GCS and S3 objects hold at most 5 TiB (and an
#: Azure append blob less): a segment size beyond 1 TiB is a mistake, not a plan.
SEGMENT_MAX = 1 << 40
WHY_SEGMENT_MAX = "a segment is one backend object (a GCS or S3 object holds at most 5 TiB)"
#: RocketMQ counts these in Java ints.
WHY_INT = "RocketMQ's value is a Java int"
WHY_CENTURY = "about 100 years"

KEYS = Keys(
    # -- where things are ---------------------------------------------------------------------------
    Key("store_path", PATH, "./demo-data", rocketmq="storePathRootDir",
        doc="The local (hot) store's directory; the posix driver's root defaults to `{store_path}/tiered`."),
    Key("driver", NAME, "posix", rocketmq="tieredBackendServiceProvider",
        doc="The backend: a registry name (`tiered drivers`), RocketMQ's provider class name "
            "(`...provider.PosixFileSegment` -> `posix`), or `module:Class`."),
    Key("driver_options", OPTIONS, {}, env="TIERED_OPTION_<NAME>",
        rocketmq="tieredStoreFilePath", rocketmq_aliases=("tieredStoreFilepath",),
        doc="The driver's options (a table; in broker.conf `tiered.options.NAME=value`). RocketMQ's "
            "`tieredStoreFilePath` sets the `root` option of a driver that has one; its object-store keys "
            "`objectStoreEndpoint`, `objectStoreBucket`, `objectStoreAccessKey`, `objectStoreSecretKey` set "
            "`endpoint_url`, `bucket`, `key`, `secret` (the s3 driver's; a driver without the option "
            "ignores them)."),
    Key("metadata", NAME, "sqlite", rocketmq="tieredMetadataServiceProvider",
        doc="The metadata store: `sqlite`, or `json` (RocketMQ's `tieredStoreMetadata.json`; "
            "`DefaultMetadataStore` is an alias)."),
    Key("metadata_path", OPTIONAL_PATH, None,
        doc="The metadata file; default `{store_path}/tiered-metadata.db` (sqlite) or "
            "`{store_path}/config/tieredStoreMetadata.json` (json)."),
    Key("cluster", COMPONENT, "DefaultCluster", maximum=255 - 9, rocketmq="brokerClusterName",
        doc="Cluster name: the first component of every tiered path (`{md5[:8]}_{cluster}`, one file name)."),
    Key("broker", COMPONENT, "broker-a", maximum=255, rocketmq="brokerName",
        doc="Broker name: the second component of every tiered path."),
    Key("storage_level", STORAGE_LEVEL, "NOT_IN_DISK", rocketmq="tieredStorageLevel",
        doc="Read policy: which tier serves a read; a miss in the tiered store falls back to the local one, "
            "except under FORCE, which serves only what the tier has committed (past its end: "
            "OFFSET_OVERFLOW_ONE at the tier's max, as RocketMQ does)."),
    # -- the container layer ----------------------------------------------------------------------
    Key("commit_log_max_size", SIZE, 1 << 30, unit="bytes", minimum=128,
        why="a tiered segment must hold one whole message", maximum=SEGMENT_MAX, why_max=WHY_SEGMENT_MAX,
        rocketmq="tieredStoreCommitLogMaxSize",
        doc="Size of a tiered commit-log segment; a full one is sealed and the next rolled."),
    Key("consume_queue_max_size", SIZE, 100 << 20, unit="bytes", minimum=20,
        why="a segment must hold one 20-byte consume-queue unit, or nothing is tiered",
        maximum=SEGMENT_MAX, why_max=WHY_SEGMENT_MAX,
        rocketmq="tieredStoreConsumeQueueMaxSize",
        doc="Size of a tiered consume-queue segment."),
    Key("max_group_commit_count", COUNT, 10000, unit="appends", minimum=1, maximum=INT_MAX, why_max=WHY_INT,
        rocketmq="tieredStoreMaxGroupCommitCount",
        doc="Appends a segment buffers before it must commit (an append above it is BUFFER_FULL)."),
    # -- the dispatcher ------------------------------------------------------------------------------
    Key("group_commit_count", COUNT, 4096, unit="messages", minimum=1, maximum=INT_MAX, why_max=WHY_INT,
        rocketmq="tieredStoreGroupCommitCount",
        doc="A queue is copied to the tier when this many messages wait (also the most in one group)."),
    Key("group_commit_size", SIZE, 4 << 20, unit="bytes", minimum=1, maximum=INT_MAX,
        why_max="a group lies within one local commit-log file", rocketmq="tieredStoreGroupCommitSize",
        doc="A group stays under this many bytes; one larger message is copied alone."),
    Key("group_commit_interval_ms", DURATION_MS, 30_000, unit="ms", minimum=0, maximum=CENTURY_MS,
        why_max=WHY_CENTURY, rocketmq="tieredStoreGroupCommitTimeout", switch=Switch("tieredStoreGroupCommit", 0),
        doc="A queue is also copied when its oldest waiting message waited this long; 0 copies whatever "
            "waits at every dispatch round (still in groups bounded by the count and size above)."),
    Key("max_pending_limit", COUNT, 2500, unit="uploads", minimum=1, maximum=1 << 16,
        why_max="each upload in flight may hold a thread", rocketmq="tieredStoreMaxPendingLimit",
        rocketmq_unit=QUARTER,
        doc="The most group uploads in flight at once, across queues. A queue has at most one (its "
            "groups commit in order), so this is also the most queues copied at once; each holds a "
            "dispatch thread, started only when that many queues have work."),
    Key("rolling_min_size", SIZE, 16 << 20, unit="bytes", minimum=0, maximum=SEGMENT_MAX,
        why_max="the largest segment", rocketmq="commitLogRollingMinimumSize",
        doc="A commit-log segment older than `rolling_interval_ms` is rolled once it holds this much."),
    Key("rolling_interval_ms", DURATION_MS, 24 * 3_600_000, unit="ms", minimum=0, maximum=CENTURY_MS,
        why_max=WHY_CENTURY, rocketmq="commitLogRollingInterval", rocketmq_unit=HOURS_TO_MS,
        doc="Age after which a commit-log segment of at least `rolling_min_size` is rolled."),
    Key("file_reserved_hours", HOURS, 72, unit="hours", minimum=1,
        why="0 would expire everything; tieredStoreDeleteFileEnable=false keeps files for good",
        maximum=NEVER_EXPIRE_HOURS, why_max=f"{WHY_INT}; {NEVER_EXPIRE_HOURS} means never expire",
        rocketmq="tieredStoreFileReservedTime",
        switch=Switch("tieredStoreDeleteFileEnable", NEVER_EXPIRE_HOURS, "never expire"),
        doc="Tiered segments and uploaded index files older than this are deleted when expiry runs "
            "(a topic's own reserve time wins for its segments)."),
    # -- the fetcher's read-ahead cache ------------------------------------------------------------------
    Key("read_ahead_cache_bytes", SIZE, 64 << 20, unit="bytes", minimum=0, maximum=1 << 40,
        why_max="a memory budget", switch=Switch("readAheadCacheEnable", 0),
        doc="Memory budget of the read-ahead cache; 0: no cache, every tiered read goes to the backend."),
    Key("read_ahead_cache_expire_ms", DURATION_MS, 10_000, unit="ms", minimum=0, maximum=CENTURY_MS,
        why_max=WHY_CENTURY, rocketmq="readAheadCacheExpireDuration",
        doc="A cached entry not read for this long expires."),
    Key("read_ahead_disk_cache_path", OPTIONAL_PATH, None, requires="diskcache",
        requires_hint="leave it unset for a memory-only cache",
        doc="Adds a disk tier to the read-ahead cache in this directory."),
    # -- the local store ------------------------------------------------------------------------------
    Key("local_commit_log_file_size", SIZE, 1 << 30, unit="bytes", minimum=4096,
        why="the local commit log's smallest file", maximum=INT_MAX,
        why_max="positions in a file are Java ints in RocketMQ (mappedFileSizeCommitLog)",
        rocketmq="mappedFileSizeCommitLog",
        doc="Size of a local commit-log file (fixed for the life of a store directory)."),
    Key("local_flush", FLUSH, "async", rocketmq="flushDiskType",
        doc="`async`: a background thread fsyncs; `sync`: a put returns once fsynced "
            "(RocketMQ's `ASYNC_FLUSH` / `SYNC_FLUSH` are accepted)."),
    Key("local_retention_hours", HOURS, 72, unit="hours", minimum=0, maximum=INT_MAX, why_max=WHY_INT,
        rocketmq="fileReservedTime",
        doc="Local files older than this are deleted, once everything in them is tiered."),
    Key("local_retention_interval_ms", DURATION_MS, 10_000, unit="ms", minimum=0, maximum=CENTURY_MS,
        why_max=WHY_CENTURY, rocketmq="cleanResourceInterval",
        doc="How often a store opened with background services runs local retention (and tells its "
            "listeners, e.g. a static-topic cluster trimming its mappings); 0: only when called."),
    # -- safety -------------------------------------------------------------------------------------
    Key("metadata_recovery", RECOVERY, "refuse",
        doc="When the metadata does not list what the backend holds: `refuse` stops with an error "
            "naming the fix; `rebuild` rebuilds it from the backend's listing."),
    Key("append_prop_crc", BOOL, False, rocketmq="enabledAppendPropCRC",
        doc="Every put appends RocketMQ's whole-message CRC property (`__CRC32#`)."),
    Key("verify_prop_crc", BOOL, False, rocketmq="forceVerifyPropCRC",
        doc="Tiered reads require the `__CRC32#` property and verify it."),
)

#: RocketMQ's object-store broker keys -> the driver option each sets (the s3 driver's names),
#: like ``tieredStoreFilePath`` sets ``root``: only for a driver that has the option, and
#: never over a ``tiered.options.NAME`` line of the same file.
ROCKETMQ_DRIVER_OPTION_KEYS = {
    "objectStoreEndpoint": "endpoint_url",
    "objectStoreBucket": "bucket",
    "objectStoreAccessKey": "key",
    "objectStoreSecretKey": "secret",
}

#: RocketMQ tiered keys accepted without effect here; their values are still checked.
IGNORED_ROCKETMQ_KEYS = (
    IgnoredKey("tieredStoreIndexFileMaxHashSlotNum", COUNT, minimum=1, maximum=INT_MAX, why_max=WHY_INT,
               doc="the tiered index sizes its files itself (an uploaded file records its own layout)."),
    IgnoredKey("tieredStoreIndexFileMaxIndexNum", COUNT, minimum=1, maximum=INT_MAX, why_max=WHY_INT,
               doc="as `tieredStoreIndexFileMaxHashSlotNum`."),
    IgnoredKey("tieredStoreDeleteFileInterval", DURATION_MS, minimum=0, maximum=CENTURY_MS, why_max=WHY_CENTURY,
               doc="expiry runs when called (`TieredMessageStore.delete_expired_tiered`) and, for index "
                   "files, on the index service's own interval."),
    IgnoredKey("tieredStoreCrcCheckEnable", BOOL,
               doc="unused by RocketMQ; here tiered reads always check the body CRC."),
)
