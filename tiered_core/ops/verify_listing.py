"""``tiered verify``: the metadata against one listing of the backend (read-only).

One listing of the store's prefix (:func:`~tiered_core.flat.ownership.segment_objects`:
owner records and the quarantine are not store objects) is compared with every segment
record of the metadata:

* an object no record lists: UNLISTED_OBJECT, with whose it looks like
  (:func:`~tiered_core.codec.naming.parse_segment_path`) and whether it is *adoptable*: a
  segment of this broker that continues its flat file and passes the read-back check;
* a non-empty record whose object is gone: MISSING_OBJECT (INDEX_MISSING for the key index);
* an object shorter than committed: LOST_BYTES;
* an object longer than committed: UNCOMMITTED_TAIL when the extra bytes pass the read-back
  check (whole messages, or units, maybe ending in a torn one), else BAD_TAIL;
* a sealed flag the backend and the record disagree on: SEALED_MISMATCH;
* an object the driver's listing hides that holds no byte of any segment (e.g. named like a
  part of a segment of the chained layout, but not one of its parts:
  :meth:`~tiered_core.spi.driver.SegmentDriver.foreign_objects`): STRAY_OBJECT;
* pieces of a sealed segment of this store that its own clean-up removes but an interrupted
  one left (:meth:`~tiered_core.spi.driver.SegmentDriver.leftover_objects`): LEFTOVER_PARTS.

No false positives beside a running store: the store writes the backend before the
metadata (``FlatAppendFile.commit`` commits, then records the size; a seal is recorded
after it is made; a roll records the segment before its first commit creates the object;
expiry deletes the object, then its record), so a tail past the committed end, a seal the
record does not show yet and a record without an object yet are what a live store looks
like between two steps. A mismatch is therefore only a suspect until rounds of re-checks
(:func:`_confirm`) confirm it: a fresh look at the object, a pause, a fresh read of the
metadata. Bytes lost and a recorded seal the object lacks are judged against the metadata
read *before* the look (a later record can only be ahead of the object it saw), a missing
object, an unlisted one, a tail and a seal not recorded against the metadata read *after*
it (the record of what the look saw is written by then). What every round confirms is
reported.
"""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.naming import INDEX_TOPIC, parse_segment_path, segment_path
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.errors import NotFound, TieredStoreError
from tiered_core.flat.ownership import OWNER_DIR, is_reserved_path, segment_objects, tier_prefix
from tiered_core.flat.read_back import ReadBack, TailWitness, read_back_messages, read_back_units, tail_messages
from tiered_core.ops.findings import Finding, FindingKind
from tiered_core.ops.reconcile import backend_path
from tiered_core.codec.compacted_check import compacted_file_problem
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore

#: A tail (or an unlisted object) is read back in pieces of at most this many bytes.
_READ_CHUNK = 8 << 20
#: Pauses before each re-check of a mismatch (seconds): a running store's backend step is
#: followed by its metadata step within moments; a real fault survives every round.
SETTLE_S = (0.0, 0.25, 1.0)


@dataclass
class Segment:
    """One segment record, with the backend path it names and its flat file's key."""

    path: str
    meta: FileSegmentMetadata
    last: bool = False

    @property
    def file_key(self) -> tuple[str, int, int]:
        _broker, topic, queue = self.meta.path.split("/")
        return topic, int(queue), int(self.meta.type)


@dataclass
class ListingCheck:
    """What the comparison found (``findings``), the listing (path -> size) and the
    segments the metadata lists (path -> :class:`Segment`)."""

    findings: list[Finding] = field(default_factory=list)
    listing: dict[str, int] = field(default_factory=dict)
    segments: dict[str, Segment] = field(default_factory=dict)


