"""FlatFileStore: every queue's FlatMessageFile, recovered from metadata at start."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Collection, Iterator

from tiered_core.errors import Fenced, TieredStoreError
from tiered_core.flat.settings import FlatFileConfig
from tiered_core.flat.damage import SegmentDamage
from tiered_core.flat.message_file import FlatMessageFile
from tiered_core.flat.ownership import segment_objects
from tiered_core.flat.read_back import TailWitness
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import TieredMetadataStore, now_ms

log = logging.getLogger(__name__)


class FlatFileStore:
    """Map (topic, queue id) -> :class:`FlatMessageFile` over one driver and metadata store.

    :meth:`load` rebuilds every queue the metadata knows, ``recover_concurrency`` at a
    time; a queue that fails to recover is reported in :attr:`failures` and ``load``
    returns False so the caller can decide. Such a queue is left out, unless only its
    writes are refused (its newest segment lost bytes, :attr:`FlatMessageFile.refused`):
    then it stays loaded, so the bytes before the damage still read.
    """

    def __init__(self, driver: SegmentDriver, metadata: TieredMetadataStore,
                 config: FlatFileConfig | None = None, executor: ThreadPoolExecutor | None = None,
                 witness: TailWitness | None = None) -> None:
        #: Asked before a commit-log tail past the metadata's end is adopted (None: not asked).
        self.witness = witness
        self.driver = driver
        self.metadata = metadata
        self.config = config or FlatFileConfig()
        self.executor = executor
        self._files: dict[tuple[str, int], FlatMessageFile] = {}
        self._lock = threading.RLock()
        self.failures: list[tuple[str, int, str]] = []

    def load(self) -> bool:
        """Recover every queue recorded in metadata. True when all recovered."""
        with self._lock:
            self._files.clear()
        self.failures = []
        queues = [(q.topic, q.queue_id) for t in self.metadata.iterate_topics()
                  for q in self.metadata.iterate_queues(t.topic)]
        with ThreadPoolExecutor(max_workers=max(1, self.config.recover_concurrency),
                                thread_name_prefix="tiered-recover") as pool:
            for (topic, queue_id), fut in [(q, pool.submit(self.compute_if_absent, *q)) for q in queues]:
                try:
                    refused = fut.result().refused
                except TieredStoreError as exc:
                    refused = exc
                if refused is not None:  # a refused queue stays loaded: its intact bytes still read
                    log.error("cannot recover %s/%d: %s", topic, queue_id, refused)
                    self.failures.append((topic, queue_id, str(refused)))
        return not self.failures

    def compute_if_absent(self, topic: str, queue_id: int) -> FlatMessageFile:
        key = (topic, queue_id)
        with self._lock:
            existing = self._files.get(key)
        if existing is not None:
            return existing
        # Built outside the store lock: recovery of one queue talks to the backend.
        created = FlatMessageFile(self.driver, self.metadata, topic, queue_id, self.config, self.executor,
                                  witness=self.witness)
        with self._lock:
            return self._files.setdefault(key, created)

    def get(self, topic: str, queue_id: int) -> FlatMessageFile | None:
        with self._lock:
            return self._files.get((topic, queue_id))

    def files(self) -> list[FlatMessageFile]:
        with self._lock:
            return list(self._files.values())

    def __iter__(self) -> Iterator[FlatMessageFile]:
        return iter(self.files())

    def check_damage(self) -> dict[tuple[str, int], list[SegmentDamage]]:
        """Damaged segments by queue: every segment the metadata records with committed bytes
        the backend does not hold (gone or shorter), from ONE listing of the store's prefix,
        plus those reads found. Reads only; queues without damage are left out."""
        files = self.files()
        recorded = [flat.committed_sizes() for flat in files]  # before the listing: sizes only grow
        listing = dict(segment_objects(self.driver, self.config.cluster, self.config.broker))
        out = {}
        for flat, sizes in zip(files, recorded):
            damage = flat.check_damage(listing, sizes)
            if damage:
                out[(flat.topic, flat.queue_id)] = damage
        return out

    def destroy_file(self, topic: str, queue_id: int) -> None:
        with self._lock:
            flat = self._files.pop((topic, queue_id), None)
        if flat is not None:
            flat.destroy()

    def delete_expired(self, now: int | None = None) -> None:
        """Destroy segments older than each topic's reserve time."""
        now = now_ms() if now is None else now
        for flat in self.files():
            try:
                flat.expire(now)
            except Fenced:
                raise
            except TieredStoreError as exc:
                log.warning("expiry of %s failed: %s", flat, exc)

    def forget_expired_missing(self, missing: Collection[str], now: int | None = None) -> int:
        """:meth:`FlatMessageFile.forget_expired_missing` on every queue; how many segments."""
        missing = frozenset(missing)
        return sum(flat.forget_expired_missing(missing, now) for flat in self.files()) if missing else 0

    def shutdown(self) -> None:
        for flat in self.files():
            flat.shutdown()

    def destroy(self) -> None:
        for flat in self.files():
            flat.destroy()
        with self._lock:
            self._files.clear()
