"""Migrate job: copy every segment of one backend to another, verify, then write metadata once.

The Spark driver plans one :class:`CopyTask` per live segment (from the source's
metadata); each Spark task copies one segment with the target's driver, appending from
the target object's current size, so a re-run after a failure resumes where the copy
stopped instead of writing bytes twice. Each copy is verified (size, and SHA-256 of the
source and target bytes) and sealed when the source segment is sealed. Only after every
task succeeded does the Spark driver write the target's metadata, in one transaction.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Iterator

from tiered_core.access.writer_session import WriterSession
from tiered_core.codec.naming import segment_path
from tiered_core.errors import ConfigError, CorruptData, InvalidOption, PositionMismatch, StateConflict
from tiered_core.ops.output_paths import check_separate_stores
from tiered_core.spark.failures import tagged_iter, task_error
from tiered_core.spark.config_source import ConfigSource, open_metadata_readonly, require_shared_backend
from tiered_core.spark.source.partition_plan import parse_flat_path
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore
from tiered_core.common import SegmentStatus

log = logging.getLogger(__name__)

#: Bytes per read of the source and per write to the target.
DEFAULT_CHUNK = 8 << 20


@dataclass(frozen=True)
class CopyTask:
    """One segment object to copy: ``path`` (same in both backends), ``sealed`` in the source."""

    index: int
    path: str
    sealed: bool
    metadata_size: int


@dataclass(frozen=True)
class CopyResult:
    """One verified copy: its ``size`` and ``sha256``; ``copied`` bytes written by this run
    (0 when the target was already complete), ``resumed_at`` the target size found at start."""

    index: int
    path: str
    size: int
    sha256: str
    copied: int
    resumed_at: int
    sealed: bool


@dataclass(frozen=True)
class MigrateResult:
    """Totals of a migration: ``copied`` bytes written by this run, ``resumed`` segments the
    target already held in whole or in part (an earlier run's copies, verified, not written again)."""

    segments: int
    bytes: int
    copied: int
    resumed: int
    topics: int
    queues: int
    seconds: float

    def summary(self) -> str:
        return (f"migrated {self.segments} segments ({self.bytes} bytes; {self.copied} copied by this run, "
                f"{self.resumed} segments found whole or in part from an earlier run), metadata of "
                f"{self.topics} topics and "
                f"{self.queues} queues written once, in {self.seconds:.1f}s")


def backend_path(cluster: str, meta: FileSegmentMetadata) -> str | None:
    """The backend object of a segment recorded in metadata (None for a path we cannot place)."""
    parsed = parse_flat_path(meta.path)
    if parsed is None:
        return None
    broker, topic, queue_id = parsed
    return segment_path(cluster, broker, topic, queue_id, meta.type, meta.base_offset)


def plan_copies(source_config, metadata: TieredMetadataStore) -> list[CopyTask]:
    """One task per segment the source's metadata lists as live (NEW or SEALED)."""
    tasks: list[CopyTask] = []
    for meta in metadata.iterate_file_segments():
        if meta.status == SegmentStatus.DELETED:
            continue
        path = backend_path(source_config.cluster, meta)
        if path is None:
            raise StateConflict(f"segment metadata path {meta.path!r} is not broker/topic/queue; cannot place it",
                                path=meta.path)
        tasks.append(CopyTask(len(tasks), path, meta.status == SegmentStatus.SEALED, meta.size))
    return tasks


def _sha256(driver: SegmentDriver, path: str, size: int, chunk: int) -> str:
    digest = hashlib.sha256()
    pos = 0
    while pos < size:
        data = driver.read(path, pos, min(chunk, size - pos))
        if not data:
            raise CorruptData(f"{path!r}: read at {pos} of {size} bytes returned nothing", path=path, offset=pos)
        digest.update(data)
        pos += len(data)
    return digest.hexdigest()


def _append_from(source: SegmentDriver, target: SegmentDriver, task: CopyTask, size: int,
                 chunk: int) -> tuple[int, int, str | None]:
    """Append the source's bytes from the target's current size on.

    Returns (start, bytes written, SHA-256 of the source) -- the hash only when this call
    read the whole source in order (a copy from 0), else None.
    """
    if not target.exists(task.path):
        target.create(task.path)
    start = pos = target.size(task.path)
    digest = hashlib.sha256() if start == 0 else None
    written = 0
    while pos < size:
        length = min(chunk, size - pos)
        data = source.read(task.path, pos, length)
        try:
            target.write(task.path, pos, data)
        except PositionMismatch as exc:
            # An earlier attempt's write landed but its answer was lost: the backend size is the truth.
            pos = exc.actual_size
            digest = None
            continue
        if digest is not None:
            digest.update(data)
        pos += len(data)
        written += len(data)
    return start, written, None if digest is None else digest.hexdigest()


def copy_segment(source: SegmentDriver, target: SegmentDriver, task: CopyTask, *,
                 chunk: int = DEFAULT_CHUNK) -> CopyResult:
    """Copy, seal (if the source is sealed) and verify one segment; resumable.

    A target object that already holds bytes is resumed only if they are the source's
    (an earlier run of this migration); anything else is never deleted or overwritten.
    Raises :class:`StateConflict` when the source holds fewer bytes than its metadata
    records, or when the target holds bytes that are not the source's, and
    :class:`CorruptData` when a finished copy does not verify.
    """
    size = source.size(task.path)
    if size < task.metadata_size:
        raise StateConflict(f"source segment {task.path!r} holds {size} bytes but metadata records "
                            f"{task.metadata_size}", path=task.path, size=size, expected=task.metadata_size)
    sealed = task.sealed or (size > 0 and source.is_sealed(task.path))
    target_size = target.size(task.path)
    same_start = not target_size or (_sha256(target, task.path, min(target_size, size), chunk)
                                     == _sha256(source, task.path, min(target_size, size), chunk))
    if target_size > size and same_start:
        # The source's bytes and more: the target store wrote to it since (it is in service).
        raise StateConflict(
            f"target object {task.path!r} holds {target_size} bytes, the source's {size} and {target_size - size} "
            "more that the target store wrote since: the target is in service, and a migration never writes "
            "into a store in service (running it again will not help). Migrate to an empty target",
            path=task.path, size=target_size, source_size=size)
    if not same_start or (target_size and target.is_sealed(task.path) and target_size != size):
        raise StateConflict(
            f"target object {task.path!r} holds {target_size} bytes that are not the source's: it is another "
            "store's data, which a migration never overwrites (running it again will not help). Migrate to an "
            "empty target", path=task.path, size=target_size, source_size=size)
    resumed_at, copied, source_hash = _append_from(source, target, task, size, chunk)
    if source_hash is None:
        source_hash = _sha256(source, task.path, size, chunk)
    if sealed and not target.is_sealed(task.path):
        target.seal(task.path)
    target_size = target.size(task.path)
    if target_size != size or _sha256(target, task.path, size, chunk) != source_hash:
        raise CorruptData(f"copy of {task.path!r} does not verify: target size {target_size}, source {size}",
                          path=task.path)
    return CopyResult(task.index, task.path, size, source_hash, copied, resumed_at, sealed)


def _copy_partition(source_cfg: ConfigSource, target_cfg: ConfigSource, chunk: int,
                    tasks: Iterator[CopyTask]) -> Iterator[CopyResult]:
    from tiered_core.spark.source.partition_reader import driver_for

    source = driver_for(source_cfg)
    target = driver_for(target_cfg, writable=True)
    for task in tasks:
        yield copy_segment(source, target, task, chunk=chunk)


def write_target_metadata(source: TieredMetadataStore, target: TieredMetadataStore,
                          results: dict[str, CopyResult], cluster: str) -> tuple[int, int]:
    """Copy topics, queues and live segments into ``target`` in one transaction; every segment's
    recorded size is checked against the verified copy. Returns (topics, queues)."""
    topics = queues = 0
    with target.transaction():
        for topic in source.iterate_topics():
            target.update_topic(topic, touch=False)
            topics += 1
        target.set_max_topic_id(max(source.max_topic_id, target.max_topic_id))
        for queue in source.iterate_queues():
            target.update_queue(queue, touch=False)
            queues += 1
        for meta in source.iterate_file_segments():
            if meta.status == SegmentStatus.DELETED:
                continue
            path = backend_path(cluster, meta)
            done = results.get(path)
            if done is None or done.size < meta.size:
                raise StateConflict(f"segment {path!r}: metadata records {meta.size} bytes but the verified "
                                    f"copy has {None if done is None else done.size}", path=path)
            target.update_file_segment(meta)
    return topics, queues


def migrate(spark, config: str | os.PathLike, to_config: str | os.PathLike, *,
            chunk: int = DEFAULT_CHUNK) -> MigrateResult:
    """Copy the store of ``config`` to the backend and metadata store of ``to_config``.

    The source must not be written meanwhile. Both configs must name the same cluster and
    broker (segment paths contain them) and different backends. The target is written
    inside a :class:`~tiered_core.access.writer_session.WriterSession` (its store lock and
    the claim of its prefix). A failed run raises the typed error of the failed copy
    (DriverError, StateConflict...) and leaves the target's metadata untouched; running
    again finishes the job without duplicating bytes.
    """
    from tiered_core.config import StoreConfig

    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InvalidOption(f"chunk size (--chunk-size) must be an int >= 1 byte, got {chunk!r}", option="chunk_size",
                            value=chunk)
    started = time.perf_counter()
    source_src, target_src = ConfigSource.from_file(config), ConfigSource.from_file(to_config)
    source_cfg, target_cfg = StoreConfig.load(config), StoreConfig.load(to_config)
    check_migration(source_cfg, target_cfg, to_config)
    source_meta = open_metadata_readonly(source_cfg)  # the source is only read
    try:
        tasks = plan_copies(source_cfg, source_meta)
        with WriterSession(target_cfg, writer="tiered spark migrate", appends=True) as target:
            check_target_objects(target, {t.path for t in tasks}, to_config)
            results: list[CopyResult] = []
            if tasks:
                rdd = spark.sparkContext.parallelize(tasks, min(len(tasks), 4096))
                copy = _copy_job(source_src, target_src, chunk)
                try:
                    results = rdd.mapPartitions(copy).collect()
                except Exception as exc:  # a Spark job failure wraps the task's error in Java's
                    err = task_error(exc, "")
                    # A refusal of the target's contents says itself that a re-run will not help.
                    what = ("migration refused (the target's metadata was not written)"
                            if isinstance(err, (StateConflict, CorruptData)) else
                            "migration incomplete (the target's metadata was not written; after a backend "
                            "failure or a kill, running it again resumes)")
                    err.message = f"{what}: {err.message}"
                    err.args = (err.message,)
                    raise err from None
            by_path = {r.path: r for r in results}
            if len(by_path) != len(tasks):
                raise StateConflict(f"migration copied {len(by_path)} of {len(tasks)} segments",
                                    planned=len(tasks))
            topics, queues = write_target_metadata(source_meta, target.metadata, by_path, source_cfg.cluster)
    finally:
        source_meta.close()
    return MigrateResult(len(results), sum(r.size for r in results), sum(r.copied for r in results),
                         sum(1 for r in results if r.resumed_at), topics, queues,
                         time.perf_counter() - started)


def check_migration(source_cfg, target_cfg, to_config: str | os.PathLike) -> None:
    """Refuse a migration that cannot work or would write into the source (before anything
    runs): a process-local backend, another cluster or broker name, the same backend or
    metadata store (:class:`ConfigError`), and a target whose ``store_path``, tier root or
    metadata file is, contains or lies inside one of the source's
    (:class:`~tiered_core.errors.InvalidPath` naming ``--to-config``)."""
    require_shared_backend(source_cfg, "source")
    require_shared_backend(target_cfg, "target")
    for key in ("cluster", "broker"):
        if getattr(source_cfg, key) != getattr(target_cfg, key):
            raise ConfigError(f"{to_config}: {key} {getattr(target_cfg, key)!r} differs from the source's "
                              f"{getattr(source_cfg, key)!r}; segment paths contain it, so they must match",
                              key=key, source=os.fspath(to_config))
    if (source_cfg.driver, source_cfg.effective_driver_options()) == (
            target_cfg.driver, target_cfg.effective_driver_options()):
        raise ConfigError(f"{to_config}: the target backend is the source backend", key="driver",
                          source=os.fspath(to_config))
    if os.path.abspath(source_cfg.effective_metadata_path()) == os.path.abspath(target_cfg.effective_metadata_path()):
        raise ConfigError(f"{to_config}: the target metadata store is the source's", key="metadata_path",
                          source=os.fspath(to_config))
    check_separate_stores(target_cfg, [source_cfg], option="--to-config")


def check_target_objects(target: WriterSession, planned: set[str], to_config: str | os.PathLike = "") -> None:
    """Refuse a target prefix (owned by the target store through ``target``, so the store
    opened on the target config later is its owner, and a re-run is the same owner) that
    holds objects this migration does not plan to write: :class:`StateConflict` when the
    target's own metadata lists them (the target is a store in service), else
    :class:`~tiered_core.errors.UnknownObjects`. Neither advises removing anything: they
    are someone's data."""
    from tiered_core.errors import UnknownObjects
    from tiered_core.flat.ownership import segment_objects, tier_prefix
    from tiered_core.ops.reconcile import backend_path

    config = target.config
    prefix = tier_prefix(config.cluster, config.broker)
    unknown = [(p, n) for p, n in segment_objects(target.driver, config.cluster, config.broker)
               if n and p not in planned]
    if not unknown:
        return
    listed = {backend_path(config.cluster, meta) for meta in target.metadata.iterate_file_segments()
              if meta.status != SegmentStatus.DELETED}
    own = [p for p, _ in unknown if p in listed]
    where = os.fspath(to_config) or "the target config"
    if own:
        raise StateConflict(
            f"the target ({where}) is a store of its own: its metadata lists {len(own)} segment(s) under {prefix!r} "
            f"that the source does not have (e.g. {own[0]!r}). A migration fills an empty target or resumes its "
            "own run; it never writes into another store. Nothing was read or changed: migrate to an empty "
            "target (another store_path and backend location)", prefix=prefix, examples=own[:3], count=len(own))
    raise UnknownObjects(
        f"the target backend holds {len(unknown)} object(s) under {prefix!r} that neither the source nor the "
        f"target's metadata lists (e.g. {unknown[0][0]!r}): someone's data, which a migration never overwrites. "
        f"Nothing was read or changed. `tiered verify --config {where}` lists whose each object looks like; "
        "migrate to an empty target", count=len(unknown), prefix=prefix, examples=[p for p, _ in unknown[:3]],
        fix=f"tiered verify --config {where}")


def _copy_job(source: ConfigSource, target: ConfigSource, chunk: int):
    def run(tasks):
        return tagged_iter(_copy_partition(source, target, chunk, tasks))
    return run
