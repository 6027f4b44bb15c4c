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
* reads go through the access layer's tier read view
  (:class:`~tiered_core.access.view.TierReadView`: flat files, read-ahead cache, fetcher),
  with the same validation and read settings as the broker's own reads; the disk tier of
  its cache (``read_ahead_disk_cache_path``) goes to a directory of its own under that path
  (:func:`~tiered_core.access.view.broker_disk_cache_path`).

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
from tiered_core.access.results import GetMessageResult, QueryMessageResult
from tiered_core.access.view import TierReadView, broker_disk_cache_path
from tiered_core.config import StoreConfig
from tiered_core.errors import TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.ownership import ReadOnlyDriver
from tiered_core.index.service import IndexStoreService
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.ops.rebuild import rebuild_metadata

log = logging.getLogger(__name__)


class TieredBrokerReader:
    """Messages of broker ``broker``'s physical queues, read only from the tiered backend.

    ``config`` is any broker's config of the same cluster (driver, options, cluster, read
    settings are used; its ``store_path`` is not touched). Contract: never writes to the
    backend or to any local path but its private temporary directory and, when
    ``read_ahead_disk_cache_path`` is set, the disk tier of its read-ahead cache
    (:func:`~tiered_core.access.view.broker_disk_cache_path`); :meth:`get_message`, :meth:`min_offset` and
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
        self.view: TierReadView | None = None
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
            old = self.view
            self._generation += 1
            metadata = SqliteMetadataStore(os.path.join(self._tmp, f"view-{self._generation}.db"))
            try:
                rebuild_metadata(self.driver, metadata, cluster=self.config.cluster, broker=self.broker)
                # the same read stack a broker's own store has; the driver outlives each snapshot
                view = TierReadView(self.config, self.driver, metadata, owns_metadata=True,
                                    disk_cache_path=broker_disk_cache_path(self.config, self.broker))
            except BaseException:
                metadata.close()
                raise
            if view.unrecoverable:
                log.warning("read-only view of %s: %d queue(s) not recoverable: %s", self.broker,
                            len(view.unrecoverable), view.unrecoverable)
            self.view, self.metadata = view, metadata
            self.flat_files: FlatFileStore = view.flat_files
            self.fetcher: MessageStoreFetcher = view.fetcher
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
                old.close()  # its flat files, cache and metadata

    @property
    def cache(self) -> ReadAheadCache | None:
        """The read-ahead cache of the current snapshot (None: ``read_ahead_cache_bytes`` is 0)."""
        return self.view.cache if self.view is not None else None

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

    def query_message(self, topic: str, key: str, max_count: int, begin: int, end: int) -> QueryMessageResult:
        """Messages of ``topic`` with ``key`` stored in ``[begin, end]``, found through the broker's
        uploaded key index; each hit is validated and must be the copy its consume-queue unit
        points at (as :meth:`TieredMessageStore.query_message` checks tiered hits, and with its
        ``error`` when a hit could not be read)."""
        if self.index is None or self.metadata is None:
            return QueryMessageResult()
        return QueryMessageResult(*tiered_key_hits(self.index, self.metadata, self.flat_files, self.fetcher.prop_crc,
                                                   topic, key, max_count, begin, end))

    def close(self) -> None:
        try:
            if self.index is not None:
                self.index.shutdown()
            if self.view is not None:
                self.view.close()  # its flat files, cache and metadata
        finally:
            self.driver.close()
            shutil.rmtree(self._tmp, ignore_errors=True)