def metadata_segments(metadata: TieredMetadataStore, cluster: str, broker: str,
                      deleted: set[str] | None = None) -> dict[str, Segment]:
    """Every live (not DELETED) segment record of ``broker``, by backend path; the last
    segment of each flat file is marked ``last``. The paths of DELETED records (expiry
    marked them; it deletes the object next) are added to ``deleted`` when given."""
    by_file: dict[tuple[str, int], list[Segment]] = defaultdict(list)
    for meta in metadata.iterate_file_segments():
        parts = meta.path.split("/")
        if len(parts) != 3 or parts[0] != broker or not parts[2].isdigit():
            continue
        if meta.status == SegmentStatus.DELETED:
            if deleted is not None:
                deleted.add(backend_path(cluster, meta))
            continue
        by_file[(meta.path, int(meta.type))].append(Segment(backend_path(cluster, meta), meta))
    out: dict[str, Segment] = {}
    for segs in by_file.values():
        segs.sort(key=lambda s: s.meta.base_offset)
        segs[-1].last = True
        for seg in segs:
            out[seg.path] = seg
    return out


#: What to do about another store's tier found inside this store's prefix (repair never moves it).
NESTED_TIER_FIX = ("another store keeps its tier inside this store's prefix (its driver's prefix points below this "
                   "one's): repair never moves another store's objects. Give one of the two stores a prefix outside "
                   "the other's and move that store's objects there with the backend's own tools; while they stay, "
                   "this store refuses to open (objects its metadata does not list)")


def nested_tiers(listing: Iterable[str]) -> list[str]:
    """The prefixes (ending in ``/``) of the other stores' tiers inside this store's prefix:
    where a listed path holds an owner record directory deeper than the store's own."""
    mark = f"/{OWNER_DIR}/"
    return sorted({path[:path.index(mark) + 1] for path in listing if mark in path and not is_reserved_path(path)})


