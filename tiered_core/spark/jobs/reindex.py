"""Re-index job: rebuild a store's tiered key index from the messages its tier holds.

For a store whose messages reached the tier without their keys being indexed (loaded by
``tiered spark import``, copied by an older sink, or an index lost with a broker's disk),
so that ``query_message`` finds them again.

The Spark driver plans the read as ``spark.read.format("tiered")`` does (one partition
per queue and segment range, pruned by topic, queue and time); each task reads its
partition's validated batches and returns, per batch, the index arguments of the messages
that have keys (UNIQ_KEY and KEYS): tiered commit-log offset, size, store time. Only
those cross to the driver, one partition at a time. The driver holds the store's lock
(the store must not run meanwhile), puts them into the store's key index in queue order,
seals the index file and uploads it to the tier (an index segment the store's metadata
records), so every reader of the backend finds them.

Running it twice indexes the messages twice: a key query still finds each message once
(it checks every entry against the consume queue), the index only grows. Use the time
window (``start_time`` / ``end_time``) to index only what is missing.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterator

from tiered_core.spark.failures import tagged_iter
from tiered_core.index.batch_keys import batch_keys
from tiered_core.spark.config_source import ConfigSource, open_metadata_readonly, require_shared_backend
from tiered_core.spark.source.options import parse_read_options

#: Messages between two progress lines.
PROGRESS_EVERY = 100_000
#: Planned partitions (segment ranges) one Spark task reads, at most, when there are many.
PARTITIONS_PER_SLICE = 32


@dataclass(frozen=True)
class ReindexResult:
    """What a re-index did: ``messages`` read in ``partitions`` partitions of ``queues``
    queues, ``indexed`` of them with keys (``keys`` entries written), ``uploaded`` index
    files sent to the tier, in ``seconds``."""

    messages: int
    indexed: int
    keys: int
    queues: int
    partitions: int
    uploaded: int
    seconds: float

    def summary(self) -> str:
        rate = self.messages / self.seconds if self.seconds > 0 else 0.0
        return (f"re-indexed {self.indexed} of {self.messages} messages ({self.keys} keys) of {self.queues} queues "
                f"from {self.partitions} input partitions; {self.uploaded} index files uploaded, in "
                f"{self.seconds:.1f}s ({rate:,.0f} msg/s)")


def _partition_keys(source: ConfigSource, wants_time, partitions) -> Iterator[tuple]:
    from tiered_core.spark.source.partition_reader import read_batches

    for part in partitions:
        for batch in read_batches(source, part):
            yield batch_keys(batch, wants_time)


def reindex(spark, config: str | os.PathLike, *, progress=sys.stderr, **read_options: Any) -> ReindexResult:
    """Index the keys of the messages the tier of ``config``'s store holds (``read_options``
    as the data source's: ``topics``, ``queues``, ``start_time``, ``end_time``).

    Raises :class:`~tiered_core.errors.InvalidOption` for a bad option (before Spark runs),
    :class:`~tiered_core.errors.StateConflict` when the store is open in another process or
    another store owns its prefix, :class:`~tiered_core.spark.config_source.StoreNotReadable` when
    the store does not exist (nothing is created), and the typed error of a failed task (a corrupt
    message stops the job: nothing after it in its queue is indexed, what was put before
    stays). A failed put raises DriverError naming the queue.
    """
    from tiered_core.access.writer_session import WriterSession
    from tiered_core.config import StoreConfig
    from tiered_core.spark.source.batch import planned_partitions

    started = time.perf_counter()
    read = parse_read_options({k: v for k, v in read_options.items() if v is not None})
    source = ConfigSource.from_file(config)
    store_config = StoreConfig.load(config)
    require_shared_backend(store_config)
    timed = read.start_time is not None or read.end_time is not None
    wants_time = read.wants_time if timed else None
    open_metadata_readonly(store_config).close()  # a store that does not exist is not created here
    with WriterSession(store_config) as session:  # the store itself must not run meanwhile
        parts = planned_partitions(source, read)
        if not parts:
            return ReindexResult(0, 0, 0, 0, 0, 0, time.perf_counter() - started)
        # toLocalIterator runs one Spark job per slice and holds one slice's keys at a
        # time: enough slices to keep every core busy and a slice's keys small, few
        # enough that job overhead does not dominate (a partition is one segment range).
        cores = spark.sparkContext.defaultParallelism
        slices = min(len(parts), max(2 * cores, -(-len(parts) // PARTITIONS_PER_SLICE)))
        rdd = spark.sparkContext.parallelize(parts, slices)

        def run(partitions):
            return tagged_iter(_partition_keys(source, wants_time, partitions))

        counts = _put_all(store_config, session.driver, session.metadata, rdd.mapPartitions(run), progress)
    queues = len({(p.topic, p.queue_id) for p in parts})
    return ReindexResult(counts[0], counts[1], counts[2], queues, len(parts), counts[3],
                         time.perf_counter() - started)


def _put_all(store_config, driver, metadata, rows, progress) -> tuple[int, int, int, int]:
    """Put every row's keys into the store's index, then seal and upload: (messages, indexed, keys, uploaded)."""
    from tiered_core.common import AppendResult
    from tiered_core.errors import DriverError
    from tiered_core.index.service import IndexStoreService
    from tiered_core.spark.failures import task_error

    messages = indexed = keys = uploaded = 0
    reported = 0
    topic_ids: dict[str, int] = {}
    index = IndexStoreService.from_store_config(store_config, driver, metadata)
    try:
        try:
            for topic, queue_id, count, batch, offsets, sizes, timestamps in rows.toLocalIterator(True):
                messages += count
                if batch:
                    if topic not in topic_ids:
                        topic_ids[topic] = metadata.get_topic(topic).topic_id  # planned from metadata: it exists
                    result = index.put_keys(topic, topic_ids[topic], queue_id, batch, offsets, sizes, timestamps)
                    if result is not AppendResult.SUCCESS:
                        raise DriverError(f"{topic}/{queue_id}: the key index ({index.directory}) refused the keys "
                                          f"of {len(batch)} messages from commit-log offset {offsets[0]}: "
                                          f"{result.name}", retryable=True, topic=topic, queue_id=queue_id)
                    indexed += len(batch)
                    keys += sum(len(k) for k in batch)
                if progress is not None and messages - reported >= PROGRESS_EVERY:
                    reported = messages
                    print(f"tiered spark reindex: {messages} messages read, {indexed} indexed", file=progress,
                          flush=True)
        except Exception as exc:  # a Spark job failure wraps the task's error in Java's (typed ones pass)
            raise task_error(exc, "re-index failed (what was indexed stays; run it again)") from None
        if indexed:
            index.roll_file()  # seal what this job wrote, so it is uploaded now
            uploaded = index.compact_and_upload()
    finally:
        index.shutdown()
    return messages, indexed, keys, uploaded


__all__ = ["PARTITIONS_PER_SLICE", "PROGRESS_EVERY", "ReindexResult", "reindex"]
