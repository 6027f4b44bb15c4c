"""Compare what the metadata store lists with what the backend holds, at open.

The metadata is the record of which backend objects are this store's. When it has been
lost, restored from an old backup, or belongs to another store, serving it would answer
"offset too small" for data the tier still holds, and rolling over it would delete that
data. So at open every object under the store's prefix must be one the metadata knows;
the first one that is not stops the open (:class:`~tiered_core.errors.UnknownObjects`)
until the metadata is rebuilt from the listing. Empty objects are not data and are
ignored; ownership records are not segments.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from tiered_core.codec.naming import parse_segment_path, segment_path
from tiered_core.errors import MetadataError, TieredStoreError, UnknownObjects
from tiered_core.flat.ownership import segment_objects, tier_prefix
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore

log = logging.getLogger(__name__)

_EXAMPLES = 5


@dataclass
class ReconcileReport:
    """What the listing of ``prefix`` holds beyond and short of the metadata."""

    prefix: str
    listed: int = 0
    #: Non-empty segments the metadata lists (not DELETED).
    known: int = 0
    #: Non-empty objects the metadata does not list, ``(path, size)``.
    unknown: list[tuple[str, int]] = field(default_factory=list)
    #: Non-empty segments the metadata lists (not DELETED) that the backend does not hold.
    missing: list[str] = field(default_factory=list)
    #: Segments the backend holds shorter than the metadata records, ``(path, size held)``.
    short: list[tuple[str, int]] = field(default_factory=list)

    @property
    def unknown_bytes(self) -> int:
        return sum(size for _path, size in self.unknown)

    def refusal(self, fix: str, advice: str | None = None) -> UnknownObjects:
        """The error that stops an open over this report's unknown objects; ``advice`` says
        what to do (default: rebuild the metadata with ``fix``)."""
        shown = ", ".join(path for path, _size in self.unknown[:_EXAMPLES])
        more = f" and {len(self.unknown) - _EXAMPLES} more" if len(self.unknown) > _EXAMPLES else ""
        if advice is None:
            advice = (f"If the metadata was lost or restored from an old backup, rebuild it from the backend with "
                      f"`{fix}` (or set metadata_recovery = \"rebuild\")")
            foreign = [path for path, _size in self.unknown if not _is_segment_path(path)]
            if foreign:  # a rebuild skips those: it would refuse again
                repair = fix.replace("metadata rebuild", "repair").replace("--force", "--apply")
                advice += (f"; {len(foreign)} of them are not segments of any store (e.g. {foreign[0]!r}): a rebuild "
                           f"does not adopt them, `{repair}` moves them to the quarantine (`tiered verify` lists "
                           "what each object is)")
            else:
                advice += ("; objects of another writer that fail the read-back check are moved to the quarantine "
                           "by `tiered repair --apply` instead (`tiered verify` lists what each object is)")
        return UnknownObjects(
            f"the backend holds {len(self.unknown)} object(s) ({self.unknown_bytes} bytes) under "
            f"{self.prefix!r} that the metadata store does not list (lost, restored from an old backup, "
            f"or written by another store): {shown}{more}. Nothing was read or changed. {advice}",
            count=len(self.unknown), prefix=self.prefix, examples=[p for p, _ in self.unknown[:_EXAMPLES]],
            fix=fix)


def _is_segment_path(path: str) -> bool:
    try:
        parse_segment_path(path)
    except TieredStoreError:
        return False
    return True


def backend_path(cluster: str, meta: FileSegmentMetadata) -> str:
    """The backend object of a segment record (its ``path`` is ``broker/topic/queue``)."""
    broker, topic, queue = meta.path.split("/")
    return segment_path(cluster, broker, topic, int(queue), FileSegmentType(meta.type), meta.base_offset)


def listed_segment_paths(metadata: TieredMetadataStore, cluster: str) -> set[str]:
    """The backend objects of every live segment ``metadata`` records."""
    return {backend_path(cluster, meta) for meta in metadata.iterate_file_segments()
            if meta.status != SegmentStatus.DELETED}


def reconcile(driver: SegmentDriver, metadata: TieredMetadataStore, cluster: str, broker: str) -> ReconcileReport:
    """List the store's prefix once and compare it with every segment record."""
    report = ReconcileReport(tier_prefix(cluster, broker))
    known: dict[str, FileSegmentMetadata] = {}
    for meta in metadata.iterate_file_segments():
        known[backend_path(cluster, meta)] = meta
    listed: set[str] = set()
    for path, size in segment_objects(driver, cluster, broker):
        report.listed += 1
        listed.add(path)
        meta = known.get(path)
        if meta is None:
            if size:
                report.unknown.append((path, size))
        elif size < meta.size and meta.status != SegmentStatus.DELETED:
            report.short.append((path, size))
    live = [path for path, meta in known.items() if meta.size and meta.status != SegmentStatus.DELETED]
    report.known = len(live)
    report.missing = sorted(path for path in live if path not in listed)
    return report


