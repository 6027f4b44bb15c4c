"""``spark.read.format("tiered")`` of a store: planning on the Spark driver (metadata only),
reading in executor tasks, which open the backend driver themselves from the configuration
text carried by the (pickled) reader."""

from __future__ import annotations

from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition

from tiered_core.spark.config_source import ConfigSource, open_metadata_readonly, require_shared_backend
from tiered_core.spark.failures import spark_facing
from tiered_core.spark.source.partition_plan import QueuePartition, plan_partitions
from tiered_core.spark.source.partition_reader import read_batches
from tiered_core.spark.source.arrow_rows import batch_to_arrow
from tiered_core.spark.source.options import ReadOptions
from tiered_core.spark.source.schema import arrow_schema


class TieredReader(DataSourceReader):
    """Plans :class:`~tiered_core.spark.source.partition_plan.QueuePartition` s and reads them as Arrow batches.

    Read-only: the store is read as its metadata (opened read-only) describes it, and nothing
    is created or written; a store whose metadata does not exist raises
    :class:`~tiered_core.spark.config_source.StoreNotReadable`, a bad message
    :class:`~tiered_core.errors.CorruptData` naming it."""

    def __init__(self, source: ConfigSource, read: ReadOptions) -> None:
        self.source = source
        self.read_options = read

    def partitions(self) -> Sequence[InputPartition]:
        parts = planned_partitions(self.source, self.read_options)
        # Spark needs at least one partition; an empty plan reads nothing.
        return parts or [_EmptyPartition()]

    def read(self, partition: InputPartition) -> Iterator:
        if not isinstance(partition, QueuePartition):
            return
        schema = arrow_schema()
        read = self.read_options
        wants_time = read.wants_time if read.start_time is not None or read.end_time is not None else None
        for batch in read_batches(self.source, partition):
            rows = batch_to_arrow(batch, schema, wants_time)
            if rows.num_rows:
                yield rows


#: What Spark gets: :class:`TieredReader` whose typed errors reach the driver tagged.
SparkTieredReader = spark_facing(TieredReader, "SparkTieredReader", __name__)


class _EmptyPartition(InputPartition):
    def __init__(self) -> None:
        super().__init__(None)


def planned_partitions(source: ConfigSource, read: ReadOptions) -> list[QueuePartition]:
    """The partitions a read plans (metadata only, opened read-only; :class:`StoreNotReadable`
    when the store's metadata does not exist)."""
    config = source.load()
    require_shared_backend(config)
    metadata = open_metadata_readonly(config)
    try:
        return plan_partitions(config, metadata, read)
    finally:
        metadata.close()


__all__ = ["SparkTieredReader", "TieredReader", "planned_partitions"]
