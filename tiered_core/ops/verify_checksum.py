"""``tiered verify --checksums``: every segment against the checksum its writer recorded (read-only).

A segment's record keeps the CRC-32 of the bytes this store wrote to it
(:attr:`~tiered_core.spi.metadata.FileSegmentMetadata.checksum`, over its first
``checksum_size`` bytes). A segment is append-only: nothing this store does ever changes
those bytes again, so an object whose first ``checksum_size`` bytes hash to anything else
is not the object this store wrote. The read checks of the walk cannot always tell: a
restored copy of another store's object of the same name and size holds valid messages,
maybe inside the recorded times (CHECKSUM_MISMATCH).

Records without a checksum (a rebuild made them, or an older version), objects the
listing found shorter or gone (reported there) and the key index's files (derived data,
with checks and a repair of their own: :mod:`tiered_core.ops.verify_index`) are not read.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping, Protocol

from tiered_core.codec._impl import crc32
from tiered_core.common import FileSegmentType
from tiered_core.errors import NotFound
from tiered_core.ops.findings import Finding, FindingKind
from tiered_core.ops.verify_listing import ListingCheck, Segment
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata

#: Bytes per read while hashing an object.
_READ_CHUNK = 8 << 20


def checksummed(listing: ListingCheck, topics: Iterable[str] | None = None) -> list[Segment]:
    """The segments to hash: a recorded checksum over bytes the listed object still holds
    (in ``topics`` when given), in path order."""
    wanted = None if topics is None else set(topics)
    out = []
    for path, seg in sorted(listing.segments.items()):
        meta = seg.meta
        if meta.checksum is None or not meta.checksum_size or meta.type == FileSegmentType.INDEX:
            continue
        if wanted is not None and seg.file_key[0] not in wanted:
            continue
        if listing.listing.get(path, -1) < meta.checksum_size:
            continue  # gone or short: the listing reports it
        out.append(seg)
    return out


def lacks_checksum(meta: FileSegmentMetadata) -> bool:
    """Whether ``meta`` is a commit-log or consume-queue segment holding bytes with no recorded
    checksum, which ``--checksums`` cannot hash: written before this version kept checksums, or
    recorded by a rebuild or a take-over (``tiered metadata checksum`` records one)."""
    return meta.type != FileSegmentType.INDEX and bool(meta.size) and (meta.checksum is None
                                                                       or not meta.checksum_size)


def without_checksum(listing: ListingCheck, topics: Iterable[str] | None = None) -> int:
    """How many segments (in ``topics`` when given) :func:`lacks_checksum`."""
    wanted = None if topics is None else set(topics)
    return sum(1 for seg in listing.segments.values()
               if lacks_checksum(seg.meta) and (wanted is None or seg.file_key[0] in wanted))


def object_checksum(driver: SegmentDriver, path: str, size: int) -> int:
    """zlib's CRC-32 of the first ``size`` bytes of ``path`` (read in pieces)."""
    crc = 0
    pos = 0
    while pos < size:
        piece = driver.read(path, pos, min(_READ_CHUNK, size - pos))
        if not piece:
            raise NotFound(f"{path!r} ended at {pos} bytes while its first {size} were hashed", path=path)
        crc = crc32(piece, crc)
        pos += len(piece)
    return crc


def object_checksums(driver: SegmentDriver, items: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int | None]]:
    """``(path, CRC-32 of its first size bytes)`` for each ``(path, size)`` of ``items``, in
    their order; None for an object gone meanwhile (expiry beside a running store). Runs
    wherever the driver does: here, or in a Spark task (``tiered spark verify --checksums``)."""
    for path, size in items:
        try:
            yield path, object_checksum(driver, path, size)
        except NotFound:
            yield path, None


def mismatch_findings(segments: list[Segment], found: Mapping[str, int | None]) -> tuple[list[Finding], int, int]:
    """The CHECKSUM_MISMATCH findings of ``segments`` given the checksum ``found`` of each
    path (None or absent: not hashed, gone), in the segments' order; the bytes and the
    segments hashed."""
    findings: list[Finding] = []
    read = hashed = 0
    for seg in segments:
        meta = seg.meta
        crc = found.get(seg.path)
        if crc is None:
            continue
        read += meta.checksum_size
        hashed += 1
        if crc == meta.checksum:
            continue
        topic, queue_id, _ = seg.file_key
        findings.append(Finding(
            FindingKind.CHECKSUM_MISMATCH, seg.path,
            f"its first {meta.checksum_size} bytes are not the bytes this store wrote (CRC-32 {crc:#010x}, "
            f"recorded {meta.checksum:#010x}): the object was replaced or changed after it was written",
            topic=topic, queue_id=queue_id,
            file_offsets=(meta.base_offset, meta.base_offset + meta.checksum_size),
            facts={"recorded_checksum": meta.checksum, "found_checksum": crc,
                   "checksum_size": meta.checksum_size}))
    return findings, read, hashed


class Hasher(Protocol):
    """The shape of the hashing pass ``verify_store`` runs with ``checksums``: the segments
    to hash (:func:`checksummed`) in, their findings, the bytes and the segments hashed out
    (:func:`checksum_findings` in this process; Spark tasks in ``tiered spark verify``).
    ``progress(n)`` is told of ``n`` more segments hashed."""

    def __call__(self, driver: SegmentDriver, segments: list[Segment],
                 progress: Callable[[int], None] = ...) -> tuple[list[Finding], int, int]: ...


def checksum_findings(driver: SegmentDriver, segments: list[Segment],
                      progress: Callable[[int], None] = lambda n: None) -> tuple[list[Finding], int, int]:
    """Hash each of ``segments`` (see :func:`checksummed`) here; returns the CHECKSUM_MISMATCH
    findings, the bytes read and the segments hashed. An object gone meanwhile is skipped."""
    found: dict[str, int | None] = {}
    for path, crc in object_checksums(driver, ((seg.path, seg.meta.checksum_size) for seg in segments)):
        found[path] = crc
        progress(1)
    return mismatch_findings(segments, found)


__all__ = ["Hasher", "checksum_findings", "checksummed", "lacks_checksum", "mismatch_findings", "object_checksum",
           "object_checksums", "without_checksum"]
