"""The Spark format ``tiered``: the PySpark Python data source that reads tiered messages
(one row each) and writes a stream into a store.

:class:`TieredDataSource` picks the reader its options ask for -- a store
(:mod:`~tiered_core.spark.source.batch`, :mod:`~tiered_core.spark.source.stream`) or a static
topic (:mod:`~tiered_core.spark.source.static_batch`,
:mod:`~tiered_core.spark.source.static_stream`) -- and checks those options at ``load()``,
before any query starts (:func:`check_source_options`, driven by
:data:`~tiered_core.spark.source.options.OPTIONS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from pyspark.sql.datasource import DataSource

from tiered_core.errors import InvalidOption
from tiered_core.spark.config_source import config_source
from tiered_core.spark.failures import tagged
from tiered_core.spark.source.options import (
    OPTION_NAMES, STREAM_OPTION_NAMES, canonical_name, is_static, is_stream_only, option_names, parse_read_options,
    parse_static_options, parse_static_stream_options, parse_stream_options, STREAM,
)
from tiered_core.spark.source.schema import spark_schema
from tiered_core.spark.worker_heap import freeze_survivors

if TYPE_CHECKING:
    from tiered_core.spark.source.batch import TieredReader
    from tiered_core.spark.source.static_stream import StaticTopicStreamReader
    from tiered_core.spark.source.stream import TieredStreamReader

#: The format name: ``spark.read.format("tiered")``.
FORMAT = "tiered"


class TieredDataSource(DataSource):
    """``spark.read.format("tiered").option("config", "tiered.toml").load()``.

    Options: ``config`` (a tiered.toml or broker.conf, read where Spark plans; its content,
    not its path, goes to executors) or ``config_text`` (+ ``config_format``,
    ``config_base_dir``); ``topics`` (comma list), ``queues`` (comma list of ids),
    ``start_time`` / ``end_time`` (epoch ms or ISO 8601, inclusive; naive times are UTC);
    ``max_units_per_partition`` (all declared in :data:`~tiered_core.spark.source.options.OPTIONS`).
    Bad options raise :class:`~tiered_core.errors.InvalidOption` /
    :class:`~tiered_core.errors.ConfigError` naming the option. Read-only: the store is read as
    its metadata (opened read-only) describes it, and nothing is created or written -- a store
    whose metadata does not exist raises
    :class:`~tiered_core.spark.config_source.StoreNotReadable`. A typed error of a task
    (e.g. :class:`~tiered_core.errors.CorruptData`) reaches the driver program tagged
    (:mod:`tiered_core.spark.failures`).
    With ``static_topic`` (and ``cluster``, a cluster TOML file) it reads a static topic by
    logic queue instead (:mod:`tiered_core.spark.source.static_batch`).
    ``spark.readStream.format("tiered")`` streams the same rows
    (:class:`~tiered_core.spark.source.stream.TieredStreamReader`; with ``static_topic``, by
    logic queue: :class:`~tiered_core.spark.source.static_stream.StaticTopicStreamReader`).
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @tagged
    def schema(self):
        freeze_survivors()  # Spark asks in a reused planning worker (tiered_core.spark.worker_heap)
        check_source_options(dict(self.options))  # at load(): bad options fail before any query starts
        return spark_schema()

    @tagged
    def streamReader(self, schema) -> "TieredStreamReader | StaticTopicStreamReader":
        """``spark.readStream.format("tiered")``: :class:`~tiered_core.spark.source.stream.TieredStreamReader`,
        or with ``static_topic`` :class:`~tiered_core.spark.source.static_stream.StaticTopicStreamReader`
        (bad options raise InvalidOption here)."""
        options = dict(self.options)
        if is_static(options):
            from tiered_core.spark.source.static_stream import SparkStaticTopicStreamReader

            return SparkStaticTopicStreamReader(*parse_static_stream_options(options))
        from tiered_core.spark.source.stream import SparkTieredStreamReader

        return SparkTieredStreamReader(*parse_stream_options(options))

    @tagged
    def reader(self, schema) -> "TieredReader":
        options = dict(self.options)
        if is_static(options):
            from tiered_core.spark.source.static_batch import SparkStaticTopicReader

            return SparkStaticTopicReader(*parse_static_options(options))  # type: ignore[return-value]
        from tiered_core.spark.source.batch import SparkTieredReader

        read = parse_read_options(options)
        return SparkTieredReader(config_source(options), read)

    @tagged
    def streamWriter(self, schema, overwrite: bool):  # noqa: N802 (PySpark's name)
        """The streaming sink (:mod:`tiered_core.spark.sink`): exactly once per micro-batch."""
        from tiered_core.spark.sink import stream_writer

        return stream_writer(dict(self.options), schema)


def check_source_options(options: Mapping[str, Any]) -> None:
    """Where Spark defines a read (``load()``, through ``DataSource.schema``), before the batch
    reader or the stream reader exists: raise the :class:`InvalidOption` of options that
    cannot work. Options naming a streaming-only option are checked as a stream (with the
    store's metadata, as the stream reader does); others must be valid batch options or valid
    streaming options."""
    if is_static(options):
        if is_stream_only(options):  # a static-topic stream: checked with the mapping, as its reader does
            from tiered_core.spark.source.static_stream import StaticTopicStreamReader

            StaticTopicStreamReader(*parse_static_stream_options(options))
        return  # otherwise a static-topic batch read (or a stream with defaults): its reader checks its options
    # The config itself (a missing or bad file is a ConfigError here, not after a query started
    # and wrote its checkpoint); the store it names may not exist yet, which a stream allows.
    config_source(options).load()
    if not is_stream_only(options):
        try:
            parse_read_options(options)
            return
        except InvalidOption as batch_error:
            try:
                parse_stream_options(options)
            except InvalidOption as stream_error:
                name = str(batch_error.context.get("option"))
                if name == stream_error.context.get("option") and canonical_name(name) not in option_names(STREAM):
                    raise InvalidOption(
                        f"data source 'tiered' has no option {name!r}; spark.read accepts: "
                        f"{', '.join(OPTION_NAMES)}; spark.readStream accepts: "
                        f"{', '.join(STREAM_OPTION_NAMES)}", option=name) from None
                raise batch_error from None
            return  # e.g. a stream with its defaults: valid for the streaming source
    from tiered_core.spark.source.stream import TieredStreamReader

    TieredStreamReader(*parse_stream_options(options))


__all__ = ["FORMAT", "TieredDataSource", "check_source_options", "register"]


def register(spark) -> None:
    """Register the ``tiered`` format with ``spark`` (once per session)."""
    if getattr(spark, "_tiered_registered", False):
        return
    spark.dataSource.register(TieredDataSource)
    try:
        spark._tiered_registered = True
    except AttributeError:  # a session type that takes no attributes: registering again is harmless
        pass
