"""The per-queue walk of ``tiered verify``: one queue's segments, from references alone.

Everything here works from :class:`QueueWork` (plain picklable data: segment references,
the metadata's times and committed ends) and a driver, so the same walk runs in the CLI
process and, split into ranges of queue offsets, in Spark executors
(``tiered spark verify``). Reads go through the store's one segment reader
(:class:`~tiered_core.flat.segment_reader.SegmentReader`); nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.flat.segment_ref import SegmentRef
from tiered_core.ops.findings import Finding, VerifyStats
from tiered_core.spi.driver import SegmentDriver


@dataclass(frozen=True)
class QueueWork:
    """What the walk of one queue needs, from the metadata (picklable).

    ``consume_queue`` / ``commit_log``: the segments the metadata lists (ordered by base
    offset, sizes as committed); ``times``: backend path -> (begin, end) store times the
    metadata records for each commit-log segment; ``min_offset`` / ``max_offset``: the
    queue offsets ``[min, max)`` its committed consume queue holds."""

    topic: str
    queue_id: int
    consume_queue: tuple[SegmentRef, ...]
    commit_log: tuple[SegmentRef, ...]
    min_offset: int
    max_offset: int
    times: dict[str, tuple[int, int]] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class RangeResult:
    """What the walk of queue offsets ``[start, end)`` of one queue found, and its counters;
    ``times``: commit-log segment path -> (first, last) store time of the messages read in
    it (merged over ranges to check the metadata's segment times)."""

    topic: str
    queue_id: int
    start: int
    end: int
    findings: list[Finding] = field(default_factory=list)
    stats: VerifyStats = field(default_factory=VerifyStats)
    times: dict[str, tuple[int, int]] = field(default_factory=dict)


def plan_ranges(work: QueueWork, units_per_range: int) -> list[tuple[int, int]]:
    """Split ``[work.min_offset, work.max_offset)`` into ranges of at most
    ``units_per_range`` queue offsets (a Spark task each)."""
    raise NotImplementedError


def verify_range(driver: SegmentDriver, work: QueueWork, start: int, end: int, *, deep: bool,
                 prop_crc: PropCrcPolicy = PropCrcPolicy.IF_PRESENT) -> RangeResult:
    """Walk queue offsets ``[start, end)`` of ``work``'s queue: every unit inside the commit
    log; with ``deep``, every message through the read checks (and its ``__CRC32#``
    property per ``prop_crc``), its store time gathered for the segment-time check. A bad
    message is one finding; the walk goes on after it. Never raises for the data it walks
    (what is wrong is a finding); driver errors other than a missing object propagate."""
    raise NotImplementedError


def time_findings(work: QueueWork, results: list[RangeResult]) -> list[Finding]:
    """Findings of commit-log segments whose metadata times disagree with the first/last
    store time of the messages read in them (the merged ``times`` of every range)."""
    raise NotImplementedError


__all__ = ["QueueWork", "RangeResult", "plan_ranges", "time_findings", "verify_range"]
