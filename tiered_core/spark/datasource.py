"""The PySpark Python data source ``tiered``: one row per tiered message.

Planning (``partitions``) runs where Spark plans, reading only metadata; ``read`` runs
in executor tasks, which open the backend driver themselves from the configuration
text carried by the (pickled) reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from tiered_core.spark.options import (
    ConfigSource, ReadOptions, config_source, open_metadata_readonly, parse_read_options, require_shared_backend,
)
from tiered_core.spark.plan import QueuePartition, plan_partitions
from tiered_core.spark.arrow_batch import batch_to_arrow
from tiered_core.spark.failures import spark_facing, tagged
from tiered_core.spark.reader import read_batches
from tiered_core.spark.schema import arrow_schema, spark_schema

if TYPE_CHECKING:
    from tiered_core.spark.stream_source import TieredStreamReader
    from tiered_core.spark.stream_static import StaticTopicStreamReader

#: The format name: ``spark.read.format("tiered")``.
FORMAT = "tiered"


class TieredDataSource(DataSource):
    """``spark.read.format("tiered").option("config", "tiered.toml").load()``.

    Options: ``config`` (a tiered.toml or broker.conf, read where Spark plans; its content,
    not its path, goes to executors) or ``config_text`` (+ ``config_format``,
    ``config_base_dir``); ``topics`` (comma list), ``queues`` (comma list of ids),
    ``start_time`` / ``end_time`` (epoch ms or ISO 8601, inclusive; naive times are UTC);
    ``max_units_per_partition``. Bad options raise
    :class:`~tiered_core.errors.InvalidOption` / :class:`~tiered_core.errors.ConfigError`
    naming the option. Read-only: the store is read as its metadata (opened read-only)
    describes it, and nothing is created or written -- a store whose metadata does not exist
    raises :class:`~tiered_core.spark.options.StoreNotReadable`. A typed error of a task
    (e.g. :class:`~tiered_core.errors.CorruptData`) reaches the driver program tagged
    (:mod:`tiered_core.spark.failures`).
    With ``static_topic`` (and ``cluster``, a cluster TOML file) it reads a static topic by
    logic queue instead (:mod:`tiered_core.spark.static_topic`).
    ``spark.readStream.format("tiered")`` streams the same rows
    (:class:`~tiered_core.spark.stream_source.TieredStreamReader`; with ``static_topic``, by
    logic queue: :class:`~tiered_core.spark.stream_static.StaticTopicStreamReader`).
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @tagged
    def schema(self):
        from tiered_core.spark.stream_options import check_source_options

        check_source_options(dict(self.options))  # at load(): bad options fail before any query starts
        return spark_schema()

    @tagged
    def streamReader(self, schema) -> "TieredStreamReader | StaticTopicStreamReader":
        """``spark.readStream.format("tiered")``: :class:`~tiered_core.spark.stream_source.TieredStreamReader`,
        or with ``static_topic`` :class:`~tiered_core.spark.stream_static.StaticTopicStreamReader`
        (options in :mod:`tiered_core.spark.stream_options`; bad ones raise InvalidOption here)."""
        options = dict(self.options)
        if any(str(k).lower() == "static_topic" for k in options):
            from tiered_core.spark.stream_options import parse_static_stream_options
            from tiered_core.spark.stream_static import SparkStaticTopicStreamReader

            return SparkStaticTopicStreamReader(*parse_static_stream_options(options))
        from tiered_core.spark.stream_options import parse_stream_options
        from tiered_core.spark.stream_source import SparkTieredStreamReader

        return SparkTieredStreamReader(*parse_stream_options(options))

    @tagged
    def reader(self, schema) -> "TieredReader":
        options = dict(self.options)
        if any(str(k).lower() == "static_topic" for k in options):
            # a static topic (seed 002): rows by logic queue, see tiered_core.spark.static_topic
            from tiered_core.spark.static_topic import SparkStaticTopicReader, parse_static_options

            return SparkStaticTopicReader(*parse_static_options(options))  # type: ignore[return-value]
        read = parse_read_options(options)
        return SparkTieredReader(config_source(options), read)

    @tagged
    def streamWriter(self, schema, overwrite: bool):  # noqa: N802 (PySpark's name)
        """The streaming sink (:mod:`tiered_core.spark.stream_sink`): exactly once per micro-batch."""
        from tiered_core.spark.stream_sink import stream_writer

        return stream_writer(dict(self.options), schema)


class TieredReader(DataSourceReader):
    """Plans :class:`~tiered_core.spark.plan.QueuePartition` s and reads them as Arrow batches."""

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
