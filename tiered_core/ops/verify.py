"""``tiered verify``: walk one store end to end and report what is wrong with it, read-only.

:func:`verify_store` takes no store lock, claims nothing and writes nowhere: the driver is
wrapped in :class:`~tiered_core.flat.ownership.ReadOnlyDriver` (every write refused before
it reaches the backend), the metadata is a private read-only copy
(:func:`~tiered_core.metadata.open_metadata_read_only`), the local store's files are only
listed and read. It is safe beside a running store (docs/ARCHITECTURE.md §10.4).

First the config must describe the store in ``store_path`` (the cluster, broker, driver
and tier location it was created with): when it does not, that IDENTITY_MISMATCH is the
whole report. Then the areas, in order, each its own module:

1. ownership (:mod:`tiered_core.ops.verify_ownership`): the owner record and whether this
   store owns the prefix; when another store does (OWNER_OTHER), nothing else is compared:
   its objects are not this store's;
2. metadata against one listing of the backend (:mod:`tiered_core.ops.verify_listing`):
   unlisted, missing and short objects, tails past the committed end, sealed flags;
3. every queue (:mod:`tiered_core.ops.verify_queue`): segments that join, units inside the
   commit log, and with ``deep`` every message through the read checks and the segments'
   times; the walk is pluggable (``walk``: the Spark walk of ``tiered spark verify``). A
   segment the listing and the walk both find short or gone is reported once, by the
   listing, with the queue offsets the walk found lost. With ``checksums``, every other
   segment is then hashed against the checksum its writer recorded
   (:mod:`tiered_core.ops.verify_checksum`: all its bytes read once more, so it is asked
   for);
4. the key index (:mod:`tiered_core.ops.verify_index`): every uploaded file readable, with
   ``deep`` every entry pointing at a message with its key;
5. the local store (:mod:`tiered_core.ops.verify_local`): what waits to be tiered, what
   local retention holds back.

``topics`` restricts areas 3 to 5 to those topics (the ownership and the listing are the
prefix's as a whole).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
import time
from typing import Any, Callable, ContextManager, Iterable, Protocol

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.common import FileSegmentType
from tiered_core.errors import CorruptData, NotFound
from tiered_core.flat.segment_reader import SegmentReader
from tiered_core.flat.ownership import ReadOnlyDriver, read_store_id, tier_prefix
from tiered_core.metadata import open_metadata_read_only
from tiered_core.ops.findings import Finding, FindingKind, Severity, VerifyReport
from tiered_core.ops.verify_checksum import Hasher, checksum_findings, checksummed, without_checksum
from tiered_core.ops.verify_index import check_index
from tiered_core.ops.verify_listing import check_listing, metadata_segments
from tiered_core.ops.verify_local import local_findings, local_witness
from tiered_core.ops.verify_ownership import identity_findings, ownership_findings
from tiered_core.ops.verify_queue import QueueWalk, QueueWork, Walk, queue_works, total_units
from tiered_core.ops.verify_range import walk_queues
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import TieredMetadataStore

_LOST = (FindingKind.LOST_BYTES, FindingKind.MISSING_OBJECT)


class Bar(Protocol):
    def update(self, n: int = 1) -> None: ...


#: ``progress(label, total)``: a context manager whose ``update(n)`` counts ``n`` more of
#: ``total`` (the CLI passes its :class:`~tiered_core.cli.progress.Progress`).
ProgressFactory = Callable[[str, int], ContextManager[Bar]]


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


def _bar(progress: ProgressFactory | None, label: str, total: int) -> ContextManager[Bar]:
    return progress(label, total) if progress is not None else contextlib.nullcontext(_NoBar())


def prop_crc_policy(config: Any) -> PropCrcPolicy:
    """The whole-message CRC policy of verify: REQUIRE when the store requires the property
    (``verify_prop_crc``), else checked where present."""
    return PropCrcPolicy.REQUIRE if getattr(config, "verify_prop_crc", False) else PropCrcPolicy.IF_PRESENT


def verify_store(config: Any, *, deep: bool = False, checksums: bool = False, topics: Iterable[str] | None = None,
                 progress: ProgressFactory | None = None, walk: Walk | None = None,
                 hasher: Hasher | None = None) -> VerifyReport:
    """Verify the store ``config`` (a :class:`~tiered_core.config.StoreConfig`) and return
    the report (module doc). Read-only: no lock, no claim, no write anywhere. ``walk``
    replaces the in-process per-queue walk (:func:`~tiered_core.ops.verify_range.walk_queues`),
    ``hasher`` the in-process hashing of ``checksums``
    (:func:`~tiered_core.ops.verify_checksum.checksum_findings`).
    Raises what opening the driver or the metadata raises (a typed
    :class:`~tiered_core.errors.TieredStoreError`: an unreadable metadata file, a driver
    that cannot be opened) and driver errors other than a missing object."""
    started = time.monotonic()
    topic_list = None if topics is None else sorted(set(topics))
    cluster, broker = config.cluster, config.broker
    report = VerifyReport(tier_prefix(cluster, broker), deep, checksums)
    prop_crc = prop_crc_policy(config)
    metadata_path = config.effective_metadata_path()

    def fresh_metadata() -> TieredMetadataStore:
        return open_metadata_read_only(config.metadata, metadata_path)

    driver: SegmentDriver = ReadOnlyDriver(config.open_driver(), "tiered verify only reads")
    try:
        metadata = fresh_metadata()
        try:
            # 0. does the config describe this store at all? (else every other area would
            # check the wrong prefix and report its emptiness: nothing else is checked)
            store_id = read_store_id(config.store_path)
            mismatched = identity_findings(config, driver, metadata, store_id)
            if mismatched:
                report.extend(mismatched)
                report.stats.elapsed_s = round(time.monotonic() - started, 3)
                return report
            # 1. ownership
            owned = ownership_findings(driver, cluster, broker, store_id)
            if any(f.kind is FindingKind.OWNER_OTHER for f in owned):
                # The prefix's objects are another store's now: compared with this store's
                # metadata they would read as its own (adoptable, wrong seals).
                report.extend(_not_compared(f) for f in owned)
                report.stats.elapsed_s = round(time.monotonic() - started, 3)
                return report
            report.extend(owned)
            # 2. metadata <-> backend
            n_segments = len(metadata_segments(metadata, cluster, broker))
            with _bar(progress, "listing", n_segments) as bar:
                listing = check_listing(driver, metadata, cluster, broker, fresh_metadata=fresh_metadata,
                                        prop_crc=prop_crc, progress=bar.update,
                                        witness=local_witness(config.store_path))
            report.stats.objects_listed = len(listing.listing)
            # 3. every queue
            works = queue_works(metadata, cluster, broker, topic_list)
            report.extend(_queue_row_findings(metadata, works))
            run = walk or walk_queues
            with _bar(progress, "deep walk" if deep else "walk", total_units(works)) as bar:
                walked = run(driver, works, deep=deep, prop_crc=prop_crc, progress=bar.update)
            merged = _merge_lost(listing.findings, walked, fresh_metadata, cluster, broker)
            report.extend(_with_lost_offsets(driver, merged, works, prop_crc))
            report.stats.add(walked.stats)
            if checksums:
                # (a segment the walk found corrupt is reported there, with its offsets)
                corrupt = {f.subject for f in report.findings if f.severity is Severity.CORRUPT}
                hashed = [seg for seg in checksummed(listing, topic_list) if seg.path not in corrupt]
                with _bar(progress, "checksums", len(hashed)) as bar:
                    mismatched, hashed_bytes, report.stats.objects_hashed = (hasher or checksum_findings)(
                        driver, hashed, bar.update)
                report.extend(mismatched)
                report.stats.bytes_read += hashed_bytes
                report.stats.objects_without_checksum = without_checksum(listing, topic_list)
            # 4. the key index
            index_files = sum(1 for f in listing.segments.values()
                              if f.file_key[2] == int(FileSegmentType.INDEX) and f.meta.size)
            with _bar(progress, "key index", index_files) as bar:
                index = check_index(driver, metadata, cluster, broker, listing=listing.listing,
                                    queue_logs={(w.topic, w.queue_id): _log_of(w) for w in works},
                                    deep=deep, topics=topic_list, progress=bar.update)
            report.extend(index.findings)
            report.stats.add(index.stats)
            # 5. the local store
            # (the tier's end counts an adoptable consume-queue tail, as the store's open and `stat` do)
            tier_end = {(w.topic, w.queue_id): w.max_offset for w in works}
            for f in listing.findings:
                if f.kind is FindingKind.UNCOMMITTED_TAIL and f.topic is not None and f.file_offsets is not None \
                        and "/CONSUME_QUEUE/" in f.subject:
                    key = (f.topic, f.queue_id)
                    tier_end[key] = max(tier_end.get(key, 0), f.file_offsets[1] // CQ_UNIT_SIZE)
            report.extend(local_findings(config.store_path, tier_end,
                                         retention_hours=int(getattr(config, "local_retention_hours", 0)),
                                         topics=topic_list))
        finally:
            metadata.close()
    finally:
        driver.close()
    report.findings.sort(key=_order)
    report.stats.elapsed_s = round(time.monotonic() - started, 3)
    return report


def _queue_row_findings(metadata: TieredMetadataStore, works: list[QueueWork]) -> list[Finding]:
    """A queue whose consume-queue segments the metadata lists but which has no queue row:
    reads of it find no offset at all (OFFSET_TOO_SMALL), while its units are all there.
    Reported as an unlisted object (the row is what is missing); repair records the row."""
    out = []
    for work in works:
        if not work.consume_queue or metadata.get_queue(work.topic, work.queue_id) is not None:
            continue
        out.append(Finding(
            FindingKind.UNLISTED_OBJECT, f"{work.topic}/{work.queue_id}",
            f"the metadata lists {len(work.consume_queue)} consume-queue segment(s) of the queue (offsets "
            f"{work.min_offset}..{work.max_offset - 1}) but holds no row for the queue: reads of it find none of them",
            work.topic, work.queue_id, (work.min_offset, work.max_offset), None,
            {"missing": "queue_row", "min_offset": work.min_offset, "max_offset": work.max_offset},
            fix_text="repair records the queue's row from its consume-queue segments"))
    return out


def _not_compared(finding: Finding) -> Finding:
    """An OWNER_OTHER finding saying what verify left unchecked because of it."""
    if finding.kind is not FindingKind.OWNER_OTHER:
        return finding
    return replace(finding, detail=f"{finding.detail}; the listing, the queues and the key index were not compared "
                                   "with this store's metadata: another store owns the prefix",
                   facts={**finding.facts, "compared": False})


def _log_of(work: QueueWork) -> tuple[tuple, int]:
    """The commit-log references of ``work`` and the end of what the metadata committed."""
    refs = work.commit_log
    return refs, (refs[-1].base_offset + refs[-1].size) if refs else 0


def _merge_lost(listed: list[Finding], walked: QueueWalk, fresh_metadata: Callable[[], TieredMetadataStore],
                cluster: str, broker: str) -> list[Finding]:
    """The listing's findings and the walk's, with each object whose bytes are short or gone
    reported once: the listing's finding, with the queue offsets the walk found lost. A
    walk finding of lost bytes the listing did not confirm is kept only when a fresh read
    of the metadata still lists the segment (it was not expired during the walk)."""
    by_path = {f.subject: f for f in listed if f.kind in _LOST}
    runs: dict[str, list[Finding]] = {}
    rest: list[Finding] = []
    unconfirmed: list[Finding] = []
    for f in walked.findings:
        if f.kind in _LOST and f.subject in by_path:
            runs.setdefault(f.subject, []).append(f)
        elif f.kind in _LOST:
            unconfirmed.append(f)
        else:
            rest.append(f)
    out = [f for f in listed if f.subject not in runs]
    for path, found in runs.items():
        base = by_path[path]
        offsets = [f.queue_offsets for f in found if f.queue_offsets is not None]
        q = (min(o[0] for o in offsets), max(o[1] for o in offsets)) if offsets else base.queue_offsets
        detail = base.detail + (f"; {offsets_text(q)} of {base.topic}/{base.queue_id} cannot be read"
                                if q is not None else "")
        facts = dict(base.facts, units=(q[1] - q[0]) if q is not None else 0)
        out.append(Finding(base.kind, path, detail, base.topic, base.queue_id, q, base.file_offsets, facts,
                           base.fix_text))
    if unconfirmed:
        fresh = fresh_metadata()
        try:
            still = metadata_segments(fresh, cluster, broker)
        finally:
            fresh.close()
        out.extend(f for f in unconfirmed if f.subject in still)
    return out + rest


def _with_lost_offsets(driver: SegmentDriver, findings: list[Finding], works: list[QueueWork],
                       prop_crc: PropCrcPolicy) -> list[Finding]:
    """``findings`` with the queue offsets of each short or missing segment of a queue
    filled in where the walk did not give them (a shallow walk reads no message): for a
    consume-queue segment the units its lost bytes held, for a commit-log segment the
    messages whose bytes reach into them (a bisect over the units)."""
    by_queue = {(w.topic, w.queue_id): w for w in works}
    out = []
    for f in findings:
        work = by_queue.get((f.topic, f.queue_id)) if f.topic is not None else None
        if f.kind not in _LOST or f.queue_offsets is not None or work is None or f.file_offsets is None:
            out.append(f)
            continue
        lo, hi = f.file_offsets
        q: tuple[int, int] | None
        if f.facts.get("type") == "CONSUME_QUEUE":
            q = (lo // CQ_UNIT_SIZE, -(-hi // CQ_UNIT_SIZE))
        else:
            q = _messages_in(driver, work, lo, hi, prop_crc)
        if q is None or q[0] >= q[1]:
            out.append(f)
            continue
        detail = f"{f.detail}; {offsets_text(q)} of {f.topic}/{f.queue_id} cannot be read"
        out.append(Finding(f.kind, f.subject, detail, f.topic, f.queue_id, q, f.file_offsets,
                           dict(f.facts, units=q[1] - q[0]), f.fix_text))
    return out


def _messages_in(driver: SegmentDriver, work: QueueWork, lo: int, hi: int,
                 prop_crc: PropCrcPolicy) -> tuple[int, int] | None:
    """The queue offsets whose messages reach into commit-log bytes ``[lo, hi)`` (None: the
    units on the way cannot be read)."""
    reader = SegmentReader.from_refs(driver, work.topic, work.queue_id, work.consume_queue, work.commit_log,
                                     prop_crc)
    try:
        q0 = reader.first_unit_at_or_after(lo, work.min_offset, work.max_offset)
        q1 = reader.first_unit_at_or_after(hi, work.min_offset, work.max_offset)
        if q0 is None or q1 is None:
            return None
        before = reader.unit(q0 - 1) if q0 > work.min_offset else None
    except (NotFound, CorruptData):  # the consume-queue bytes on the way are lost too (their own finding)
        return None
    if before is not None and before.is_valid and before.commitlog_offset + before.size > lo:
        q0 -= 1
    return q0, q1


def offsets_text(offsets: tuple[int, int]) -> str:
    """``queue offset N`` or ``queue offsets A..B`` (inclusive) for ``[from, to)``."""
    lo, hi = offsets
    return f"queue offset {lo}" if hi - lo == 1 else f"queue offsets {lo}..{hi - 1}"


def _order(f: Finding) -> tuple:
    return (-f.severity.rank, f.kind.value, f.topic or "", f.queue_id if f.queue_id is not None else -1,
            f.queue_offsets or (-1, -1), f.subject)


def worst_findings(report: VerifyReport, at_least: Severity = Severity.WARNING) -> list[Finding]:
    """The findings of ``report`` of severity ``at_least`` or worse."""
    return [f for f in report.findings if f.severity.rank >= at_least.rank]


__all__ = ["ProgressFactory", "offsets_text", "prop_crc_policy", "verify_store", "worst_findings"]

