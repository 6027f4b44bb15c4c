"""Export job: the tiered messages as Parquet, partitioned by topic."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from tiered_core.errors import ConfigError, InvalidOption

FORMATS = ("parquet",)
_WRITERS = "spark.sql.maxConcurrentOutputFileWriters"


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: ``rows`` messages in ``files`` files under ``path``, read by
    ``partitions`` input partitions, into ``topics`` topic directories, in ``seconds``."""

    path: str
    rows: int
    partitions: int
    topics: int
    files: int
    seconds: float

    def summary(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        return (f"exported {self.rows} messages from {self.partitions} input partitions into {self.topics} topic "
                f"directories ({self.files} Parquet files) at {self.path} in {self.seconds:.1f}s ({rate:,.0f} msg/s)")


def export(spark, config: str | os.PathLike, to: str | os.PathLike, *, format: str = "parquet",
           mode: str = "errorifexists", **read_options: Any) -> ExportResult:
    """Write every message of the store of ``config`` (a config file) to ``to``, partitioned by topic.

    ``read_options`` are the data source's (``topics``, ``queues``, ``start_time``,
    ``end_time``...). ``mode`` is Spark's save mode (``errorifexists``, ``overwrite``).
    Raises :class:`InvalidOption` for an unknown format or mode.
    """
    from tiered_core.spark import plan_read, read

    if format not in FORMATS:
        raise InvalidOption(f"export format {format!r} is not one of {', '.join(FORMATS)}", option="format")
    if mode not in ("errorifexists", "error", "overwrite", "append", "ignore"):
        raise InvalidOption(f"export mode {mode!r} is not one of errorifexists, overwrite, append, ignore",
                            option="mode")
    target = os.path.abspath(os.fspath(to))
    if mode in ("errorifexists", "error") and os.path.exists(target):
        raise ConfigError(f"export target {target!r} exists; remove it or overwrite it (mode 'overwrite', "
                          "CLI --overwrite)", key="to", source=target)
    started = time.perf_counter()
    partitions = len(plan_read(config, **read_options))
    df = read(spark, config, **read_options)
    # Each input partition holds one queue, so one topic: with concurrent writers Spark writes
    # each task's rows as they come instead of sorting them by topic first.
    previous = spark.conf.get(_WRITERS, None)
    spark.conf.set(_WRITERS, "64")
    try:
        df.write.mode(mode).partitionBy("topic").parquet(target)
    finally:
        if previous is None:
            spark.conf.unset(_WRITERS)
        else:
            spark.conf.set(_WRITERS, previous)
    seconds = time.perf_counter() - started
    rows, files, topics = _written(target)
    return ExportResult(target, rows, partitions, topics, files, seconds)


def _written(path: str) -> tuple[int, int, int]:
    """(rows, files, topic directories) of a Parquet export, from the files' footers."""
    import pyarrow.parquet as pq

    rows = files = 0
    topics = set()
    for root, _dirs, names in os.walk(path):
        for name in names:
            if name.endswith(".parquet"):
                rows += pq.ParquetFile(os.path.join(root, name)).metadata.num_rows
                files += 1
                rel = os.path.relpath(root, path)
                if rel.startswith("topic="):
                    topics.add(rel.split(os.sep)[0])
    return rows, files, len(topics)
