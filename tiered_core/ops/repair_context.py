"""The shared vocabulary of ``tiered repair``'s decisions: the actions, a
:class:`Decision` (what to do about one finding, or why not) and the
:class:`RepairContext` (the backend and metadata decided against, live or read-only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.naming import parse_segment_path, queue_path
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.errors import IllegalParam
from tiered_core.flat.read_back import TailWitness
from tiered_core.flat.segment_ref import SegmentRef
from tiered_core.ops.quarantine import Quarantine
from tiered_core.ops.reconcile import backend_path
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore

# The actions, as the plan and the report name them.
ADOPT = "adopt"  # record an unlisted segment in the metadata
ADOPT_TAIL = "adopt_tail"  # raise a segment's committed size to the backend's
QUARANTINE = "quarantine"  # move the object into the quarantine (removed from the prefix)
REWRITE = "rewrite"  # quarantine a copy, rewrite the object with its committed bytes
SEAL_OBJECT = "seal_object"  # seal the backend object (the metadata records it sealed)
REMOVE_LEFTOVERS = "remove_leftovers"  # seal a sealed segment again: its clean-up removes its leftover pieces
RECORD_SEALED = "record_sealed"  # record the segment sealed (the backend object is)
RECORD_TIMES = "record_times"  # record the segment's times read from its messages
REINDEX = "reindex"  # quarantine / drop an index file, index its messages' keys again
CLAIM = "claim"  # write this store's owner record
RECORD_QUEUE = "record_queue"  # record a lost queue row from the queue's consume-queue segments

_TYPES = {FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE}


@dataclass
class Decision:
    """What to do about one finding now: ``action`` and ``detail`` (in words), with the
    data :func:`~tiered_core.ops.repair_actions.act` needs; or ``skip``: why nothing may be done -- a manual step, or
    (``nothing_to_do``) nothing is wrong any more."""

    action: str | None
    detail: str
    data: dict[str, Any] = field(default_factory=dict)
    skip: str | None = None
    nothing_to_do: bool = False

    @classmethod
    def refuse(cls, why: str) -> "Decision":
        """Repair must not act: ``why`` is the manual step."""
        return cls(None, why, skip=why)

    @classmethod
    def moot(cls, why: str) -> "Decision":
        """Nothing to do any more (the live state no longer shows the finding)."""
        return cls(None, why, skip=why, nothing_to_do=True)


@dataclass
class RepairContext:
    """The backend and metadata repair decides against (read-only ones for the plan, the
    writer session's for ``--apply``). ``extra`` / ``sizes``: adoptions the dry run
    assumes done (so the next segment of a chain is judged after the previous one);
    ``quarantine``: this run's quarantine (``--apply`` only)."""

    config: Any
    driver: SegmentDriver
    metadata: TieredMetadataStore
    prefix: str
    prop_crc: PropCrcPolicy = PropCrcPolicy.IF_PRESENT
    quarantine: Quarantine | None = None
    extra: dict[tuple[str, int, FileSegmentType], list[FileSegmentMetadata]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    #: The local disk as witness of a commit-log tail about to be adopted (None: no local store).
    witness: TailWitness | None = None

    @property
    def cluster(self) -> str:
        return self.config.cluster

    @property
    def broker(self) -> str:
        return self.config.broker

    def records(self, topic: str, queue_id: int, file_type: FileSegmentType) -> list[FileSegmentMetadata]:
        """The file's live segment records by base offset (with the dry run's assumed adoptions)."""
        metas = [m for m in self.metadata.iterate_file_segments(int(file_type), queue_path(self.broker, topic,
                                                                                           queue_id))
                 if m.status != SegmentStatus.DELETED]
        metas += self.extra.get((topic, queue_id, file_type), [])
        out = []
        for m in sorted(metas, key=lambda m: m.base_offset):
            size = self.sizes.get(backend_path(self.cluster, m))
            out.append(m if size is None else FileSegmentMetadata(m.path, m.type, m.base_offset, size, m.status,
                                                                  m.create_timestamp, m.begin_timestamp,
                                                                  m.end_timestamp, m.seal_timestamp))
        return out

    def refs(self, metas: list[FileSegmentMetadata]) -> tuple[SegmentRef, ...]:
        return tuple(SegmentRef(backend_path(self.cluster, m), m.base_offset, m.size) for m in metas)


def segment_of(ctx: RepairContext, path: str) -> tuple[str, int, FileSegmentType, int] | None:
    """``(topic, queue, type, base)`` when ``path`` is a commit-log or consume-queue segment
    path of this store's cluster and broker; None otherwise."""
    try:
        info = parse_segment_path(path)
    except IllegalParam:
        return None
    if info.cluster != ctx.cluster or info.broker != ctx.broker or info.file_type not in _TYPES:
        return None
    return info.topic, info.queue_id, info.file_type, info.base_offset


def record_of(ctx: RepairContext, path: str) -> FileSegmentMetadata | None:
    seg = segment_of(ctx, path)
    if seg is None:
        return None
    topic, queue_id, file_type, base = seg
    return next((m for m in ctx.records(topic, queue_id, file_type) if m.base_offset == base), None)



__all__ = [
    "ADOPT", "ADOPT_TAIL", "CLAIM", "QUARANTINE", "RECORD_QUEUE", "RECORD_SEALED", "RECORD_TIMES", "REINDEX",
    "REMOVE_LEFTOVERS", "REWRITE",
    "SEAL_OBJECT", "Decision", "RepairContext", "record_of", "segment_of",
]
