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

import contextlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Iterator

from tiered_core.access.writer_session import QueueSeed, WriterSession, open_staged_queue, queue_outcome, record_outcome
from tiered_core.errors import ConfigError, IllegalParam, InvalidOption
from tiered_core.spark.failures import tagged_iter, task_error
from tiered_core.spark.config_source import ConfigSource, require_shared_backend
from tiered_core.spark.source.schema import COLUMNS, SCHEMA_DDL


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


def _import_groups(source: ConfigSource, seeds: dict[tuple[str, int], QueueSeed],
                   rows: Iterator) -> Iterator[str]:
    """Executor side: append the (topic, queue_id, queue_offset)-sorted rows (times in epoch ms);
    yield one JSON result per queue."""
    from tiered_core.spark.appender import QueueAppender, message_from_row
    from tiered_core.spark.source.partition_reader import driver_for

    config = source.load()
    driver = driver_for(source, writable=True)
    scratch_dir = tempfile.mkdtemp(prefix="tiered-import-")
    current: tuple[str, int] | None = None
    appender = None
    staged: contextlib.ExitStack | None = None
    scratch = None
    results: list[dict[str, Any]] = []

    def finish() -> None:
        nonlocal appender, staged
        stats = appender.finish()
        results.append(queue_outcome(scratch, appender.flat, stats))
        staged.close()
        appender = staged = None

    def start(topic: str, queue_id: int) -> None:
        nonlocal appender, staged, scratch
        seed = seeds.get((topic, queue_id)) or QueueSeed(topic, queue_id, None, ())
        staged = contextlib.ExitStack()
        flat, scratch = staged.enter_context(
            open_staged_queue(driver, config, seed, os.path.join(scratch_dir, f"{len(results)}.db")))
        appender = QueueAppender(flat)

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
        if staged is not None:
            staged.close()
        shutil.rmtree(scratch_dir, ignore_errors=True)
    for result in results:
        yield json.dumps(result)


def _refuse_another_history(session: WriterSession, df, seeds: dict[tuple[str, int], QueueSeed]) -> None:
    """Before any task writes: for each queue the target holds messages of, the input's first
    row at an offset the target holds must be the message stored there (else the input is
    another store's history, and skipping its rows there would drop them). Raises
    StateConflict naming the queue and offset. (The tasks compare each skipped run's ends too.)"""
    from pyspark.sql import functions as F

    from tiered_core.codec._impl import decode_message
    from tiered_core.errors import StateConflict
    from tiered_core.flat.message_file import FlatMessageFile
    from tiered_core.spark.appender import stored_difference

    held = {key: seed for key, seed in seeds.items() if seed.segments}
    if not held:
        return
    firsts = {(r["topic"], r["queue_id"]): r["first"] for r in
              df.groupBy("topic", "queue_id").agg(F.min("queue_offset").alias("first")).collect()
              if (r["topic"], r["queue_id"]) in held}
    flat_config = session.config.flat_config()
    wanted = []
    for (topic, queue_id), first in sorted(firsts.items()):
        flat = FlatMessageFile(session.driver, session.metadata, topic, queue_id, flat_config)
        try:
            lo, end = flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()
            offset = max(first, lo)
            if flat.initialized and offset < end:
                wanted.append((topic, queue_id, offset, decode_message(flat.get_message(offset))))
        finally:
            flat.shutdown()
    for topic, queue_id, offset, stored in wanted:
        row = df.where((F.col("topic") == topic) & (F.col("queue_id") == queue_id)
                       & (F.col("queue_offset") == offset)).select(
            "body", "store_timestamp").first()
        differs = row is not None and stored_difference(stored.body, stored.store_timestamp, row["body"],
                                                        row["store_timestamp"])
        if differs:
            raise StateConflict(
                f"{topic}/{queue_id}: the store already holds another message at queue offset {offset} (its {differs} "
                "differs from the input's): the input is not this store's history, and skipping it there would "
                "drop it. Nothing was written; write the input into a new store",
                topic=topic, queue_id=queue_id, offset=offset)


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

    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1):
        raise InvalidOption(f"partitions (--partitions) must be an int >= 1, got {partitions!r}", option="partitions",
                            value=partitions)
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
    # The store itself must not run meanwhile (its lock), and another store must not own its prefix.
    with WriterSession(store_config, writer="tiered spark import", appends=True) as session:
        return _import(spark, session, df, groups, path, source, partitions, started)


def _import(spark, session: WriterSession, df, groups, path, source, partitions, started) -> ImportResult:
    from tiered_core.codec.naming import validate_topic

    metadata = session.metadata
    seeds = {}
    for topic, queue_id in groups:
        if topic is None or queue_id is None or queue_id < 0:
            raise InvalidOption(f"import source {path!r} has a row with topic {topic!r}, queue_id {queue_id!r}",
                                option="topic" if topic is None else "queue_id", source=path)
        validate_topic(topic)
        seeds[(topic, queue_id)] = session.seed(topic, queue_id)
    _refuse_another_history(session, df, seeds)
    n = partitions or max(1, min(len(groups), spark.sparkContext.defaultParallelism * 2))
    ordered = df.repartition(n, "topic", "queue_id").sortWithinPartitions("topic", "queue_id", "queue_offset")

    def run(rows):
        return tagged_iter(_import_groups(source, seeds, rows))

    try:
        outcome = [json.loads(r) for r in ordered.rdd.map(lambda row: row.asDict()).mapPartitions(run).collect()]
    except Exception as exc:  # a Spark job failure wraps the task's error in Java's
        raise task_error(exc, "import failed (metadata not committed; once the cause is fixed, running it again resumes)") from None
    with metadata.transaction():
        segments = record_outcome(metadata, outcome)
    appended = sum(i["appended"] for i in outcome)
    skipped = sum(i["skipped"] for i in outcome)
    return ImportResult(appended + skipped, appended, skipped, len(outcome), segments, time.perf_counter() - started)
