"""MessageBatch: validated messages of one queue, read in one go (the result of
:func:`tiered_core.flat.batch_check.read_batch` and ``CompositeAccess.read_batch``).

One commit-log span and the units of its messages; each message is sliced out and
decoded lazily when asked for, so a cached read-ahead batch costs one entry.
"""

from __future__ import annotations

from typing import Iterator

from tiered_core.codec._impl import batch_items, lazy_message_ext
from tiered_core.codec.consume_queue import CQ_UNIT
from tiered_core.codec.message import MessageExt
from tiered_core.errors import CorruptData


class MessageBatch:
    """Validated messages ``queue_offset .. queue_offset + len(batch) - 1`` of one queue.

    ``data`` holds the commit log from offset ``base``; ``units[i]`` is message ``i``'s
    ``(commitlog_offset, size, tags_code)``: its bytes are ``data[units[i][0] - base:][:size]``.
    ``error``: why the unit right after the last one is not served (None when all read
    units passed). Immutable once built; safe to share between threads and to cache.
    """

    __slots__ = ("topic", "queue_id", "queue_offset", "data", "base", "_units", "_cq", "error")

    def __init__(self, topic: str, queue_id: int, queue_offset: int, data: bytes, base: int,
                 units: list[tuple[int, int, int]] | None, error: CorruptData | None = None, *,
                 cq: bytes | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.data = data
        self.base = base
        if units is None and cq is None:
            raise TypeError("MessageBatch needs its units or their consume-queue bytes (cq)")
        self._units = units
        #: The units' consume-queue bytes, when they were checked from them (``units`` decodes
        #: them on first use: a reader that only counts never builds a tuple per message).
        self._cq = cq
        self.error = error

    @property
    def units(self) -> list[tuple[int, int, int]]:
        units = self._units
        if units is None:  # (a race decodes twice, to equal lists)
            units = self._units = list(CQ_UNIT.iter_unpack(self._cq))
        return units

    def cq_bytes(self, start: int | None = None, stop: int | None = None) -> bytes | None:
        """The stored consume-queue bytes of ``units[start:stop]`` (the bounds as a list slice
        takes them, negative ones too), or None when the batch was built from a list of units."""
        if self._cq is None:
            return None
        size = CQ_UNIT.size
        n = len(self._cq) // size
        start, stop, _step = slice(start, stop).indices(n)
        if start == 0 and stop == n:
            return self._cq
        return self._cq[start * size:max(start, stop) * size]

    def unit(self, i: int) -> tuple[int, int, int]:
        """``units[i]`` (negative ``i`` counts from the end), without decoding the others."""
        if self._units is not None:
            return self._units[i]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"unit {i} of a batch of {n}")
        return CQ_UNIT.unpack_from(self._cq, (i % n) * CQ_UNIT.size)

    def __len__(self) -> int:
        return len(self._units) if self._units is not None else len(self._cq) // CQ_UNIT.size

    def __repr__(self) -> str:
        return (f"MessageBatch({self.topic!r}, {self.queue_id}, {self.queue_offset}..{self.end_offset}, "
                f"{len(self.data)} bytes{', error=' + self.error.reason if self.error else ''})")

    def __reduce__(self):  # the error stays behind: only valid batches are cached (or spilled to disk)
        return (MessageBatch, (self.topic, self.queue_id, self.queue_offset, self.data, self.base, self.units))

    @property
    def end_offset(self) -> int:
        """The queue offset after the last message."""
        return self.queue_offset + len(self)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    @property
    def positions(self) -> list[int]:
        """Where each message starts in ``data``."""
        base = self.base
        return [u[0] - base for u in self.units]

    def raw(self, i: int) -> bytes:
        """Message ``i``'s bytes (a copy)."""
        off, size, _tags = self.units[i]
        pos = off - self.base
        return self.data[pos:pos + size]

    def message(self, i: int) -> MessageExt:
        """Message ``i``, decoded lazily (its fields on first access)."""
        return lazy_message_ext(self.raw(i), self.topic)

    def messages(self, start: int = 0, stop: int | None = None) -> list[MessageExt]:
        data, base, topic = self.data, self.base, self.topic
        return [lazy_message_ext(data[off - base:off - base + size], topic) for off, size, _ in self.units[start:stop]]

    def items(self) -> list[tuple[int, bytes, int]]:
        """``list(batch)`` in one call: ``(queue_offset, bytes, tags_code)`` of each message."""
        return batch_items(self.units, self.data, self.base, self.queue_offset)

    def __iter__(self) -> Iterator[tuple[int, bytes, int]]:
        """``(queue_offset, bytes, tags_code)`` of each message."""
        data, base = self.data, self.base
        for i, (off, size, tags) in enumerate(self.units, self.queue_offset):
            yield i, data[off - base:off - base + size], tags


__all__ = ["MessageBatch"]
