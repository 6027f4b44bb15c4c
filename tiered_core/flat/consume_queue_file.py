"""FlatConsumeQueueFile: a queue's tiered consume queue (20-byte units at queue_offset * 20)."""

from __future__ import annotations

import logging
from typing import Callable

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.flat.append_file import FlatAppendFile
from tiered_core.flat.batch_check import decode_units
from tiered_core.flat.read_back import read_back_units
from tiered_core.common import FileSegmentType

log = logging.getLogger(__name__)


class FlatConsumeQueueFile(FlatAppendFile):
    """Consume-queue units addressed by absolute byte offset ``queue_offset * 20``.

    At recovery, a last segment whose size is not a whole number of units (a unit torn
    by a crash mid-write) is sealed and a new segment is rolled at the start of the torn
    unit; reads pick the newest segment at an offset, so the torn bytes are never read.
    What a damaged segment still holds is read up to its last whole unit.
    """

    record_size = CQ_UNIT_SIZE

    def __init__(self, *args, commit_log_end: Callable[[], int] | None = None, **kwargs) -> None:
        #: The committed end of the queue's commit log (units past the committed end must
        #: point inside it to be adopted); None: not checked.
        self._commit_log_end = commit_log_end
        super().__init__(*args, file_type=FileSegmentType.CONSUME_QUEUE, **kwargs)
        self._realign()

    def _tail_fails_read_back(self, last, size: int) -> str | None:
        """Whole units (maybe a torn last one), each pointing forward (the first past the last
        committed unit's message) and inside the committed commit log."""
        before = min(CQ_UNIT_SIZE, last.commit_position) if last.commit_position % CQ_UNIT_SIZE == 0 else 0
        data = self.driver.read(last.path, last.commit_position - before, size - last.commit_position + before)
        end = self._commit_log_end() if self._commit_log_end is not None else None
        found = read_back_units(data[before:], end)
        if not found.ok:
            return found.reason
        if before and found.records:
            (prev_offset, prev_size, _), (offset, _, _) = decode_units(data[:2 * CQ_UNIT_SIZE])
            if offset < prev_offset + prev_size:
                return (f"its first unit points at commit-log offset {offset}, before the end of the last committed "
                        f"unit's message ({prev_offset + prev_size})")
        return None

    def _realign(self) -> None:
        if not self.segments:
            return
        last = self.segments[-1]
        torn = last.commit_position % CQ_UNIT_SIZE
        if not torn:
            return
        start = last.commit_offset - torn
        log.warning("%s: %d bytes of a torn consume-queue unit; rolling at %d", last.path, torn, start)
        if start == last.base_offset:
            # The segment holds nothing but the torn unit. It is this store's own
            # uncommitted tail (the metadata lists it), so it may go, and be rolled anew.
            self.segments.pop()
            self._destroy_segment(last)
            self.roll(start)
            return
        try:
            last.seal()
        except Exception as exc:  # the torn segment stays unsealed; it is never read past `start`
            log.warning("cannot seal %s: %s", last.path, exc)
        self.flush_metadata(last)
        self.roll(start)

    @property
    def min_queue_offset(self) -> int:
        return self.min_offset // CQ_UNIT_SIZE

    @property
    def commit_queue_offset(self) -> int:
        return self.commit_offset // CQ_UNIT_SIZE

    @property
    def append_queue_offset(self) -> int:
        return self.append_offset // CQ_UNIT_SIZE
