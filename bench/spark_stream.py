"""The ``tiered`` streaming source and the Arrow read path, each against a baseline measured in the same run.

    python bench/spark_stream.py [--json] [--topics 2] [--queues 2] [--messages 50000] [--body-size 256]
                                 [--rounds 3] [--master local[2]]

A posix store (fsync off, SQLite metadata) is written through the container layer before
anything is timed (``--topics`` x ``--queues`` queues of ``--messages`` messages of
``--body-size`` body bytes, keys, tags and two properties each), and exported once to
Parquet with the export job (``tiered_core.spark.jobs.export``). One Spark session
(``--master``) runs everything; each path runs once to warm up (Python workers started,
code loaded), then ``--rounds`` rounds run every path once in turn; figures are medians, in
messages per second of wall time.

1. ``stream_msgs_per_s``: ``spark.readStream.format("tiered")`` of the whole store with
   ``trigger(availableNow=True)`` into the ``noop`` sink (a fresh checkpoint per round:
   offsets planned from metadata, executors read the backend), as Spark's progress reports
   a stream's rate (``processedRowsPerSecond``: input rows over the micro-batches'
   ``triggerExecution`` time, which holds the source's planning, the reads and the offset
   and commit logs). ``parquet_msgs_per_s``: ``spark.read.parquet`` of the exported messages
   into the ``noop`` sink. ``stream_vs_parquet`` = stream / parquet; target >= 0.5.
   ``stream_wall_msgs_per_s`` / ``stream_wall_vs_parquet`` (target >= 0.5 too: the whole
   query, not only the source): the same over the query's whole life, from ``start()`` to
   its end -- that adds a fixed cost of about a
   second per query (Spark starts the query, a Python process for the source, and stops it),
   which a long-running stream pays once and a one-shot read of this size cannot hide.
   ``python_stream_query_s``: the whole life of a query of :class:`OneRowStream`, a Python
   streaming source that serves one row -- what PySpark charges any Python streaming
   source per query (it starts a Python process for the source's driver side, about a
   second here, then plans, commits and stops), for information:
   ``stream_wall_vs_parquet_after_query_cost`` is the stream's whole-query rate with that
   time taken off (``messages / (whole query - python_stream_query_s)``) over parquet's.
   Where a whole query's time goes (diagnostics, medians over the timed rounds, seconds):
   ``stream_micro_batches`` (micro-batches an availableNow query of the whole store makes),
   ``stream_query_s`` (start() to end), ``stream_trigger_s`` (the micro-batches'
   ``triggerExecution``), ``stream_outside_trigger_s`` (the rest: Spark starting the query
   and the source's Python process -- where the source's ``streamReader`` runs, then stopping
   it), and the same two for :class:`OneRowStream` (``one_row_trigger_s``,
   ``one_row_outside_trigger_s``): the tiered source's outside-trigger time beyond the one-row
   source's is what it adds per query. ``project_bytecode_cached``: whether this checkout's
   modules have compiled bytecode (with ``PYTHONDONTWRITEBYTECODE`` set and none cached, every
   Python process Spark starts compiles them from source); ``pyspark_zip_bytecode``: whether
   the pyspark zip Spark's Python processes import holds bytecode
   (``tiered_core/spark/pyspark_bytecode.py``; without it each such process compiles pyspark).
   ``python_source_floor_msgs_per_s``: a Python data source (:class:`FloorReader`) over the
   same partitions that yields one prebuilt Arrow batch of real rows again and again -- the
   cost Spark itself adds to any Python source (Python worker, Arrow to JVM rows), for
   information: ``floor_vs_parquet`` bounds what ``stream_vs_parquet`` can reach here.
2. ``arrow_msgs_per_s``: ``spark.read.format("tiered")`` (record batches built column-wise
   from the validated ``MessageBatch``) into ``noop``. ``rows_msgs_per_s``: the same
   partitions read by :class:`RowReader` below -- the row-at-a-time reader the Arrow path
   replaces: one Python tuple per message from the same validated batches. ``arrow_vs_rows``
   = arrow / rows; target >= 3.

The machine's core count and load are printed beside the figures: on a shared machine the
ratios move with the neighbours (both sides of a ratio are measured in the same run).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition  # noqa: E402
from spark_export import add_round_arguments, add_store_arguments, bench_workdir, print_report, write_store  # noqa: E402  (bench/ is on sys.path)

from tiered_core.spark.config_source import config_source  # noqa: E402
from tiered_core.spark.source.partition_plan import QueuePartition  # noqa: E402
from tiered_core.spark.source.partition_reader import read_batches  # noqa: E402
from tiered_core.spark.source.batch import planned_partitions  # noqa: E402
from tiered_core.spark.source.options import ReadOptions, parse_read_options  # noqa: E402
from tiered_core.spark.source.schema import spark_schema  # noqa: E402

TARGETS = {"stream_vs_parquet": 0.5, "stream_wall_vs_parquet": 0.5, "arrow_vs_rows": 3.0}
_UTC = _dt.timezone.utc


class RowReader(DataSourceReader):
    """The baseline: the same planned partitions and validated batches, one Python tuple per message."""

    def __init__(self, options) -> None:
        self.source = config_source(options)
        self.read_options = parse_read_options({k: v for k, v in options.items() if k != "format_name"})

    def partitions(self):
        return planned_partitions(self.source, self.read_options)

    def read(self, partition):
        if not isinstance(partition, QueuePartition):
            return
        for batch in read_batches(self.source, partition):
            for m in batch.messages():
                yield (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset,
                       _dt.datetime.fromtimestamp(m.store_timestamp / 1000, _UTC),
                       _dt.datetime.fromtimestamp(m.born_timestamp / 1000, _UTC),
                       m.keys, m.tags, m.properties, m.body)


class FloorReader(DataSourceReader):
    """Spark's own cost of a Python data source: the same partitions, each yielding one real
    Arrow batch (built once per task) again and again up to its share of the rows. No store
    read, no per-message Python: what no Python source can beat on this machine."""

    def __init__(self, options) -> None:
        self.source = config_source(options)
        self.parts = planned_partitions(self.source, ReadOptions())
        self.share = int(options["rows"]) // len(self.parts)

    def partitions(self):
        return self.parts

    def read(self, partition):
        if not isinstance(partition, QueuePartition):
            return
        from tiered_core.spark.source.arrow_rows import batch_to_arrow

        batch = batch_to_arrow(next(read_batches(self.source, partition)))
        for start in range(0, self.share, batch.num_rows):
            yield batch.slice(0, min(batch.num_rows, self.share - start))


class OneRowStream(DataSourceStreamReader):
    """A streaming source with one row, to time what a query of any Python streaming source
    costs beyond its reads (Spark's Python source process, planning, logs, stop)."""

    def initialOffset(self):
        return {"row": 0}

    def latestOffset(self):
        return {"row": 1}

    def partitions(self, start, end):
        return [InputPartition(0)] if start["row"] < end["row"] else []

    def read(self, partition):
        yield (1,)

    def commit(self, end) -> None:
        pass


class OneRowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "one_row_stream"

    def schema(self):
        return "x int"

    def streamReader(self, schema):
        return OneRowStream()


def bench_source(format_name: str, reader_class: type) -> type:
    """A data source ``format_name`` with the tiered schema whose reader is ``reader_class(options)``."""

    class BenchSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return format_name

        def schema(self):
            return spark_schema()

        def reader(self, schema):
            return reader_class(dict(self.options))

    return BenchSource


def bytecode_cached() -> bool:
    """Whether the modules of this checkout that every Spark Python process of a tiered query
    imports have cached bytecode (``importlib.util.cache_from_source`` exists)."""
    import importlib.util

    import tiered_core.config
    import tiered_core.spark.source.stream

    return all(os.path.exists(importlib.util.cache_from_source(m.__file__))
               for m in (tiered_core.config, tiered_core.spark.source.stream))


def pyspark_zip_bytecode() -> bool:
    """Whether the installed pyspark's ``pyspark.zip`` holds this interpreter's bytecode."""
    from tiered_core.spark.pyspark_bytecode import has_bytecode, spark_python_zips

    return any(p.endswith("pyspark.zip") and has_bytecode(p) for p in spark_python_zips())


def timed(paths: dict, rounds: int) -> dict[str, float]:
    """Median seconds of each path: one untimed warm-up call each, then ``rounds`` rounds that
    call every path once in turn (so a noisy neighbour hurts both sides of a ratio alike)."""
    for fn in paths.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_store_arguments(parser, queues=2, messages=50_000)
    add_round_arguments(parser)
    args = parser.parse_args(argv)

    from tiered_core.spark import get_session
    from tiered_core.spark.jobs import export

    with bench_workdir(args, "tiered-spark-stream-bench-") as workdir:
        config_path, _spec, messages = write_store(workdir, args)  # before anything is timed
        spark = get_session(args.master, app_name="bench-spark-stream")
        spark.dataSource.register(bench_source("tiered_rows", RowReader))
        spark.dataSource.register(bench_source("tiered_floor", FloorReader))
        spark.dataSource.register(OneRowSource)
        parquet = export(spark, config_path, os.path.join(workdir, "parquet")).path

        def check(rows: int, what: str) -> None:
            if rows != messages:
                raise SystemExit(f"{what} read {rows} of {messages} messages")

        check(spark.read.parquet(parquet).count(), "parquet")
        check(spark.read.format("tiered").option("config", config_path).load().count(), "tiered (arrow)")
        check(spark.read.format("tiered_rows").option("config", config_path).load().count(), "tiered_rows")
        check(spark.read.format("tiered_floor").option("config", config_path).option("rows", str(messages))
              .load().count(), "tiered_floor")

        trigger_ms: list[int] = []
        micro_batches: list[int] = []
        one_row_trigger_ms: list[int] = []

        def stream_all() -> None:
            checkpoint = os.path.join(workdir, "checkpoints", uuid.uuid4().hex)
            query = (spark.readStream.format("tiered").option("config", config_path).load()
                     .writeStream.format("noop").option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            progress = query.recentProgress
            check(sum(p["numInputRows"] for p in progress), "the stream")
            trigger_ms.append(sum(p["durationMs"].get("triggerExecution", 0) for p in progress))
            micro_batches.append(sum(1 for p in progress if p["numInputRows"]))

        def one_row_stream() -> None:
            checkpoint = os.path.join(workdir, "checkpoints", uuid.uuid4().hex)
            query = (spark.readStream.format("one_row_stream").load().writeStream.format("noop")
                     .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
            query.awaitTermination()
            if sum(p["numInputRows"] for p in query.recentProgress) != 1:
                raise SystemExit("the one-row stream did not read its row")
            one_row_trigger_ms.append(sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress))

        def noop(df) -> None:
            df.write.format("noop").mode("overwrite").save()

        def read(fmt: str, **options: str):
            reader = spark.read.format(fmt).option("config", config_path)
            for key, value in options.items():
                reader = reader.option(key, value)
            return lambda: noop(reader.load())

        seconds = timed({
            "stream": stream_all,
            "one_row_stream": one_row_stream,
            "parquet": lambda: noop(spark.read.parquet(parquet)),
            "floor": read("tiered_floor", rows=str(messages)),
            "arrow": read("tiered"),
            "rows": read("tiered_rows"),
        }, args.rounds)
        stream_s, parquet_s, floor_s, arrow_s, rows_s = (seconds[k] for k in ("stream", "parquet", "floor", "arrow",
                                                                               "rows"))
        spark.stop()
        report = {
            "messages": messages,
            "body_size": args.body_size,
            "queues": args.topics * args.queues,
            "master": args.master,
            "rounds": args.rounds,
            "stream_msgs_per_s": round(messages * 1000 / statistics.median(trigger_ms[1:])),
            "parquet_msgs_per_s": round(messages / parquet_s),
            "stream_vs_parquet": round(parquet_s * 1000 / statistics.median(trigger_ms[1:]), 3),
            "stream_wall_msgs_per_s": round(messages / stream_s),
            "stream_wall_vs_parquet": round(parquet_s / stream_s, 3),
            "python_stream_query_s": round(seconds["one_row_stream"], 3),
            "stream_wall_vs_parquet_after_query_cost": (
                round(parquet_s / (stream_s - seconds["one_row_stream"]), 3)
                if stream_s > seconds["one_row_stream"] else None),
            "stream_micro_batches": max(micro_batches),
            "stream_query_s": round(stream_s, 3),
            "stream_trigger_s": round(statistics.median(trigger_ms[1:]) / 1000, 3),
            "stream_outside_trigger_s": round(stream_s - statistics.median(trigger_ms[1:]) / 1000, 3),
            "one_row_trigger_s": round(statistics.median(one_row_trigger_ms[1:]) / 1000, 3),
            "one_row_outside_trigger_s": round(seconds["one_row_stream"]
                                               - statistics.median(one_row_trigger_ms[1:]) / 1000, 3),
            "project_bytecode_cached": bytecode_cached(),
            "pyspark_zip_bytecode": pyspark_zip_bytecode(),
            "python_source_floor_msgs_per_s": round(messages / floor_s),
            "floor_vs_parquet": round(parquet_s / floor_s, 3),
            "arrow_msgs_per_s": round(messages / arrow_s),
            "rows_msgs_per_s": round(messages / rows_s),
            "arrow_vs_rows": round(rows_s / arrow_s, 3),
        }
    print_report(report, args.json, TARGETS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
