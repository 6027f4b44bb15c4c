"""Read-only access to another broker's tiered data through the shared backend.

A static topic's old generations live on brokers that may be closed, drained or gone
(their ``store_path`` deleted). Their messages stay in the shared tiered backend under
``{cluster}/{broker}/``; :class:`TieredBrokerReader` serves them without that broker:

* the driver is wrapped in :class:`ReadOnlyDriver`, which refuses every ``create``,
  ``write``, ``write_if_absent``, ``seal`` and ``delete`` before it reaches the backend
  (a :class:`~tiered_core.errors.StateConflict` naming the path and broker), so the reader
  never claims, writes, rolls or deletes anything under another broker's prefix;
* its metadata is rebuilt from the backend listing into a private SQLite store in a
  temporary directory (:func:`tiered_core.ops.rebuild.rebuild_metadata`), removed at
  :meth:`close`; nothing is written under any broker's ``store_path``;
* reads go through the access layer's :class:`~tiered_core.access.fetcher.MessageStoreFetcher`,
  with the same validation as the broker's own reads.

The view is a snapshot taken at open: a broker still writing would need :meth:`refresh`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading

from tiered_core.access.cache import ReadAheadCache
from tiered_core.access.fetcher import MessageFilter, MessageStoreFetcher
from tiered_core.access.key_query import tiered_key_hits
from tiered_core.access.results import GetMessageResult
from tiered_core.codec.message import MessageExt
from tiered_core.config import StoreConfig
from tiered_core.errors import TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.ownership import ReadOnlyDriver
from tiered_core.index.service import IndexStoreService
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.ops.rebuild import rebuild_metadata
from tiered_core.spi.driver import SegmentDriver

log = logging.getLogger(__name__)


class TieredBrokerReader:
    """Messages of broker ``broker``'s physical queues, read only from the tiered backend.

    ``config`` is any broker's config of the same cluster (driver, options, cluster, read
    settings are used; its ``store_path`` is not touched). Contract: never writes to the
    backend or to any local path; :meth:`get_message`, :meth:`min_offset` and
    :meth:`max_offset` answer from the snapshot of the segments listed at open.
    """

    def __init__(self, config: StoreConfig, broker: str) -> None:
        # the flat layer builds segment paths from the config's broker: it must be the read one
        self.config = config if config.broker == broker else config.replace(broker=broker)
        self.broker = broker
        self._lock = threading.Lock()
        self.driver = ReadOnlyDriver(self.config.open_driver(), f"read-only view of broker {broker!r} (another "
                                     "broker's prefix is never written)", broker=broker)
        self.metadata: SqliteMetadataStore | None = None
        self.index: IndexStoreService | None = None
        self.cache: ReadAheadCache | None = None
        self._tmp = tempfile.mkdtemp(prefix=f"tiered-ro-{broker}-")
        self._generation = 0
        try:
            self.refresh()
        except BaseException:
            self.close()
            raise

    def refresh(self) -> None:
        """Re-list the broker's segments and rebuild the in-memory view."""
        with self._lock:
            old = self.metadata
            self._generation += 1
            metadata = SqliteMetadataStore(os.path.join(self._tmp, f"view-{self._generation}.db"))
            rebuild_metadata(self.driver, metadata, cluster=self.config.cluster, broker=self.broker)
            flat_files = FlatFileStore(self.driver, metadata, self.config.flat_config())
            if not flat_files.load():
                log.warning("read-only view of %s: %d queue(s) not recoverable: %s", self.broker,
                            len(flat_files.failures), flat_files.failures)
            self.metadata, self.flat_files = metadata, flat_files
            if self.cache is not None:
                self.cache.close()
            # the same read-ahead cache a broker's own store has (read_ahead_cache_bytes = 0: none)
            self.cache = (ReadAheadCache(self.config.read_ahead_cache_bytes, self.config.read_ahead_cache_expire_ms)
                          if self.config.read_ahead_cache_bytes > 0 else None)
            self.fetcher = MessageStoreFetcher(flat_files, self.cache, verify_prop_crc=self.config.verify_prop_crc)
            old_index, self.index = self.index, None
            if old_index is not None:
                old_index.shutdown()
            try:  # uploaded (sealed) index files only; its local directory is private and empty
                local = os.path.join(self._tmp, f"index-{self._generation}")
                self.index = IndexStoreService.from_store_config(self.config.replace(store_path=local), self.driver,
                                                                 metadata)
            except TieredStoreError as exc:
                log.warning("read-only view of %s: key index unavailable (%s)", self.broker, exc)
            if old is not None:
                old.close()

    def get_message(self, topic: str, queue_id: int, offset: int, max_count: int,
                    message_filter: MessageFilter | None = None) -> GetMessageResult:
        """Like :meth:`MessageStoreFetcher.get_message` (physical offsets)."""
        return self.fetcher.get_message(topic, queue_id, offset, max_count, message_filter)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first tiered offset of the physical queue (0 when the queue is unknown)."""
        flat = self.flat_files.get(topic, queue_id)
        return flat.consume_queue_min_offset() if flat is not None and flat.initialized else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The offset just past the last tiered message of the physical queue (0 when unknown)."""
        flat = self.flat_files.get(topic, queue_id)
        return flat.consume_queue_commit_offset() if flat is not None and flat.initialized else 0

    def query_message(self, topic: str, key: str, max_count: int, begin: int, end: int) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` stored in ``[begin, end]``, found through the broker's
        uploaded key index; each hit is validated and must be the copy its consume-queue unit
        points at (as :meth:`TieredMessageStore.query_message` checks tiered hits)."""
        if self.index is None or self.metadata is None:
            return []
        return tiered_key_hits(self.index, self.metadata, self.flat_files, self.fetcher.prop_crc,
                               topic, key, max_count, begin, end)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
        if self.index is not None:
            self.index.shutdown()
        if self.metadata is not None:
            self.metadata.close()
        self.driver.close()
        shutil.rmtree(self._tmp, ignore_errors=True)
