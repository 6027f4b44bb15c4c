"""Import job: bulk-load Parquet messages (the ``tiered`` schema) into a tiered store.

Rows are grouped by (topic, queue_id) with Spark and sorted by queue offset; one task
appends each group through a :class:`~tiered_core.flat.FlatMessageFile` writing to the
real backend, but recording segment metadata in a scratch store of its own. Tasks send
that metadata back as their result, and the Spark driver commits all of it to the
store's metadata once, in one transaction, at the end. Rows already stored (queue offset
below the queue's next offset) are skipped, so re-running an interrupted import does not
duplicate; a gap in a queue's offsets is an error naming the queue.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Iterator

from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.errors import ConfigError, IllegalParam, InvalidOption
from tiered_core.spark.failures import tagged_iter, task_error
from tiered_core.spark.config_source import ConfigSource, require_shared_backend
from tiered_core.spark.source.schema import COLUMNS, SCHEMA_DDL
from tiered_core.spi.metadata import FileSegmentMetadata, QueueMetadata


@dataclass(frozen=True)
class ImportResult:
    """Totals of an import."""

    rows: int
    appended: int
    skipped: int
    queues: int
    segments: int
    seconds: float

    def summary(self) -> str:
        return (f"imported {self.appended} messages into {self.queues} queues ({self.skipped} already stored, "
                f"skipped; {self.segments} segments recorded in one metadata commit) in {self.seconds:.1f}s")


@dataclass(frozen=True)
class QueueSeed:
    """The target's state of one queue before the import (plain data for the task)."""

    topic: str
    queue_id: int
    queue: dict[str, Any] | None
    segments: tuple[dict[str, Any], ...]


def _seed(metadata, topic: str, queue_id: int, flat_path: str) -> QueueSeed:
    queue = metadata.get_queue(topic, queue_id)
    segments = tuple(dataclasses.asdict(m) for t in (FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE)
                     for m in metadata.iterate_file_segments(t, flat_path))
    return QueueSeed(topic, queue_id, None if queue is None else dataclasses.asdict(queue), segments)


def _adopt_unrecorded(driver, scratch, config, topic: str, queue_id: int) -> None:
    """Record segment objects of this queue that exist in the backend but not in metadata
    (left by an import that failed before its metadata commit), so a re-run continues after
    them instead of rolling over them; and adopt the bytes a recorded segment gained after
    its last metadata update (that failed run filled it and rolled to a new one: flat-file
    recovery re-checks only the last segment). The job holds the store's lock and owns its
    prefix, so nothing else wrote them."""
    from tiered_core.codec.naming import file_name_to_offset, queue_path, segment_dir
    from tiered_core.common import now_ms

    flat_path = queue_path(config.broker, topic, queue_id)
    for kind in (FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE):
        prefix = segment_dir(config.cluster, config.broker, topic, queue_id, kind) + "/"
        for path, size in driver.list(prefix):
            try:
                base = file_name_to_offset(path.rsplit("/", 1)[-1], strict=True)
            except Exception:
                continue
            recorded = scratch.get_file_segment(int(kind), flat_path, base)
            if recorded is None:
                meta = FileSegmentMetadata(flat_path, int(kind), base, size=size, create_timestamp=now_ms())
                if size and driver.is_sealed(path):
                    meta.mark_sealed()
                scratch.update_file_segment(meta)
            elif size > recorded.size and recorded.status != SegmentStatus.DELETED:
                recorded.size = size
                if recorded.status != SegmentStatus.SEALED and driver.is_sealed(path):
                    recorded.mark_sealed()
                scratch.update_file_segment(recorded)


def seed_scratch(scratch, seed: QueueSeed, driver, config) -> None:
    """Fill a scratch metadata store with the target's state of one queue (``seed``), then
    adopt what an interrupted earlier run left in the backend (:func:`_adopt_unrecorded`)."""
    with scratch.transaction():
        if seed.queue is not None:
            scratch.update_queue(QueueMetadata(**seed.queue), touch=False)
        for seg in seed.segments:
            scratch.update_file_segment(FileSegmentMetadata(**seg))
    _adopt_unrecorded(driver, scratch, config, seed.topic, seed.queue_id)


def queue_outcome(scratch, flat, stats) -> dict[str, Any]:
    """One queue's result (plain data): counts, and the queue and segment metadata to record."""
    queue = scratch.get_queue(flat.topic, flat.queue_id)
    segments = [dataclasses.asdict(m) for t in (FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE)
                for m in scratch.iterate_file_segments(t, flat.file_path)]
    return {"topic": flat.topic, "queue_id": flat.queue_id, "appended": stats.appended,
            "skipped": stats.skipped, "queue": dataclasses.asdict(queue), "segments": segments}


def record_outcome(metadata, outcome: list[dict[str, Any]]) -> int:
    """Record the queues' results in the target's metadata (inside the caller's transaction);
    returns how many segments were recorded."""
    segments = 0
    for item in outcome:
        if metadata.get_topic(item["topic"]) is None:
            metadata.add_topic(item["topic"])
        metadata.update_queue(QueueMetadata(**item["queue"]))
        for seg in item["segments"]:
            metadata.update_file_segment(FileSegmentMetadata(**seg))
            segments += 1
    return segments


