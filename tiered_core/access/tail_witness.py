"""The local disk as witness of a tiered commit-log tail (``TailWitness``).

Bytes past a tiered commit log's committed end are adopted at open when they read back
as whole messages of the queue (``tiered_core/flat/read_back.py``): a commit whose upload
landed before its metadata update. They are this store's only when they are the messages
it acknowledged at those offsets. Another writer's messages there -- a restored copy of
this store running beside it, a clone of its machine -- read back just as well, and
adopting them would make those offsets name other messages than the ones this store's
local disk holds and will dispatch. The local store, while it still holds an offset, says
which message it is.
"""

from __future__ import annotations

from tiered_core.errors import TieredStoreError
from tiered_core.flat.read_back import TailWitness
from tiered_core.local.local_store import LocalMessageStore

#: Messages compared per local read.
_CHUNK = 1024


def local_witness(local: LocalMessageStore) -> TailWitness:
    """A witness that compares each tail message (body and store time) with the message
    ``local`` holds at its queue offset; offsets it holds no more (expired, a lost disk) are
    no evidence either way."""

    def witness(topic: str, queue_id: int, messages: list[tuple[int, bytes, int]]) -> str | None:
        if not messages or not local.has_queue(topic, queue_id):
            return None
        low = local.get_min_offset_in_queue(topic, queue_id)
        high = local.get_max_offset_in_queue(topic, queue_id)
        held = [m for m in messages if low <= m[0] < high]
        for start in range(0, len(held), _CHUNK):
            chunk = held[start:start + _CHUNK]
            try:
                mine = {m.queue_offset: m for m in local.get_messages(topic, queue_id, chunk[0][0], len(chunk))}
            except TieredStoreError:  # unreadable locally: no evidence
                return None
            for offset, body, stored_at in chunk:
                own = mine.get(offset)
                if own is not None and (bytes(own.body) != body or own.store_timestamp != stored_at):
                    return (f"the message at queue offset {offset} is not the one this store acknowledged there "
                            "(its local disk holds another body or store time): another writer's")
        return None

    return witness


__all__ = ["local_witness"]