class _Checker:
    """The comparison for one metadata snapshot (the first pass, then the re-check)."""

    def __init__(self, driver: SegmentDriver, segments: dict[str, Segment], cluster: str, broker: str,
                 prop_crc: PropCrcPolicy, listing: dict[str, int], witness: TailWitness | None = None) -> None:
        self.witness = witness
        self.driver, self.segments = driver, segments
        self.nested = nested_tiers(listing)
        self.cluster, self.broker, self.prop_crc = cluster, broker, prop_crc
        self.seal_known = driver.capabilities.seal
        # (topic, queue, type) -> end of the file's last recorded segment
        self.file_end: dict[tuple[str, int, int], int] = {}
        # (topic, queue, type) -> where the last segment's bytes end in the backend (past
        # file_end by a tail written after the last metadata update)
        self.backend_end: dict[tuple[str, int, int], int] = {}
        # (topic, queue) -> where the commit log's bytes end in the backend (what the store
        # adopts at its next open): the limit for consume-queue units read back
        self.commit_log_end: dict[tuple[str, int], int] = {}
        for seg in segments.values():
            if seg.last:
                self.file_end[seg.file_key] = seg.meta.base_offset + seg.meta.size
                self.backend_end[seg.file_key] = seg.meta.base_offset + max(seg.meta.size, listing.get(seg.path, 0))
                topic, queue_id, ftype = seg.file_key
                if ftype == int(FileSegmentType.COMMIT_LOG):
                    end = seg.meta.base_offset + max(seg.meta.size, listing.get(seg.path, 0))
                    # (and the unlisted segments that continue it: adopted, they hold the units' messages)
                    while listing.get(nxt := segment_path(cluster, broker, topic, queue_id,
                                                          FileSegmentType.COMMIT_LOG, end), 0) > 0:
                        end += listing[nxt]
                    self.commit_log_end[(topic, queue_id)] = end

    # -- one object ---------------------------------------------------------------------

    def listed(self, seg: Segment, size: int | None, sealed: bool | None = None,
               before: Segment | None = None) -> Finding | None:
        """The finding for a segment the metadata lists whose object holds ``size`` bytes
        (None: it is not there) and is ``sealed`` (None: ask the backend now), or None when
        they agree. ``seg`` is the record read after that look at the object, ``before``
        the one read before it (default ``seg``): the store changes the backend first and
        the metadata after, so bytes lost and a recorded seal the object lacks are judged
        against ``before``, a missing object, a tail and a seal not recorded against ``seg``."""
        before = before or seg
        meta, path = seg.meta, seg.path
        topic, queue_id, ftype = seg.file_key
        is_index = ftype == int(FileSegmentType.INDEX)
        t, q = (None, None) if is_index else (topic, queue_id)
        file_offsets = (meta.base_offset, meta.base_offset + meta.size)
        facts: dict[str, Any] = {"type": FileSegmentType(ftype).name, "base_offset": meta.base_offset,
                                 "committed_size": meta.size, "backend_size": size}
        if size is None:
            if meta.size == 0:
                return None  # rolled, not committed yet: its first commit creates the object
            kind = FindingKind.INDEX_MISSING if is_index else FindingKind.MISSING_OBJECT
            return Finding(kind, path, f"the metadata lists this {_what(ftype)} ({meta.size} committed bytes); "
                           "the backend does not hold it", t, q, None, file_offsets, facts)
        committed = before.meta.size
        if size < committed:
            facts["committed_size"] = committed
            return Finding(FindingKind.LOST_BYTES, path,
                           f"the backend holds {size} of the {committed} bytes committed to this {_what(ftype)} "
                           f"({committed - size} bytes lost)", t, q, None,
                           (meta.base_offset + size, meta.base_offset + committed), facts)
        if size > meta.size and not is_index:
            return self.tail(seg, size, facts)
        if self.seal_known:
            sealed = self.driver.is_sealed(path) if sealed is None else sealed
            recorded = (meta if sealed else before.meta).status == SegmentStatus.SEALED
            if sealed != recorded:
                facts.update(backend_sealed=sealed, metadata_sealed=recorded)
                return Finding(FindingKind.SEALED_MISMATCH, path,
                               f"the backend object is {'sealed' if sealed else 'open'}, the metadata records it "
                               f"{'sealed' if recorded else 'open'}", t, q, None, None, facts)
        return None

    def tail(self, seg: Segment, size: int, facts: dict[str, Any]) -> Finding:
        meta, path = seg.meta, seg.path
        topic, queue_id, ftype = seg.file_key
        extra = size - meta.size
        data = _read(self.driver, path, meta.size, extra)
        check = self.read_back(ftype, topic, queue_id, meta.base_offset + meta.size, data)
        facts.update(tail_bytes=extra, **check.facts())
        span = (meta.base_offset + meta.size, meta.base_offset + size)
        where = "past the committed end" + ("" if seg.last else " of a segment the next one continues")
        if check.ok:
            return Finding(FindingKind.UNCOMMITTED_TAIL, path,
                           f"{extra} bytes {where} read back as {check.describe()}", topic, queue_id, None,
                           span, facts)
        return Finding(FindingKind.BAD_TAIL, path,
                       f"{extra} bytes {where} fail the read-back check ({check.reason})", topic, queue_id, None,
                       span, facts)

    def read_back(self, ftype: int, topic: str, queue_id: int, start: int, data: bytes) -> "ReadBack":
        if ftype == int(FileSegmentType.COMMIT_LOG):
            found = read_back_messages(data, start, topic, queue_id, self.prop_crc)
            if found.ok and found.records and self.witness is not None:
                # (as the store's open asks its local disk before it adopts a tail)
                why = self.witness(topic, queue_id, tail_messages(data, found.good_bytes))
                if why is not None:
                    return ReadBack(False, 0, 0, 0, why)
            return found
        if ftype == int(FileSegmentType.CONSUME_QUEUE):
            return read_back_units(data, self.commit_log_end.get((topic, queue_id)))
        problem = compacted_file_problem(data)
        return ReadBack(problem is None, 0, len(data), 0, problem)

    def unlisted(self, path: str, size: int, chained: dict[tuple[str, int, int], int]) -> Finding:
        """UNLISTED_OBJECT for ``path`` (``size`` bytes); ``chained``: file key -> end of
        the adoptable objects seen so far (an unlisted run of segments continues itself)."""
        facts: dict[str, Any] = {"size": size, "adoptable": False}
        nest = next((n for n in self.nested if path.startswith(n)), None)
        if nest is not None:
            facts.update(looks_like="another store's tier", nested_prefix=nest)
            return Finding(FindingKind.UNLISTED_OBJECT, path,
                           f"an object of {size} bytes of another store's tier inside this store's prefix (that "
                           f"store's owner record is under {nest + OWNER_DIR + '/'!r})", None, None, None, None,
                           facts, fix_text=NESTED_TIER_FIX, manual=True)
        try:
            info = parse_segment_path(path)
        except TieredStoreError:
            facts["looks_like"] = "not a segment path"
            return Finding(FindingKind.UNLISTED_OBJECT, path,
                           f"an object of {size} bytes that is not a segment path (nothing of a store writes it)",
                           None, None, None, None, facts)
        facts.update(looks_like="segment", cluster=info.cluster, broker=info.broker, topic=info.topic,
                     queue_id=info.queue_id, type=info.file_type.name, base_offset=info.base_offset)
        ours = info.cluster == self.cluster and info.broker == self.broker
        key = (info.topic, info.queue_id, int(info.file_type))
        is_index = info.file_type is FileSegmentType.INDEX
        end = chained.get(key, self.file_end.get(key))
        continues = is_index or (end is None and info.base_offset == 0) or end == info.base_offset
        # past a tail the segment before it holds beyond its committed end (repair adopts
        # that tail first when it reads back; a tail that does not is its own finding)
        after_tail = (not continues and key not in chained
                      and self.backend_end.get(key, -1) == info.base_offset != end)
        continues = continues or after_tail
        facts["continues_file"] = continues
        why = []
        if not ours:
            why.append(f"a segment of cluster {info.cluster!r} broker {info.broker!r}, not this store's")
        elif not continues:
            why.append("it does not continue its flat file " +
                       (f"(which ends at {end})" if end is not None else "(which has no segment)"))
        if ours and continues:
            check = self.read_back(int(info.file_type), info.topic, info.queue_id, info.base_offset,
                                   _read(self.driver, path, 0, size))
            facts.update(check.facts())
            if check.ok:
                facts["adoptable"] = True
                if not is_index:
                    chained[key] = info.base_offset + size
            else:
                why.append(f"it fails the read-back check ({check.reason})")
        whose = "key index" if info.topic == INDEX_TOPIC else f"{info.topic}/{info.queue_id}"
        detail = (f"a {info.file_type.name} segment of {whose} (base {info.base_offset}, {size} bytes) that the "
                  "metadata does not list: " + (("adoptable (it continues its file" +
                                                 (" after the uncommitted tail of the segment before it"
                                                  if after_tail else "") + " and reads back whole)")
                                                if facts["adoptable"] else "not adoptable: " + "; ".join(why)))
        return Finding(FindingKind.UNLISTED_OBJECT, path, detail,
                       None if is_index else info.topic, None if is_index else info.queue_id, None,
                       (info.base_offset, info.base_offset + size), facts)


