"""Shared vocabulary of every layer: enums stored in metadata or returned by the API,
Java's integer bounds, and two small helpers.

This module imports nothing of tiered_core, so every layer (codec, spi, container,
access) may import it; see the import-linter contract in pyproject.toml.
"""

from __future__ import annotations

import enum
import os
import time
from typing import Callable

#: Java ``int`` and ``long`` bounds: RocketMQ's formats store these types.
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
#: Java ``Long.MAX_VALUE``: the begin/end timestamp of a segment that holds no message yet.
NO_TIMESTAMP = LONG_MAX


class FileSegmentType(enum.IntEnum):
    """RocketMQ's FileSegmentType values (stored in metadata and in segment paths)."""

    COMMIT_LOG = 0
    CONSUME_QUEUE = 1
    INDEX = 2


class SegmentStatus(enum.IntEnum):
    """``FileSegmentMetadata`` status codes (RocketMQ ``STATUS_*``)."""

    NEW = 0
    SEALED = 1
    DELETED = 2


class AppendResult(enum.Enum):
    """Outcome of an append to a segment or flat file (RocketMQ's AppendResult)."""

    SUCCESS = "SUCCESS"
    BUFFER_FULL = "BUFFER_FULL"  # too many buffers waiting: commit first
    FILE_FULL = "FILE_FULL"  # the bytes would pass max_size: roll a new segment
    FILE_CLOSED = "FILE_CLOSED"
    SEGMENT_SEALED = "SEGMENT_SEALED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class BoundaryType(enum.Enum):
    """Which offset a time lookup returns when several messages share the time.

    LOWER: the first message stored at or after the time. UPPER: like LOWER, but when
    messages were stored exactly at the time, the last of them.
    """

    LOWER = "LOWER"
    UPPER = "UPPER"


def now_ms() -> int:
    """Milliseconds since the epoch (Java ``System.currentTimeMillis``)."""
    return time.time_ns() // 1_000_000


def fsync_dir(path: str) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)




def unlink_if_exists(path: str) -> bool:
    """Delete the file ``path``; False when it was already gone (other OSErrors propagate)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def offset_by_time(lo: int, hi: int, timestamp: int, boundary: BoundaryType,
                   store_time: Callable[[int], int]) -> int:
    """The one time -> offset search (local and tiered queues): a bisect over the store
    times of offsets ``lo..hi`` (inclusive; times never decrease), given ``store_time(offset)``.

    The first offset stored at or after ``timestamp`` (LOWER), or the last one stored
    exactly at it when there is one (UPPER); ``hi + 1`` when every message is older, ``lo``
    when every one is newer or there is none (``hi < lo``). RocketMQ's example, times
    40,50,50,50,60,60,70 at offsets 10..16: 35->10, 45->11, 50 LOWER->11, 50 UPPER->13,
    60 LOWER->14, 75->17. ``store_time`` is called O(log n) times.
    """
    if hi < lo:
        return lo
    if store_time(hi) < timestamp:
        return hi + 1
    if store_time(lo) > timestamp:
        return lo
    a, b = lo, hi  # the first offset with time >= timestamp (hi's is)
    while a < b:
        mid = (a + b) // 2
        if store_time(mid) >= timestamp:
            b = mid
        else:
            a = mid + 1
    first = a
    if boundary is BoundaryType.UPPER and store_time(first) == timestamp:
        a, b = first, hi  # the last offset with time <= timestamp
        while a < b:
            mid = (a + b + 1) // 2
            if store_time(mid) <= timestamp:
                a = mid
            else:
                b = mid - 1
        return a
    return first


__all__ = [
    "INT_MIN", "INT_MAX", "LONG_MIN", "LONG_MAX", "NO_TIMESTAMP",
    "FileSegmentType", "SegmentStatus", "AppendResult", "BoundaryType",
    "now_ms", "fsync_dir", "offset_by_time",
]
