"""``tiered metadata checksum``: record a checksum for each segment whose record has none.

A segment's record keeps the CRC-32 of the bytes written to it
(:attr:`~tiered_core.spi.metadata.FileSegmentMetadata.checksum`), which ``tiered verify
--checksums`` compares with the object. Records without one cannot be compared: segments
an older version wrote, and every record a metadata rebuild or a take-over made from the
listing. This records one for each of them, so that from then on a change to those bytes
(bit rot, an object put in a segment's place) is found.

Such a checksum vouches for bytes this store did not hash as it wrote them, so it vouches
only for what ``tiered verify --deep`` can check (every message read through the read
checks, with its body CRC; every consume-queue unit against its message): it is recorded
only when a deep verify of the whole store, run here, finds nothing of severity WARNING or
worse. The caller holds the store's lock from before that verify until the last record is
written (the store is not running, no other writer on this machine starts) and the claim of
its prefix (``tiered metadata checksum`` runs this in a
:class:`~tiered_core.access.writer_session.WriterSession`). Each object is
then read once more and hashed over the size its record has; a record is updated only
while it still has no checksum and that size. The key index's files are left out, as
``verify --checksums`` leaves them (derived data with checks of their own).

Only the metadata is written; no object is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from tiered_core.common import FileSegmentType
from tiered_core.errors import StateConflict
from tiered_core.ops.verify import ProgressFactory, verify_store, worst_findings
from tiered_core.ops.verify_checksum import lacks_checksum, object_checksums
from tiered_core.ops.verify_listing import metadata_segments
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import TieredMetadataStore


@dataclass
class ChecksumRecordStats:
    """What :func:`record_checksums` found and did."""

    #: Commit-log and consume-queue segments holding bytes, and those of them with no checksum.
    segments: int = 0
    without_checksum: int = 0
    #: Checksums recorded (0 on a dry run), and the bytes hashed for them.
    recorded: int = 0
    bytes_hashed: int = 0
    #: Records that changed (or objects that went) between the look and the write: left as they are.
    skipped: int = 0
    applied: bool = False
    #: Objects the deep verify run first listed under the prefix.
    objects_verified: int = 0
    #: Up to three of the segments without a checksum.
    examples: list[str] = field(default_factory=list)


def record_checksums(config: Any, driver: SegmentDriver, metadata: TieredMetadataStore, *, apply: bool = False,
                     progress: Callable[[int, int], None] | None = None,
                     verify_progress: ProgressFactory | None = None) -> ChecksumRecordStats:
    """Record the checksum of every commit-log and consume-queue segment of the store of
    ``config`` (a :class:`~tiered_core.config.StoreConfig`; ``driver`` and ``metadata`` its
    own, open, under its lock) whose record has none (module doc); with ``apply`` false only
    count them. ``progress(done, total)`` is told after each segment hashed; ``verify_progress``
    is the deep verify's (as :func:`~tiered_core.ops.verify.verify_store` takes it).

    Raises :class:`StateConflict` when ``tiered verify --deep`` finds a problem (naming how
    many and the first, and that nothing was recorded); driver and metadata errors as they come.
    """
    stats = ChecksumRecordStats(applied=apply)
    report = verify_store(config, deep=True, progress=verify_progress)
    stats.objects_verified = report.stats.objects_listed
    problems = worst_findings(report)
    if problems:
        first = problems[0]
        raise StateConflict(
            f"tiered verify --deep finds {len(problems)} problem(s) in the store, e.g. {first.kind.value} of "
            f"{first.subject!r}: {first.detail}. A checksum vouches for the bytes it hashes, so none was "
            "recorded: mend the store first (`tiered verify` names the fix of each problem), then run this "
            "again", findings=len(problems), kind=first.kind.value, subject=first.subject,
            store_path=config.store_path)
    segments = metadata_segments(metadata, config.cluster, config.broker)
    todo = [seg for _path, seg in sorted(segments.items()) if lacks_checksum(seg.meta)]
    stats.segments = sum(1 for seg in segments.values() if seg.meta.type != FileSegmentType.INDEX and seg.meta.size)
    stats.without_checksum = len(todo)
    stats.examples = [seg.path for seg in todo[:3]]
    if not apply:
        return stats
    by_path = {seg.path: seg for seg in todo}
    done = 0
    for path, crc in object_checksums(driver, ((seg.path, seg.meta.size) for seg in todo)):
        done += 1
        seen = by_path[path].meta
        current = metadata.get_file_segment(int(seen.type), seen.path, seen.base_offset)
        if crc is None or current is None or not lacks_checksum(current) or current.size != seen.size:
            stats.skipped += 1
        else:
            current.checksum, current.checksum_size = crc, seen.size
            metadata.update_file_segment(current)
            stats.recorded += 1
            stats.bytes_hashed += seen.size
        if progress is not None:
            progress(done, len(todo))
    return stats


__all__ = ["ChecksumRecordStats", "record_checksums"]