def check_listing(driver: SegmentDriver, metadata: TieredMetadataStore, cluster: str, broker: str, *,
                  fresh_metadata: Callable[[], TieredMetadataStore],
                  prop_crc: PropCrcPolicy = PropCrcPolicy.IF_PRESENT,
                  progress: Callable[[int], None] | None = None,
                  witness: TailWitness | None = None) -> ListingCheck:
    """Compare ``metadata`` with one listing of the store's prefix (module doc). Each
    mismatch is checked again (:func:`_confirm`: fresh looks at the object, fresh reads of
    the metadata through ``fresh_metadata()``); only what still holds is reported. Reads
    only. Driver and metadata errors propagate."""
    expiring: set[str] = set()
    segments = metadata_segments(metadata, cluster, broker, expiring)
    result = ListingCheck(segments=segments)
    result.listing = dict(segment_objects(driver, cluster, broker))
    first = _Checker(driver, segments, cluster, broker, prop_crc, result.listing, witness)
    seals = _seal_flags(driver, [p for p in segments if result.listing.get(p) is not None])
    suspects: list[str] = []
    for path, seg in segments.items():
        finding = first.listed(seg, result.listing.get(path), seals.get(path))
        if finding is not None and finding.kind is not FindingKind.UNCOMMITTED_TAIL:
            suspects.append(path)
        elif finding is not None:
            result.findings.append(finding)
        if progress is not None:
            progress(1)
    # (an object whose record expiry marked DELETED is the store's: its expiry deletes it next)
    unlisted = sorted((p for p, size in result.listing.items() if size and p not in segments and p not in expiring),
                      key=_chain_order)
    suspects.extend(unlisted)
    result.findings.extend(_confirm(driver, suspects, segments, cluster, broker, prop_crc, fresh_metadata,
                                    result.listing, witness))
    result.findings.extend(stray_objects(driver, cluster, broker))
    result.findings.extend(leftover_parts(driver, cluster, broker, segments))
    return result


