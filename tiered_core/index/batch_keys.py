"""The key-index arguments of a validated batch of tiered messages (no message objects).

Shared by everything that indexes messages already in the tier: the store's key-index
repair after a recovery path (:mod:`tiered_core.access.key_repair`) and the Spark re-index
job (:mod:`tiered_core.spark.jobs.reindex`).
"""

from __future__ import annotations

from typing import Callable

from tiered_core.codec.index_keys import message_index_keys_from_properties
from tiered_core.codec.message import message_fields
from tiered_core.codec.message_batch import MessageBatch


def batch_keys(batch: MessageBatch, wants_time: Callable[[int], bool] | None) -> tuple:
    """The index arguments of one validated batch's messages that have keys (and, with
    ``wants_time``, a store time it accepts): ``(topic, queue_id, messages read, keys,
    offsets, sizes, timestamps)``; the lists are empty when no message qualifies.

    No message object is built: the store time comes from the header fields and the keys
    from the properties text, as the dispatcher takes them
    (:func:`~tiered_core.codec.index_keys.message_index_keys_from_properties`)."""
    data, base = batch.data, batch.base
    keys, offsets, sizes, timestamps = [], [], [], []
    for offset, size, _tags in batch.units:
        pos = offset - base
        fields, _header_size, props = message_fields(data, pos)
        if wants_time is not None and not wants_time(fields[11]):
            continue
        text = str(data[props:pos + size], "utf-8")
        found = message_index_keys_from_properties(text) if "KEY" in text else ()
        if found:
            keys.append(list(found))
            offsets.append(offset)
            sizes.append(size)
            timestamps.append(fields[11])
    return (batch.topic, batch.queue_id, len(batch), keys, offsets, sizes, timestamps)


__all__ = ["batch_keys"]
