"""Consumer offsets of one broker in RocketMQ's ``consumerOffset.json`` shape.

``{store_path}/config/consumerOffset.json``::

    {"offsetTable": {"<topic>@<group>": {"<queueId>": <offset>, ...}, ...},
     "dataVersion": {"counter": N, "stateVersion": 0, "timestamp": ms}}

For a static topic the queue id is the logic queue id and the offset a logic offset: the
seed stores them unconverted on the logic queue's leader and reads them back with a
double-read-check (leader, then previous leader), so a remap never resets a consumer. A
remap also carries the fenced leader's offsets of the moved logic queue forward to the new
leader (:meth:`ConsumerOffsetStore.raise_offsets`), so they survive the loss of a broker two
leaders back.
Writes are atomic (:func:`~tiered_core.static_topic.mapping_file.write_json_atomically`).
:class:`ConsumerOffsets` is the cluster's side: commit and query of logic queues' offsets.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from tiered_core.common import LONG_MAX
from tiered_core.errors import IllegalParam, MetadataError
from tiered_core.static_topic.mapping_file import loaded_data_version, read_json_document, write_versioned_json
from tiered_core.static_topic.topic_view import MappingViews

FILE_NAME = "consumerOffset.json"


class ConsumerOffsetStore:
    """``topic@group`` -> queue id -> offset, persisted on every commit. Thread-safe."""

    def __init__(self, store_path: str) -> None:
        self.path = os.path.join(store_path, "config", FILE_NAME)
        self._lock = threading.Lock()
        self._table: dict[str, dict[int, int]] = {}
        self.data_version = loaded_data_version(None)
        doc = read_json_document(self.path, "consumer offsets")
        if doc is not None:
            table = doc.get("offsetTable", {}) if isinstance(doc, dict) else None
            if not isinstance(table, dict):
                raise MetadataError(f"{self.path!r}: offsetTable must be an object", path=self.path)
            try:
                self._table = {k: {int(q): int(o) for q, o in v.items()} for k, v in table.items()}
            except (AttributeError, TypeError, ValueError) as exc:
                raise MetadataError(f"{self.path!r}: offsetTable must map queue ids to offsets: {exc}",
                                    path=self.path) from None
            self.data_version = loaded_data_version(doc)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``offset`` for (group, topic, queue) durably (overwrites: offsets are
        covering data, the newest commit wins)."""
        with self._lock:
            self._table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
            self._persist()

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when none."""
        with self._lock:
            return self._table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def queue_offsets(self, topic: str, queue_id: int) -> dict[str, int]:
        """Every group's committed offset of (``topic``, ``queue_id``): group -> offset."""
        suffix = len(topic) + 1
        with self._lock:
            return {key[suffix:]: table[queue_id] for key, table in self._table.items()
                    if key.startswith(f"{topic}@") and queue_id in table}

    def raise_offsets(self, topic: str, queue_id: int, offsets: dict[str, int]) -> bool:
        """Carry ``offsets`` (group -> offset of (``topic``, ``queue_id``)) into this store in one
        durable write, never lowering an offset it already has (a commit made here wins when
        it is further on). Idempotent: nothing is written when nothing would change; returns
        whether it wrote."""
        with self._lock:
            raised = {g: o for g, o in offsets.items()
                      if o > self._table.get(f"{topic}@{g}", {}).get(queue_id, -1)}
            if not raised:
                return False
            old = {k: dict(v) for k, v in self._table.items()}
            for g, o in raised.items():
                self._table.setdefault(f"{topic}@{g}", {})[queue_id] = o
            try:
                self._persist()
            except BaseException:
                self._table = old
                raise
            return True

    def _persist(self) -> None:  # lock held
        self.data_version = write_versioned_json(self.path, self.data_version, {
            "offsetTable": {k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(self._table.items())}})


class ConsumerOffsets(MappingViews):
    """Consumer offsets of logic queues (a part of :class:`~tiered_core.static_topic.cluster.Cluster`):
    committed on the logic queue's leader, queried from the leader and then the previous
    leader (the seed's double-read-check)."""

    offsets: dict[str, ConsumerOffsetStore]
    _lock: Any

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``group``'s logic ``offset`` of logic queue ``queue_id`` on the queue's leader."""
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= LONG_MAX:
            # consumerOffset.json is RocketMQ's: a Java long
            raise IllegalParam(f"offset must be an integer from 0 to {LONG_MAX}, got {offset!r}", offset=offset,
                               topic=topic, queue=queue_id)
        with self._lock:
            _, items = self._items(topic, queue_id)
            leader = items[-1].bname
            self._open_store(leader)
            self.offsets[leader].commit(group, topic, queue_id, offset)

    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        """``group``'s committed logic offset: the leader's, else the previous leader's (the
        seed's double-read-check); -1 when neither has one."""
        with self._lock:
            _, items = self._items(topic, queue_id)
            for broker in dict.fromkeys(i.bname for i in reversed(items[-2:])):
                store = self.offsets.get(broker)
                if store is not None:
                    value = store.query(group, topic, queue_id)
                    if value >= 0:
                        return value
            return -1
