"""``tiered spark verify``: the ``--deep`` per-queue walk of ``tiered verify`` distributed
over Spark tasks, for stores one machine cannot read in time.

The Spark driver plans from the metadata alone, as the data source does: each queue's
offsets are cut at its consume-queue segments and into ranges
(:func:`~tiered_core.ops.verify_queue.plan_ranges`), sized so every core gets several. A
task walks its ranges through :func:`~tiered_core.ops.verify_range.verify_range` with
the executor's own driver (opened from the configuration text,
:func:`~tiered_core.spark.source.partition_reader.driver_for`), so only the plan (segment
references) and the ranges' results (findings, counters, store times) cross the wire.
With ``--checksums`` the hashing of every segment runs in Spark tasks too. The rest of the
report (ownership, listing, key index, local store) is
:func:`~tiered_core.ops.verify.verify_store`'s, with this walk in place of the
single-process one; :func:`~tiered_core.ops.verify_queue.finish_walk` merges the ranges
the same way wherever they ran, so the report is the one ``tiered verify --deep``
gives: the same findings, JSON and exit status.

Read-only like ``tiered verify``: no store lock, no write anywhere.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Iterator, Sequence

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.ops.findings import Finding
from tiered_core.ops.verify_checksum import mismatch_findings, object_checksums
from tiered_core.ops.verify_listing import Segment
from tiered_core.ops.verify_queue import QueueWalk, QueueWork, RangeResult, finish_walk, plan_ranges, total_units
from tiered_core.ops.verify_range import verify_range
from tiered_core.spark.config_source import ConfigSource, require_shared_backend
from tiered_core.spark.failures import tagged_iter
from tiered_core.spi.driver import SegmentDriver

#: Ranges planned per core (the ranges are cut this fine so that the tasks' slices balance).
RANGES_PER_CORE = 2
#: Spark tasks per core, each a slice of the ranges (largest first, dealt round): one. Every
#: further wave of tasks costs scheduling and a worker's second start on its data (measured
#: on local[2], 8 GiB: 2 tasks 2.0 s, 4 tasks 2.5-2.6 s; 258 MiB: 4 tasks 0.55 s, 8 tasks 1.0 s).
TASKS_PER_CORE = 1
#: The JVM options of a verify session in local mode (:func:`session_conf`).
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
#: A range holds at least this many queue offsets (smaller ones cost more to plan than to walk).
MIN_UNITS_PER_RANGE = 4096
#: ... and at most this many (the single-process walk's).
MAX_UNITS_PER_RANGE = 1 << 18


def units_per_range(works: Sequence[QueueWork], cores: int) -> int:
    """Queue offsets per range so that the walk of ``works`` gives every one of ``cores``
    about :data:`RANGES_PER_CORE` ranges (within the bounds above)."""
    wanted = max(1, cores * RANGES_PER_CORE)
    return max(MIN_UNITS_PER_RANGE, min(MAX_UNITS_PER_RANGE, -(-total_units(works) // wanted)))


def session_conf(master: str | None = None) -> dict[str, str]:
    """Spark settings of a session for ``tiered spark verify`` on ``master`` (default: as
    :func:`~tiered_core.spark.get_session` picks it).

    In local mode the walk's tasks share the machine with the driver's JVM, which only
    schedules them and carries their small results. Its optimizing JIT compiler (C2) has
    nothing to gain there, and its compile threads (with G1's) took the cores from the
    tasks: measured on local[2] with an 8 GiB store, 0.3-0.6 s of JVM CPU per job and
    ``spark_vs_single`` 1.31-1.58 (``bench/verify.py``); with the JVM stopped at its first
    compiler tier (C1), 1.78-1.81. So a local session starts its JVM with
    :data:`LOCAL_JVM_OPTIONS` (replacing any ``spark.driver.extraJavaOptions`` of
    spark-defaults.conf for this command); on a cluster nothing is set."""
    master = master or os.environ.get("TIERED_SPARK_MASTER") or "local[*]"
    return {"spark.driver.extraJavaOptions": LOCAL_JVM_OPTIONS} if master.startswith("local") else {}


def _hash_objects(source: ConfigSource, items: list[tuple[str, int]]) -> Iterator[tuple[str, int | None]]:
    from tiered_core.spark.source.partition_reader import driver_for

    return object_checksums(driver_for(source), items)


def _walk_ranges(source: ConfigSource, deep: bool, prop_crc: PropCrcPolicy,
                 tasks: Iterable[tuple[QueueWork, int, int]]) -> Iterator[RangeResult]:
    from tiered_core.spark.source.partition_reader import driver_for

    driver = driver_for(source)
    for work, start, end in tasks:
        yield verify_range(driver, work, start, end, deep=deep, prop_crc=prop_crc)


class SparkWalk:
    """The :class:`~tiered_core.ops.verify_queue.Walk` of ``tiered spark verify``: the
    ranges of every queue walked in Spark tasks of ``spark`` on the store ``source``
    names. The ``driver`` it is handed is not used (executors open their own). A task's
    error (a driver failure) comes back typed (:func:`~tiered_core.spark.failures.task_error`)."""

    def __init__(self, spark, source: ConfigSource, *, units_per_range: int | None = None) -> None:
        self.spark, self.source, self.units = spark, source, units_per_range
        #: Ranges and Spark tasks of the last walk (for the summary and the bench).
        self.ranges = self.tasks = 0

    def __call__(self, driver: SegmentDriver, works: Sequence[QueueWork], *, deep: bool,
                 prop_crc: PropCrcPolicy = PropCrcPolicy.IF_PRESENT,
                 progress: Callable[[int], None] | None = None) -> QueueWalk:
        from tiered_core.spark.failures import task_error

        cores = self.spark.sparkContext.defaultParallelism
        step = self.units or units_per_range(works, cores)
        tasks = [(work, start, end) for work in works for start, end in plan_ranges(work, step)]
        self.ranges = len(tasks)
        if not tasks:
            return finish_walk(works, [])
        # Largest first: the long ranges start early and the short ones fill the gaps.
        tasks.sort(key=lambda t: t[2] - t[1], reverse=True)
        self.tasks = min(len(tasks), cores * TASKS_PER_CORE)
        slices = [tasks[i::self.tasks] for i in range(self.tasks)]
        source = self.source

        def run(index: int, parts: Iterator[list]) -> Iterator[RangeResult]:
            return tagged_iter(r for part in parts for r in _walk_ranges(source, deep, prop_crc, part))

        rdd = self.spark.sparkContext.parallelize(slices, len(slices)).mapPartitionsWithIndex(run)
        try:  # (collect: toLocalIterator would run the tasks one job at a time)
            results = rdd.collect()
        except Exception as exc:  # a Spark job failure wraps the task's error in Java's (typed ones pass)
            raise task_error(exc, "verify failed (nothing was changed; run it again)") from None
        if progress is not None:
            progress(sum(r.end - r.start for r in results))
        return finish_walk(works, results)

    def hash_segments(self, driver: SegmentDriver, segments: list[Segment],
                      progress: Callable[[int], None] = lambda n: None) -> tuple[list[Finding], int, int]:
        """The :class:`~tiered_core.ops.verify_checksum.Hasher` of ``--checksums``: each of
        ``segments`` hashed in a Spark task (executors read the objects with their own
        driver; only paths, sizes and checksums cross the wire). The ``driver`` is not used."""
        from tiered_core.spark.failures import task_error

        items = sorted(((seg.path, seg.meta.checksum_size) for seg in segments), key=lambda i: i[1], reverse=True)
        if not items:
            return mismatch_findings(segments, {})
        tasks = min(len(items), self.spark.sparkContext.defaultParallelism * TASKS_PER_CORE)
        slices = [items[i::tasks] for i in range(tasks)]  # largest first, dealt round
        source = self.source

        def run(index: int, parts: Iterator[list]) -> Iterator[tuple[str, int | None]]:
            return tagged_iter(r for part in parts for r in _hash_objects(source, part))

        rdd = self.spark.sparkContext.parallelize(slices, len(slices)).mapPartitionsWithIndex(run)
        try:
            found = dict(rdd.collect())
        except Exception as exc:  # as in __call__
            raise task_error(exc, "verify failed (nothing was changed; run it again)") from None
        progress(len(items))
        return mismatch_findings(segments, found)


def verify(spark, config: str | os.PathLike, *, topics: Sequence[str] | None = None, checksums: bool = False,
           progress: Any = None, units_per_range: int | None = None):
    """The ``--deep`` verify report of ``config``'s store with the per-queue walk on Spark
    (``topics``: only these; ``checksums``: every segment hashed too, in Spark tasks, as
    ``tiered verify --deep --checksums`` does in one process). Returns the :class:`~tiered_core.ops.findings.VerifyReport`
    ``verify_store`` gives; raises what it raises (a store that does not exist, a config
    error) and :class:`~tiered_core.errors.ConfigError` for a driver whose bytes live in
    one process (Spark tasks run in others). Never writes."""
    from tiered_core.config import StoreConfig
    from tiered_core.ops.verify import verify_store

    store_config = StoreConfig.load(config)
    require_shared_backend(store_config)
    walk = SparkWalk(spark, ConfigSource.from_file(config), units_per_range=units_per_range)
    return verify_store(store_config, deep=True, checksums=checksums, topics=topics, progress=progress, walk=walk,
                        hasher=walk.hash_segments)


__all__ = ["LOCAL_JVM_OPTIONS", "MAX_UNITS_PER_RANGE", "MIN_UNITS_PER_RANGE", "RANGES_PER_CORE", "SparkWalk",
           "TASKS_PER_CORE", "session_conf", "units_per_range", "verify"]
