"""Segment references: what a reader needs to know of a queue's segments without the
metadata database (backend path, base offset, size), and the log they stitch into.

:class:`SegmentRef` is plain picklable data (a Spark driver plans with it, its executors
read with it). :class:`RefLog` reads one queue's commit log or consume queue through a
driver from such references alone; :class:`SegmentedLog` is what
:class:`~tiered_core.flat.segment_reader.SegmentReader` needs of a log, which
:class:`RefLog` and the store's own :class:`~tiered_core.flat.append_file.FlatAppendFile`
(the same segments, plus its damage accounting) both provide.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Protocol, Sequence

from tiered_core.errors import IllegalParam
from tiered_core.spi.driver import SegmentDriver


@dataclass(frozen=True)
class SegmentRef:
    """One segment object: backend ``path``, ``base_offset`` in its flat file, ``size`` from metadata."""

    path: str
    base_offset: int
    size: int


class SegmentedLog(Protocol):
    """A flat file (commit log or consume queue) read by absolute offset across its segments."""

    def read(self, offset: int, length: int) -> bytes:
        """Bytes from ``offset``, across segment boundaries; fewer than ``length`` when the
        readable bytes end earlier."""

    def segment_bases(self) -> list[int]:
        """The segments' base offsets, ascending."""

    def segment_path(self, offset: int) -> str:
        """The backend path of the segment holding ``offset`` (for error messages)."""


class RefLog:
    """A queue's commit log or consume queue read through ``driver`` from ``segments`` alone
    (ordered by base offset). Each segment serves bytes from its base up to the next one's
    base (a segment rolled at a torn tail's start wins over that tail); the last one serves
    what its backend object holds (units committed after the last metadata update count, as
    in recovery). Reads never write; a read past an object's end returns fewer bytes."""

    def __init__(self, driver: SegmentDriver, segments: Sequence[SegmentRef]) -> None:
        self.driver = driver
        self.segments = tuple(segments)
        self.bases = [s.base_offset for s in self.segments]

    def segment_bases(self) -> list[int]:
        return self.bases

    @property
    def min_offset(self) -> int:
        """The first segment's base (0 when there is none)."""
        return self.bases[0] if self.bases else 0

    def segment_index(self, offset: int) -> int:
        """Index of the segment holding ``offset`` (-1 below the first)."""
        return bisect.bisect_right(self.bases, offset) - 1

    def segment_path(self, offset: int) -> str:
        i = max(0, self.segment_index(offset))
        return self.segments[i].path if self.segments else ""

    def backend_end(self) -> int:
        """Where the last segment's backend object ends (absolute offset; 0 without segments)."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return last.base_offset + self.driver.size(last.path)

    def read_segment(self, index: int, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` of segment ``index``, or fewer when its object ends before ``end``."""
        seg = self.segments[index]
        try:
            data = self.driver.read(seg.path, start - seg.base_offset, end - start)
        except IllegalParam:  # the validating layer: the range passes the object's size
            data = b""
        if len(data) != end - start:
            available = min(end, seg.base_offset + self.driver.size(seg.path)) - start
            data = self.driver.read(seg.path, start - seg.base_offset, available) if available > 0 else b""
        return data

    def read(self, offset: int, length: int) -> bytes:
        index = self.segment_index(offset)
        if index < 0 or length <= 0:
            return b""
        end = offset + length
        pieces: list[bytes] = []
        pos = offset
        while pos < end and index < len(self.segments):
            stop = end if index + 1 == len(self.segments) else min(end, self.bases[index + 1])
            if pos < stop:
                piece = self.read_segment(index, pos, stop)
                pieces.append(piece)
                pos += len(piece)
                if pos < stop:
                    break  # the object ends early: the readable bytes end here
            index += 1
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


__all__ = ["RefLog", "SegmentRef", "SegmentedLog"]
