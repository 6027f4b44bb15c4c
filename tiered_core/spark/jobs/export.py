"""Export job: the tiered messages as Parquet, partitioned by topic.

The store is only read. The output directory is checked by
:mod:`tiered_core.ops.output_paths` (never in, over or around the store), created with a
marker file, and replaced by ``overwrite`` only when it holds that marker."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from tiered_core.errors import InvalidOption, InvalidPath
from tiered_core.ops.output_paths import (
    check_output_path, create_output_dir, remove_output_dir, replace_output_dir, require_marker, staging_dir,
)
from tiered_core.spark.session import end_jobs_quietly

FORMATS = ("parquet",)
#: What the marker file of an export directory names as its creator.
CREATED_BY = "tiered spark export"
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
    ``end_time``...). ``mode``: ``errorifexists`` (``to`` must not exist), ``overwrite``
    (replace an earlier export: ``to`` must hold the :data:`~tiered_core.ops.output_paths.MARKER`
    file every export writes into the directory it creates; the new export is built next to
    it and swapped in when complete, so a failed run leaves the old one whole), ``append``
    or ``ignore`` (Spark's meanings; nothing is deleted). The store is only read.

    Raises :class:`InvalidPath` for an empty ``to``, one that is, contains or lies inside
    the store's ``store_path``, tier root or metadata file, an existing ``to`` (without
    ``overwrite``) or one without the marker (with it), or a URL output (exports write to a
    local or mounted file system); :class:`InvalidOption` for an unknown format or mode;
    :class:`~tiered_core.spark.config_source.StoreNotReadable` when the store does not exist; the
    typed error a read task raised (e.g. :class:`~tiered_core.errors.CorruptData`).
    """
    from tiered_core.config import StoreConfig
    from tiered_core.spark import plan_read, read
    from tiered_core.spark.failures import task_error

    if format not in FORMATS:
        raise InvalidOption(f"export format {format!r} is not one of {', '.join(FORMATS)}", option="format")
    if mode == "error":
        mode = "errorifexists"
    if mode not in ("errorifexists", "overwrite", "append", "ignore"):
        raise InvalidOption(f"export mode {mode!r} is not one of errorifexists, overwrite, append, ignore",
                            option="mode")
    target = check_export_target(StoreConfig.load(config), to, mode)
    exists = os.path.lexists(target)
    started = time.perf_counter()
    partitions = len(plan_read(config, **read_options))
    if exists and mode == "ignore":
        rows, files, topics = _written(target)
        return ExportResult(target, rows, partitions, topics, files, time.perf_counter() - started)
    df = read(spark, config, **read_options)
    if exists and mode == "append":
        out, created = target, False
    elif exists:  # overwrite: build the new export beside the old one
        out, created = staging_dir(target, CREATED_BY), True
    else:
        out, created = create_output_dir(target, CREATED_BY, option="--to"), True
    try:
        _write(spark, df, out)
    except BaseException as exc:
        if created:
            if not isinstance(exc, Exception):  # a Ctrl-C: the job's tasks are still writing into it
                end_jobs_quietly(spark)
            remove_output_dir(out, option="--to")  # it is this run's own, half-written
        if isinstance(exc, Exception):
            error = task_error(exc, f"export to {target!r} failed", fallback=False)
            if error is not None:
                raise error from None
        raise
    if out != target:
        replace_output_dir(out, target, option="--to")
    seconds = time.perf_counter() - started
    rows, files, topics = _written(target)
    return ExportResult(target, rows, partitions, topics, files, seconds)


def check_export_target(config, to: str | os.PathLike | None, mode: str = "errorifexists") -> str:
    """The resolved local directory of an export of ``config``'s store (a StoreConfig) to ``to``
    in ``mode``, checked before anything runs. Raises :class:`InvalidPath` for an empty path,
    a path that is, contains or lies inside the store's locations, a URL (exports write to a
    local or mounted file system), an existing path in mode ``errorifexists``, and in mode
    ``overwrite`` an existing path that is not a directory holding the export marker."""
    checked = check_output_path(to, [config], option="--to", what="export target")
    if checked.url:
        raise InvalidPath(f"--to: export target {checked.path!r} is a URL; exports write to a local or mounted "
                          "file system directory (copy the result to object storage afterwards)",
                          path=checked.path, option="--to")
    target = checked.path
    if os.path.lexists(target):
        if mode in ("errorifexists", "error"):
            raise InvalidPath(f"--to: export target {target!r} exists; remove it, or replace an earlier export "
                              "with --overwrite (mode 'overwrite')", path=target, option="--to")
        if mode == "overwrite":
            require_marker(target, option="--to")
    return target


def _write(spark, df, out: str) -> None:
    # Each input partition holds one queue, so one topic: with concurrent writers Spark writes
    # each task's rows as they come instead of sorting them by topic first.
    previous = spark.conf.get(_WRITERS, None)
    spark.conf.set(_WRITERS, "64")
    try:
        # "append" into the directory this run owns: Spark never deletes anything itself.
        df.write.mode("append").partitionBy("topic").parquet(out)
    finally:
        if previous is None:
            spark.conf.unset(_WRITERS)
        else:
            spark.conf.set(_WRITERS, previous)


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