def stray_objects(driver: SegmentDriver, cluster: str, broker: str) -> list[Finding]:
    """STRAY_OBJECT for each object below the store's prefix that the driver's listing hides
    (:meth:`~tiered_core.spi.driver.SegmentDriver.foreign_objects`) and that is still there,
    of the same size, at every look of the :data:`SETTLE_S` rounds (a live store's seal or
    expiry removes its own leftovers within moments)."""
    prefix = tier_prefix(cluster, broker)
    found = _settled(lambda: {name: size for name, size in driver.foreign_objects(prefix)
                              if not is_reserved_path(name)})
    return [Finding(FindingKind.STRAY_OBJECT, name,
                    f"an object of {size} bytes that the {driver.name} driver's listing hides and that holds no "
                    f"byte of any segment (named like a piece of segment {_piece_of(name)!r}, it is not one of "
                    "its pieces: another writer's, past a gap, or without its base)", None, None, None, None,
                    {"size": size, "segment": _piece_of(name)})
            for name, size in sorted(found.items())]


def leftover_parts(driver: SegmentDriver, cluster: str, broker: str, segments: dict[str, Segment]) -> list[Finding]:
    """LEFTOVER_PARTS for each sealed segment of the metadata whose leftover pieces
    (:meth:`~tiered_core.spi.driver.SegmentDriver.leftover_objects`) are still there at every
    look of the :data:`SETTLE_S` rounds (a live store's seal removes them within moments).
    An unsealed segment's are left out: its next compaction removes them."""
    prefix = tier_prefix(cluster, broker)

    def sealed(path: str) -> bool:
        seg = segments.get(path)
        return seg is not None and seg.meta.status == SegmentStatus.SEALED

    found: dict[str, dict[str, int]] = defaultdict(dict)
    for (path, name), size in _settled(lambda: {(path, name): size for path, name, size
                                                in driver.leftover_objects(prefix) if sealed(path)}).items():
        found[path][name] = size
    out = []
    for path, parts in sorted(found.items()):
        total = sum(parts.values())
        out.append(Finding(FindingKind.LEFTOVER_PARTS, path,
                           f"{len(parts)} piece(s) of this sealed segment ({total} bytes) that an interrupted "
                           f"clean-up left: their bytes are in the segment, nothing reads them", None, None, None,
                           None, {"parts": sorted(parts), "bytes": total}))
    return out


def _settled(look: Callable[[], dict[Any, int]]) -> dict[Any, int]:
    """What ``look()`` finds (object -> size) at each of the :data:`SETTLE_S` rounds, of the
    same size every time: a live store's seal or expiry removes its own leftovers within moments."""
    found = look()
    for pause in SETTLE_S[1:]:
        if not found:
            break
        time.sleep(pause)
        again = look()
        found = {item: size for item, size in found.items() if again.get(item) == size}
    return found


def _piece_of(name: str) -> str:
    """The segment path an object named ``<segment>#...`` claims to belong to."""
    return name.split("#", 1)[0]


#: Seal lookups of the first pass in flight at once: one request each on an object store,
#: so a prefix of many segments is not checked one round trip after another.
SEAL_LOOKUPS_IN_FLIGHT = 16


def _seal_flags(driver: SegmentDriver, paths: list[str]) -> dict[str, bool]:
    """Whether each object of ``paths`` is sealed, asked :data:`SEAL_LOOKUPS_IN_FLIGHT` at a
    time (nothing when the driver has no seals). An object gone meanwhile is left out: the
    check asks again and meets what is there then."""
    if not driver.capabilities.seal or not paths:
        return {}

    def sealed(path: str) -> bool | None:
        try:
            return driver.is_sealed(path)
        except NotFound:
            return None

    with ThreadPoolExecutor(max_workers=min(SEAL_LOOKUPS_IN_FLIGHT, len(paths)),
                            thread_name_prefix="tiered-verify-seal") as pool:
        flags = dict(zip(paths, pool.map(sealed, paths)))
    return {path: flag for path, flag in flags.items() if flag is not None}