def sealed_since(driver: SegmentDriver, metadata: TieredMetadataStore, cluster: str) -> str | None:
    """A last segment the metadata records open that the backend holds sealed, or None: what
    a take-over leaves in the old owner's prefix even when the new owner wrote nothing yet (it
    seals the old owner's last segments). One ``is_sealed`` per flat file."""
    last: dict[tuple[str, int], FileSegmentMetadata] = {}
    for meta in metadata.iterate_file_segments():
        if meta.status == SegmentStatus.DELETED:
            continue
        key = (meta.path, meta.type)
        if key not in last or meta.base_offset > last[key].base_offset:
            last[key] = meta
    for meta in last.values():
        if meta.status != SegmentStatus.SEALED and meta.size:
            path = backend_path(cluster, meta)
            if driver.is_sealed(path):
                return path
    return None


def proves_sole_writer(driver: SegmentDriver, metadata: TieredMetadataStore, cluster: str,
                       report: ReconcileReport) -> bool:
    """Whether a prefix whose owner records were deleted was written by no other store since
    ``metadata`` described it, the proof a claim of it without a take-over needs: the metadata
    lists everything the prefix holds (``report``, its :func:`reconcile`, found nothing
    unknown) and no take-over sealed its segments (:func:`sealed_since`)."""
    return not report.unknown and sealed_since(driver, metadata, cluster) is None


def metadata_refusal(exc: MetadataError, metadata_path: str, fix: str) -> MetadataError:
    """The error that stops an open over a metadata store that cannot be opened: one in use
    by another process or out of reach (its ``cause``) is not damaged, and is not to be
    rebuilt."""
    cause = exc.context.get("cause", "")
    if cause == "in_use":
        return MetadataError(f"{exc.message}. Another process holds the metadata database (another store, a "
                             "`sqlite3` shell, a backup tool): stop it, then retry. The database is not damaged: "
                             "do not rebuild it. Nothing was changed", path=metadata_path, cause=cause)
    if cause == "access":
        return MetadataError(f"{exc.message}. Check that this user may read and write the file and its directory "
                             "(and that the disk is not mounted read-only). The database is not damaged: do not "
                             "rebuild it. Nothing was changed", path=metadata_path, cause=cause)
    return MetadataError(f"{exc.message}. Nothing was changed. To rebuild it from the backend "
                         f"(the damaged file is kept aside), run `{fix}`, or set "
                         "metadata_recovery = \"rebuild\"", path=metadata_path, fix=fix)


def open_checked_metadata(open_metadata: Callable[[], TieredMetadataStore], metadata_path: str,
                          driver: SegmentDriver, cluster: str, broker: str, *, rebuild: bool,
                          fix: str, checked: ReconcileReport | None = None
                          ) -> tuple[TieredMetadataStore, ReconcileReport]:
    """Open the metadata store and make sure it lists everything the backend holds; returns
    it with the comparison (after a rebuild: one that finds nothing missing).

    An unreadable store, or objects it does not list, stop the open with a typed error
    naming ``fix`` -- unless ``rebuild``: then the damaged file is set aside (never
    deleted) and the metadata is rebuilt from the backend's listing first. ``checked`` is
    the report of a comparison made just before on the same metadata (under the store's
    lock): the prefix is then not listed again.
    """
    from tiered_core.metadata import set_aside
    from tiered_core.ops.rebuild import rebuild_metadata

    try:
        metadata = open_metadata()
    except MetadataError as exc:
        if not rebuild or exc.context.get("cause"):
            raise metadata_refusal(exc, metadata_path, fix) from exc
        moved = set_aside(metadata_path)
        log.error("metadata store %r cannot be opened (%s); moved to %s and rebuilding it from the backend",
                  metadata_path, exc.message, moved)
        metadata = open_metadata()
    try:
        report = checked if checked is not None else reconcile(driver, metadata, cluster, broker)
        if report.unknown:
            if not rebuild:
                raise report.refusal(fix)
            log.warning("%d object(s) under %r are not in the metadata: rebuilding it from the backend",
                        len(report.unknown), report.prefix)
            stats = rebuild_metadata(driver, metadata, cluster=cluster, broker=broker, force=True)
            log.warning("metadata rebuilt: %d topic(s), %d queue(s), %d segment(s)", stats.topics,
                        stats.queues, stats.segments)
            for line in stats.heads_without_messages_text():
                log.warning("%s", line)
            report = ReconcileReport(report.prefix, listed=report.listed)
    except BaseException:
        metadata.close()
        raise
    return metadata, report


__all__ = ["ReconcileReport", "backend_path", "listed_segment_paths", "metadata_refusal", "open_checked_metadata",
           "proves_sole_writer", "reconcile", "sealed_since"]
