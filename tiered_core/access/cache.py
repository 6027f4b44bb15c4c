"""Read-ahead cache of tiered messages: one entry per read-ahead batch of a queue.

The fetcher caches each validated :class:`~tiered_core.codec.message_batch.MessageBatch`
whole (its commit-log bytes and the units of its messages), keyed by queue and first
queue offset; a lookup finds the batch holding an offset (a bisect over the queue's
cached batches). Per-message entries (``get``/``put`` by a string key such as
:func:`cache_key`) share the same budget.

A memory tier bounded in bytes with expire-after-access, and an optional disk tier on
``diskcache`` that takes what the memory tier evicts. When the memory tier is above
80 % of its budget the fetcher bypasses read-ahead (reads only what was asked), so a
burst of cold reads cannot thrash the cache.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tiered_core.codec.message_batch import MessageBatch
from tiered_core.errors import ConfigError
from tiered_core.configdef import KEYS

BUSY_RATIO = 0.8


def cache_key(topic: str, queue_id: int, queue_offset: int) -> str:
    return f"{topic}@{queue_id}@{queue_offset}"


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    disk_hits: int = 0
    evictions: int = 0
    expirations: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


def _nbytes(value) -> int:
    return value.nbytes if type(value) is MessageBatch else len(value)


class ReadAheadCache:
    """Bytes-bounded LRU with expire-after-access: whole batches (:meth:`put_batch`,
    :meth:`get_batch`) and per-message values ``(bytes, tags_code)`` (:meth:`put`, :meth:`get`).

    Thread-safe. ``max_bytes`` must be > 0; ``disk_path`` enables the disk tier
    (``disk_max_bytes`` bounds it).
    """

    def __init__(self, max_bytes: int, expire_after_access_ms: int = KEYS.read_ahead_cache_expire_ms.default, *,
                 disk_path: str | None = None, disk_max_bytes: int = 1 << 30) -> None:
        if max_bytes <= 0:
            raise ConfigError(f"read-ahead cache budget must be > 0 bytes, got {max_bytes}",
                              key="read_ahead_cache_bytes")
        self.max_bytes = max_bytes
        self.expire_s = expire_after_access_ms / 1000.0
        # key -> (value, tags code, last access); a batch's key is (topic, queue_id, first offset)
        self._items: OrderedDict[Any, tuple[Any, int, float]] = OrderedDict()
        self._starts: dict[tuple[str, int], list[int]] = {}  # cached batches' first offsets, per queue
        self._disk_starts: dict[tuple[str, int], list[int]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = CacheStats()
        self._disk: Any = None
        if disk_path:
            try:
                import diskcache
            except ImportError as exc:  # pragma: no cover - diskcache is a dependency
                raise ConfigError("read_ahead_disk_cache_path needs the diskcache package",
                                  key="read_ahead_disk_cache_path") from exc
            self._disk = diskcache.Cache(disk_path, size_limit=disk_max_bytes, eviction_policy="least-recently-used")

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def busy(self) -> bool:
        """True when the memory tier is above 80 % of its budget."""
        return self._bytes > self.max_bytes * BUSY_RATIO

    def get(self, key: str) -> tuple[bytes, int] | None:
        now = time.monotonic()
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                data, tags, accessed = item
                if now - accessed <= self.expire_s:
                    self._items[key] = (data, tags, now)
                    self._items.move_to_end(key)
                    self.stats.hits += 1
                    return data, tags
                self._drop(key)
                self.stats.expirations += 1
        if self._disk is not None:
            value = self._disk.get(key)
            if value is not None:
                with self._lock:
                    self.stats.hits += 1
                    self.stats.disk_hits += 1
                self.put(key, value[0], value[1])
                return value
        with self._lock:
            self.stats.misses += 1
        return None

    def put(self, key: str, data: bytes, tags_code: int = 0) -> None:
        size = len(data)
        if size > self.max_bytes:
            return  # larger than the whole budget: never cached
        with self._lock:
            if key in self._items:
                self._drop(key)
            self._items[key] = (data, tags_code, time.monotonic())
            self._bytes += size
            spill = self._evict()
        self._spill(spill)

    def _drop(self, key) -> None:
        data, _, _ = self._items.pop(key)
        self._bytes -= _nbytes(data)
        if type(key) is tuple:
            self._unindex(key)

    def _unindex(self, key: tuple) -> None:
        starts = self._starts.get(key[:2])
        if starts is not None:
            i = bisect.bisect_left(starts, key[2])
            if i < len(starts) and starts[i] == key[2]:
                del starts[i]
            if not starts:
                del self._starts[key[:2]]

    # -- whole batches ---------------------------------------------------------------------

    def get_batch(self, topic: str, queue_id: int, queue_offset: int) -> MessageBatch | None:
        """The cached batch of ``topic``/``queue_id`` that holds ``queue_offset`` (a hit
        refreshes it), or None (a miss)."""
        now = time.monotonic()
        queue = (topic, queue_id)
        with self._lock:
            starts = self._starts.get(queue)
            if starts:
                i = bisect.bisect_right(starts, queue_offset) - 1
                # The batch starting last at or before the offset, or (batches may overlap: one
                # read at an offset a shorter batch before it did not reach) the one before it.
                for key in [(topic, queue_id, starts[j]) for j in (i, i - 1) if j >= 0]:
                    batch, _, accessed = self._items[key]
                    if queue_offset < batch.end_offset:
                        if now - accessed <= self.expire_s:
                            self._items[key] = (batch, 0, now)
                            self._items.move_to_end(key)
                            self.stats.hits += 1
                            return batch
                        self._drop(key)
                        self.stats.expirations += 1
                        break
            disk = self._disk_starts.get(queue) if self._disk is not None else None
            start = None
            if disk:
                i = bisect.bisect_right(disk, queue_offset) - 1
                if i >= 0:
                    start = disk[i]
        if start is not None:
            batch = self._disk.get((topic, queue_id, start))
            if batch is not None and queue_offset < batch.end_offset:
                with self._lock:
                    self.stats.hits += 1
                    self.stats.disk_hits += 1
                self.put_batch(batch)
                return batch
            if batch is None:  # expired from the disk tier
                with self._lock:
                    self._unindex_disk((topic, queue_id, start))
        with self._lock:
            self.stats.misses += 1
        return None

    def put_batch(self, batch: MessageBatch) -> None:
        """Cache ``batch`` (not when empty or larger than the whole budget), replacing a
        cached batch of the same queue that starts at the same offset."""
        if not len(batch) or batch.nbytes > self.max_bytes:
            return
        key = (batch.topic, batch.queue_id, batch.queue_offset)
        spill = []
        with self._lock:
            if key in self._items:
                self._drop(key)
            self._items[key] = (batch, 0, time.monotonic())
            bisect.insort(self._starts.setdefault(key[:2], []), key[2])
            self._bytes += batch.nbytes
            spill = self._evict()
        self._spill(spill)

    def _unindex_disk(self, key: tuple) -> None:
        starts = self._disk_starts.get(key[:2])
        if starts is not None and key[2] in starts:
            starts.remove(key[2])
            if not starts:
                del self._disk_starts[key[:2]]

    def _evict(self) -> list:
        spill = []
        while self._bytes > self.max_bytes:
            old_key, (old, old_tags, _) = self._items.popitem(last=False)
            self._bytes -= _nbytes(old)
            self.stats.evictions += 1
            if type(old_key) is tuple:
                self._unindex(old_key)
            spill.append((old_key, old, old_tags))
        return spill

    def _spill(self, spill: list) -> None:
        if self._disk is None:
            return
        for k, d, t in spill:
            if type(k) is tuple:
                self._disk.set(k, d, expire=self.expire_s)
                with self._lock:
                    starts = self._disk_starts.setdefault(k[:2], [])
                    if k[2] not in starts:
                        bisect.insort(starts, k[2])
            else:
                self._disk.set(k, (d, t), expire=self.expire_s)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._starts.clear()
            self._disk_starts.clear()
            self._bytes = 0
        if self._disk is not None:
            self._disk.clear()

    def close(self) -> None:
        if self._disk is not None:
            self._disk.close()
