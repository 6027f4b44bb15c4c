"""The tiered key index insert loop: a batch of keys linked into a local index file's chains.

:func:`link_items` is the kernel :meth:`~tiered_core.index.store_file.IndexStoreFile.put_keys`
runs over the file's mapped bytes; it takes and returns plain bytes, ints, lists and dicts,
so a compiled twin can provide the same function. It produces exactly the items and slot
heads that one :meth:`~tiered_core.index.store_file.IndexStoreFile.put_key` per message
writes, in the same order (see ``tests/test_index_batch.py``).
"""

from __future__ import annotations

from typing import Sequence

from tiered_core.codec.hashing import index_key_hash
from tiered_core.codec.tiered_index import HEADER_SIZE, SLOT_SIZE
from tiered_core.codec.tiered_index import INT as _INT
from tiered_core.codec.tiered_index import ITEM as _ITEM


def link_items(
    slots: "bytes | bytearray | memoryview",
    slot_count: int,
    count: int,
    topic: str,
    topic_id: int,
    queue_id: int,
    keys: Sequence[Sequence[str]],
    offsets: Sequence[int],
    sizes: Sequence[int],
    diffs: Sequence[int],
) -> tuple[bytearray, dict[int, int], int]:
    """Chain the keys of a batch of messages into an index file.

    In: ``slots`` is the file from its start (at least the header and the slot table: slot
    ``s``'s newest item is the big-endian int at ``28 + 8*s``); ``count`` its item count;
    message ``m`` of ``topic``/``queue_id`` (``topic_id``) lies at tiered ``offsets[m]``,
    ``sizes[m]`` bytes, its time diff (seconds from the file's begin) is ``diffs[m]``, its
    keys are ``keys[m]`` (distinct, non-blank: already normalized).

    Out: ``(items, heads, new_slots)``: ``items`` the 32-byte items ``count+1, count+2, ...``
    back to back (each linked to the previous item of its slot: the slot's head as read, a
    head past the item count counting as none), ``heads`` slot -> its new newest item, and
    ``new_slots`` how many slots were empty before. Nothing is written to ``slots``.
    """
    items = bytearray()
    heads: dict[int, int] = {}
    new_slots = 0
    pack = _ITEM.pack
    read = _INT.unpack_from
    for m in range(len(keys)):
        off, size, diff = offsets[m], sizes[m], diffs[m]
        for key in keys[m]:
            hash_code = index_key_hash(topic, key)
            slot = hash_code % slot_count
            prev = heads.get(slot)
            if prev is None:
                (prev,) = read(slots, HEADER_SIZE + slot * SLOT_SIZE)
                if not 0 <= prev <= count:
                    prev = 0  # a link past the item count is garbage from a torn write
                if prev == 0:
                    new_slots += 1
            count += 1
            items += pack(hash_code, topic_id, queue_id, off, size, diff, prev)
            heads[slot] = count
    return items, heads, new_slots


__all__ = ["link_items"]