def _confirm(driver: SegmentDriver, suspects: list[str], segments: dict[str, Segment], cluster: str, broker: str,
             prop_crc: PropCrcPolicy, fresh_metadata: Callable[[], TieredMetadataStore],
             listing: dict[str, int], witness: TailWitness | None = None) -> list[Finding]:
    """The findings of ``suspects`` that still hold when looked at again: in each round a
    fresh look at each object, a pause (:data:`SETTLE_S`) for a running store to finish the
    step it was in, then a fresh read of the metadata; what a round clears is dropped, what
    every round confirms is reported (module doc)."""
    before = segments
    pending = sorted(set(suspects), key=_chain_order)
    found: list[Finding] = []
    for settle in SETTLE_S:
        if not pending:
            break
        looks = {path: _look(driver, path) for path in pending}
        if settle:
            time.sleep(settle)
        fresh = fresh_metadata()
        expiring: set[str] = set()
        try:
            after = metadata_segments(fresh, cluster, broker, expiring)
        finally:
            fresh.close()
        checker = _Checker(driver, after, cluster, broker, prop_crc, listing, witness)
        chained: dict[tuple[str, int, int], int] = {}
        found, still = [], []
        for path in pending:
            size, sealed = looks[path]
            seg, prev = after.get(path), before.get(path)
            if seg is None:
                # unlisted in both reads of the metadata (one listed it: expired meanwhile)
                finding = (checker.unlisted(path, size, chained)
                           if size and prev is None and path not in expiring else None)
            else:
                finding = checker.listed(seg, size, sealed, before=prev or seg)
            if finding is None:
                continue
            if finding.kind is FindingKind.UNCOMMITTED_TAIL:
                found.append(finding)  # (information only: a running store's next commit)
                continue
            found.append(finding)
            still.append(path)
        before, pending = after, still
    return found


def _look(driver: SegmentDriver, path: str) -> tuple[int | None, bool | None]:
    """``(size or None when absent, sealed)`` of the object at ``path`` now."""
    size = _current_size(driver, path)
    if size is None or not driver.capabilities.seal:
        return size, None
    try:
        return size, driver.is_sealed(path)
    except NotFound:
        return None, None


def _chain_order(path: str) -> tuple:
    """Unlisted segments of one file in base order (so a run of them chains)."""
    try:
        info = parse_segment_path(path)
        return (info.topic, info.queue_id, int(info.file_type), info.base_offset, path)
    except TieredStoreError:
        return ("~", 0, 0, 0, path)


def _current_size(driver: SegmentDriver, path: str) -> int | None:
    try:
        if not driver.exists(path):
            return None
        return driver.size(path)
    except NotFound:
        return None


def _read(driver: SegmentDriver, path: str, start: int, length: int) -> bytes:
    parts = []
    pos, end = start, start + length
    while pos < end:
        try:
            chunk = driver.read(path, pos, min(_READ_CHUNK, end - pos))
        except NotFound:
            break
        if not chunk:
            break
        parts.append(chunk)
        pos += len(chunk)
    return b"".join(parts)


def _what(ftype: int) -> str:
    return {int(FileSegmentType.COMMIT_LOG): "commit-log segment",
            int(FileSegmentType.CONSUME_QUEUE): "consume-queue segment"}.get(ftype, "key-index file")


# -- the read-back check --------------------------------------------------------------------


def listing_subjects(findings: Iterable[Finding]) -> dict[str, Finding]:
    """The listing's findings of lost bytes by object (to merge the walk's into them)."""
    return {f.subject: f for f in findings if f.kind in (FindingKind.LOST_BYTES, FindingKind.MISSING_OBJECT)}


__all__ = ["ListingCheck", "ReadBack", "Segment", "check_listing", "listing_subjects", "metadata_segments",
           "read_back_messages", "read_back_units", "tier_prefix"]