def _import_groups(source: ConfigSource, seeds: dict[tuple[str, int], QueueSeed],
                   rows: Iterator) -> Iterator[str]:
    """Executor side: append the (topic, queue_id, queue_offset)-sorted rows (times in epoch ms);
    yield one JSON result per queue."""
    from tiered_core.flat.message_file import FlatMessageFile
    from tiered_core.metadata import open_metadata_store
    from tiered_core.spark.appender import QueueAppender, message_from_row
    from tiered_core.spark.reader import driver_for

    config = source.load()
    driver = driver_for(source, writable=True)
    scratch_dir = tempfile.mkdtemp(prefix="tiered-import-")
    current: tuple[str, int] | None = None
    appender = None
    scratch = None
    results: list[dict[str, Any]] = []

    def finish() -> None:
        nonlocal appender, scratch
        stats = appender.finish()
        flat = appender.flat
        results.append(queue_outcome(scratch, flat, stats))
        flat.shutdown()
        scratch.close()
        appender = scratch = None

    def start(topic: str, queue_id: int) -> None:
        nonlocal appender, scratch
        scratch = open_metadata_store("sqlite", os.path.join(scratch_dir, f"{len(results)}.db"))
        seed = seeds.get((topic, queue_id))
        if seed is not None:
            seed_scratch(scratch, seed, driver, config)
        appender = QueueAppender(FlatMessageFile(driver, scratch, topic, queue_id, config.flat_config()))

    try:
        for row in rows:
            key = (row["topic"], row["queue_id"])
            if key != current:
                if appender is not None:
                    finish()
                start(*key)
                current = key
            if row["queue_offset"] is None or row["store_timestamp"] is None:
                raise IllegalParam(f"{key[0]}/{key[1]}: a row has no queue_offset or store_timestamp",
                                   topic=key[0], queue_id=key[1], queue_offset=row["queue_offset"])
            message = message_from_row(row["topic"], row["keys"], row["tags"], row["properties"],
                                       row["body"], row["born_timestamp"])
            appender.append(row["queue_offset"], message, row["store_timestamp"])
        if appender is not None:
            finish()
    finally:
        if scratch is not None:
            scratch.close()
        shutil.rmtree(scratch_dir, ignore_errors=True)
    for result in results:
        yield json.dumps(result)


def import_parquet(spark, config: str | os.PathLike, source_path: str | os.PathLike, *,
                   partitions: int | None = None) -> ImportResult:
    """Load the Parquet dataset at ``source_path`` (columns of the ``tiered`` schema; a
    ``topic=...`` directory layout is understood) into the store of ``config``.

    Rows need topic, queue_id, queue_offset and store_timestamp; keys, tags, properties,
    body and born_timestamp may be absent or null. The store must not be written by
    anything else meanwhile. Raises :class:`InvalidOption` naming a missing column,
    IllegalOffset for a gap in a queue's offsets.
    """
    from pyspark.sql import functions as F

    from tiered_core.config import StoreConfig

    started = time.perf_counter()
    path = os.path.abspath(os.fspath(source_path))
    if not os.path.exists(path):
        raise ConfigError(f"import source {path!r} does not exist", key="from", source=path)
    source = ConfigSource.from_file(config)
    store_config = StoreConfig.load(config)
    require_shared_backend(store_config)
    df = spark.read.option("mergeSchema", "false").parquet(path)
    present = set(df.columns)
    for column in ("topic", "queue_id", "queue_offset", "store_timestamp"):
        if column not in present:
            raise InvalidOption(f"import source {path!r} has no column {column!r} (expected {SCHEMA_DDL})",
                                option=column, source=path)
    types = dict(c.split(" ", 1) for c in SCHEMA_DDL.split(", "))
    df = df.select(*[(F.col(c) if c in present else F.lit(None)).cast(types[c]).alias(c) for c in COLUMNS])
    # Times travel to the tasks as epoch milliseconds (no time-zone conversion on the way).
    df = df.withColumns({c: F.unix_millis(F.col(c)) for c in ("store_timestamp", "born_timestamp")})
    groups = [(r["topic"], r["queue_id"]) for r in df.select("topic", "queue_id").distinct().collect()]
    from tiered_core.local.store import acquire_store_lock, release_store_lock
    from tiered_core.ops.claim import claim_store_prefix

    os.makedirs(store_config.store_path, exist_ok=True)
    lock = acquire_store_lock(store_config.store_path)  # the store itself must not run meanwhile
    try:
        with store_config.open_driver() as driver:
            claim_store_prefix(store_config, driver)  # refused when another store owns the prefix
        result = _import(spark, df, groups, path, source, store_config, partitions, started)
    finally:
        release_store_lock(lock)
    return result


def _import(spark, df, groups, path, source, store_config, partitions, started) -> ImportResult:
    from tiered_core.codec.naming import queue_path, validate_topic

    metadata = store_config.open_metadata()
    try:
        seeds = {}
        for topic, queue_id in groups:
            if topic is None or queue_id is None or queue_id < 0:
                raise InvalidOption(f"import source {path!r} has a row with topic {topic!r}, queue_id {queue_id!r}",
                                    option="topic" if topic is None else "queue_id", source=path)
            validate_topic(topic)
            seeds[(topic, queue_id)] = _seed(metadata, topic, queue_id, queue_path(store_config.broker, topic, queue_id))
        n = partitions or max(1, min(len(groups), spark.sparkContext.defaultParallelism * 2))
        ordered = df.repartition(n, "topic", "queue_id").sortWithinPartitions("topic", "queue_id", "queue_offset")

        def run(rows):
            return tagged_iter(_import_groups(source, seeds, rows))

        try:
            outcome = [json.loads(r) for r in ordered.rdd.map(lambda row: row.asDict()).mapPartitions(run).collect()]
        except Exception as exc:  # a Spark job failure wraps the task's error in Java's
            raise task_error(exc, "import failed (metadata not committed; fix the input and run again)") from None
        with metadata.transaction():
            segments = record_outcome(metadata, outcome)
    finally:
        metadata.close()
    appended = sum(i["appended"] for i in outcome)
    skipped = sum(i["skipped"] for i in outcome)
    return ImportResult(appended + skipped, appended, skipped, len(outcome), segments, time.perf_counter() - started)
