"""Read-ahead cache of tiered messages, keyed ``topic@queue@offset``.

A memory tier bounded in bytes with expire-after-access, and an optional disk tier on
``diskcache`` that takes what the memory tier evicts. When the memory tier is above
80 % of its budget the fetcher bypasses read-ahead (reads only what was asked), so a
burst of cold reads cannot thrash the cache.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

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


class ReadAheadCache:
    """Bytes-bounded LRU with expire-after-access; values are ``(bytes, tags_code)``.

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
        self._items: OrderedDict[str, tuple[bytes, int, float]] = OrderedDict()
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
        spill: list[tuple[str, bytes, int]] = []
        with self._lock:
            if key in self._items:
                self._drop(key)
            self._items[key] = (data, tags_code, time.monotonic())
            self._bytes += size
            while self._bytes > self.max_bytes:
                old_key, (old, old_tags, _) = self._items.popitem(last=False)
                self._bytes -= len(old)
                self.stats.evictions += 1
                spill.append((old_key, old, old_tags))
        if self._disk is not None:
            for k, d, t in spill:
                self._disk.set(k, (d, t), expire=self.expire_s)

    def _drop(self, key: str) -> None:
        data, _, _ = self._items.pop(key)
        self._bytes -= len(data)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
        if self._disk is not None:
            self._disk.clear()

    def close(self) -> None:
        if self._disk is not None:
            self._disk.close()
