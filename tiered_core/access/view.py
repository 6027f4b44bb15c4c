"""The tier read view: the one place the tiered read stack is built.

driver -> metadata -> flat files (loaded) -> read-ahead cache -> fetcher, in that order,
with the config's read settings (``read_ahead_cache_bytes``, ``read_ahead_cache_expire_ms``,
``read_ahead_disk_cache_path``, ``verify_prop_crc``) applied the same way for every reader:

* :class:`~tiered_core.access.tiered_store.TieredMessageStore` builds its view from the driver and
  metadata its checked open produced (a guarded or read-only driver);
* the read-only view of another broker's tier
  (:class:`~tiered_core.static_topic.tiered_broker_reader.TieredBrokerReader`) builds one
  from metadata rebuilt from the backend listing, with the disk tier of its cache in a
  directory of its own (:func:`broker_disk_cache_path`);
* a tool that reads one store's tier without opening the store (verify, key queries from
  outside a store) calls :meth:`TierReadView.open_read_only`, which opens a read-only
  driver and a private read-only copy of the metadata and owns both.

How a caller opens the driver and the metadata stays its own business (claims, checks,
rebuilds differ); what reads the tier is always this view.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tiered_core.access.cache import ReadAheadCache
from tiered_core.access.fetcher import MessageStoreFetcher
from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.read_back import TailWitness
from tiered_core.flat.message_file import FlatMessageFile
from tiered_core.flat.ownership import ReadOnlyDriver
from tiered_core.metadata import open_metadata_read_only
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import TieredMetadataStore

if TYPE_CHECKING:
    from tiered_core.config import StoreConfig


def broker_disk_cache_path(config: "StoreConfig", broker: str) -> str | None:
    """Where the disk tier of a read-only view of ``broker``'s tier goes: a directory of its
    own under ``config``'s ``read_ahead_disk_cache_path`` (None: no disk tier). Cache keys
    name topic, queue and offset, not the broker, so two brokers' views never share one."""
    base = config.read_ahead_disk_cache_path
    return os.path.join(base, f"tier-view-{broker}") if base else None


class TierReadView:
    """The tiered read stack of one broker's tier prefix, built once, in order.

    Contract: :attr:`flat_files` holds every queue the metadata lists, loaded at build
    (queues that could not be recovered are listed in :attr:`unrecoverable` with the
    reason, and left out unless only their writes are refused; the build itself does not
    raise for them); :attr:`cache` is the
    read-ahead cache (None when ``read_ahead_cache_bytes`` is 0), its disk tier in
    ``disk_cache_path``; :attr:`fetcher` reads through both with the read path's checks.
    The view writes nothing: the flat files only write when a caller appends through them.
    :meth:`close` closes what the view built (flat files, cache) and the driver and
    metadata only when the view owns them (``owns_driver`` / ``owns_metadata``).
    Errors of the driver, the metadata or a bad cache setting propagate as raised
    (:class:`~tiered_core.errors.TieredStoreError` subclasses); on such an error nothing
    the view built stays open.

    Accessors for readers other than the fetcher: :attr:`driver`, :attr:`metadata`,
    :meth:`flat_file` (one queue's flat file), :meth:`queues` (every loaded queue),
    :attr:`prop_crc` (the property-CRC policy every read of this view checks with).
    """

    def __init__(self, config: "StoreConfig", driver: SegmentDriver, metadata: TieredMetadataStore, *,
                 disk_cache_path: str | None = None, witness: TailWitness | None = None,
                 owns_driver: bool = False, owns_metadata: bool = False) -> None:
        self.config = config
        self.driver = driver
        self.metadata = metadata
        self.owns_driver = owns_driver
        self.owns_metadata = owns_metadata
        self.flat_files = FlatFileStore(driver, metadata, config.flat_config(), witness=witness)
        #: Queues whose flat files could not be recovered at build, with the reason.
        self.unrecoverable: dict[tuple[str, int], str] = {}
        if not self.flat_files.load():
            self.unrecoverable = {(t, q): why for t, q, why in self.flat_files.failures}
        #: Where the cache's disk tier is (``disk_cache_path``, by default the config's).
        self.disk_cache_path = disk_cache_path or config.read_ahead_disk_cache_path
        try:
            # read_ahead_cache_bytes = 0 (RocketMQ readAheadCacheEnable=false): read without a cache.
            self.cache: ReadAheadCache | None = (
                ReadAheadCache(config.read_ahead_cache_bytes, config.read_ahead_cache_expire_ms,
                               disk_path=self.disk_cache_path)
                if config.read_ahead_cache_bytes > 0 else None)
        except BaseException:
            self.flat_files.shutdown()
            raise
        self.fetcher = MessageStoreFetcher(self.flat_files, self.cache, verify_prop_crc=config.verify_prop_crc)

    @classmethod
    def open_read_only(cls, config: "StoreConfig") -> "TierReadView":
        """A view of ``config``'s own tier that writes nothing anywhere: its driver refuses
        every write (:class:`~tiered_core.flat.ownership.ReadOnlyDriver`), its metadata is a
        private read-only copy of ``effective_metadata_path`` (nothing is created; a missing
        file reads as empty). The view owns and closes both. No prefix is claimed and the
        metadata is not reconciled with the tier: a caller that must trust the listing
        (verify) compares them itself. Raises what the driver or the metadata raise
        (:class:`~tiered_core.errors.MetadataError` for a store class that cannot be read
        read-only)."""
        driver = ReadOnlyDriver(config.open_driver())
        metadata = None
        try:
            metadata = open_metadata_read_only(config.metadata, config.effective_metadata_path())
            return cls(config, driver, metadata, owns_driver=True, owns_metadata=True)
        except BaseException:
            if metadata is not None:
                metadata.close()
            driver.close()
            raise

    @property
    def prop_crc(self) -> PropCrcPolicy:
        return self.fetcher.prop_crc

    def flat_file(self, topic: str, queue_id: int) -> FlatMessageFile | None:
        """The loaded flat file of ``topic``/``queue_id`` (None: the tier holds no such queue)."""
        return self.flat_files.get(topic, queue_id)

    def queues(self) -> list[tuple[str, int]]:
        """Every loaded queue, as ``(topic, queue_id)``."""
        return [(f.topic, f.queue_id) for f in self.flat_files.files()]

    def __enter__(self) -> "TierReadView":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the flat files and the cache, then the metadata and the driver when owned;
        each step runs even when an earlier one raised."""
        try:
            self.flat_files.shutdown()
        finally:
            try:
                if self.cache is not None:
                    self.cache.close()
            finally:
                try:
                    if self.owns_metadata:
                        self.metadata.close()
                finally:
                    if self.owns_driver:
                        self.driver.close()


__all__ = ["TierReadView", "broker_disk_cache_path"]
