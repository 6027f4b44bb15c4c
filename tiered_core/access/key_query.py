"""Key lookups in the tiered key index, each hit checked against its queue: shared by
:class:`~tiered_core.access.tiered_store.TieredMessageStore` and the read-only view of another
broker's tier (:mod:`tiered_core.static_topic.tiered_broker_reader`)."""

from __future__ import annotations

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.message import MessageExt
from tiered_core.errors import CorruptData, TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.index.service import IndexStoreService
from tiered_core.spi.metadata import TieredMetadataStore


def tiered_key_hits(index: IndexStoreService, metadata: TieredMetadataStore, flat_files: FlatFileStore,
                    prop_crc: PropCrcPolicy, topic: str, key: str, max_count: int, begin: int,
                    end: int) -> tuple[list[MessageExt], TieredStoreError | None]:
    """Tiered index hits, each read and checked through its queue's segment reader
    (:meth:`FlatMessageFile.reader <tiered_core.flat.message_file.FlatMessageFile.reader>`):
    an entry counts only when the
    consume-queue unit at the message's queue offset points at that very copy (an
    entry of a copy a crash left unreferenced, or of one indexed twice, does not).

    Returns the messages and the first error that kept an entry's message from being read
    (None when there was none): damaged or foreign bytes (:class:`CorruptData`) only mean
    that entry is not a hit, any other failure (the backend down) that it is unknown."""
    meta = metadata.get_topic(topic)
    if meta is None:
        return [], None
    out: list[MessageExt] = []
    failed: TieredStoreError | None = None
    seen: set[tuple[int, int]] = set()
    # The index keeps whole seconds: widen the window by one, then filter exactly.
    for entry in index.query(topic, key, max_count * 2, begin - 999, end, topic_id=meta.topic_id):
        flat = flat_files.get(topic, entry.queue_id)
        if flat is None:
            continue
        reader = flat.reader(prop_crc)
        try:
            # The read path's checks, for a message no unit was read for (yet): the queue
            # offset and tags code are compared with its unit below.
            checked = reader.message_at(entry.offset, entry.size)
            if checked.error is not None:
                raise checked.error
            msg = checked.message(0)
            if not ((key in msg.keys or msg.uniq_key == key) and begin <= msg.store_timestamp <= end
                    and (msg.queue_id, msg.queue_offset) not in seen
                    and flat.consume_queue_min_offset() <= msg.queue_offset < flat.consume_queue_commit_offset()):
                continue
            unit = reader.unit(msg.queue_offset)
        except CorruptData:
            continue
        except TieredStoreError as exc:
            failed = failed or exc
            continue
        if unit is None or (unit.commitlog_offset, unit.size) != (entry.offset, entry.size):
            continue
        seen.add((msg.queue_id, msg.queue_offset))
        out.append(msg)
        if len(out) >= max_count:
            return out, None
    return out, failed
