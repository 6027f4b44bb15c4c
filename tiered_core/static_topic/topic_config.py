"""Per-broker topic configs in RocketMQ's ``topics.json`` shape: ``{store_path}/config/topics.json``.

::

    {"topicConfigTable": {"<topic>": {"topicName": "<topic>", "readQueueNums": 8, "writeQueueNums": 8,
                                       "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                       "order": false, "attributes": {}}, ...},
     "dataVersion": {"counter": N, "stateVersion": 0, "timestamp": ms}}

For a static topic a broker's topic config counts its *physical* queues of the topic (the
queues the broker hosts in any generation: ids are never reused, so the count is the
highest id + 1). The seed orders the two files: the mapping (the source of truth) is
written first, the topic config after it; so a broker whose mapping exists but whose
topic config is missing or short is a half-done admin command (``verify`` reports it and
re-running the command completes it), and a topic config without a mapping is never
written by a complete command.

Topic configs are its own file, separate from ``topicQueueMapping.json`` (seed "File
Isolation"). Writes are atomic and durable (the mapping file's
:func:`~tiered_core.static_topic.mapping_file.write_json_atomically`). Unknown fields of a loaded
topic config are kept and written back unchanged.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from tiered_core.errors import MappingError, MetadataError
from tiered_core.static_topic.mapping_file import loaded_data_version, read_json_document, write_versioned_json

FILE_NAME = "topics.json"
#: RocketMQ's ``PermName.PERM_READ | PermName.PERM_WRITE``.
PERM_READ_WRITE = 6


def topic_config_path(store_path: str) -> str:
    """The topic-config file of the broker whose local store is ``store_path``."""
    return os.path.join(store_path, "config", FILE_NAME)


@dataclass(frozen=True)
class TopicConfig:
    """One topic's config as RocketMQ's ``TopicConfig`` serialises it.

    Contract: ``readQueueNums`` and ``writeQueueNums`` are >= 0 (:class:`MappingError`
    naming the field otherwise); ``extra`` holds fields this class does not model, kept as loaded.
    """

    topicName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int = PERM_READ_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def queue_nums(self) -> int:
        """The physical queues both readable and writable: ``min(read, write)``."""
        return min(self.readQueueNums, self.writeQueueNums)

    def to_json(self) -> dict[str, Any]:
        return {**self.extra, "attributes": dict(self.attributes), "order": self.order, "perm": self.perm,
                "readQueueNums": self.readQueueNums, "topicFilterType": self.topicFilterType,
                "topicName": self.topicName, "topicSysFlag": self.topicSysFlag,
                "writeQueueNums": self.writeQueueNums}

    @classmethod
    def from_json(cls, doc: Any, *, topic: str, broker: str | None = None, path: str | None = None) -> "TopicConfig":
        """Parse one entry of ``topicConfigTable`` stored under ``topic``."""
        def bad(field_name: str, msg: str) -> MappingError:
            return MappingError(f"topic config of {topic!r} (broker {broker!r}, {path}): {field_name}: {msg}",
                                topic=topic, queue=None, field=field_name, broker=broker, path=path)

        if not isinstance(doc, dict):
            raise bad("topicConfigTable", f"must be an object, got {type(doc).__name__}")
        name = doc.get("topicName", topic)
        if name != topic:
            raise bad("topicName", f"names {name!r} but is stored under {topic!r}")
        values: dict[str, Any] = {}
        for key, default in (("readQueueNums", None), ("writeQueueNums", None), ("perm", PERM_READ_WRITE),
                             ("topicSysFlag", 0)):
            v = doc.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise bad(key, f"must be an integer >= 0, got {v!r}")
            values[key] = v
        attributes = doc.get("attributes") or {}
        if not isinstance(attributes, dict):
            raise bad("attributes", f"must be an object, got {attributes!r}")
        known = {"topicName", "readQueueNums", "writeQueueNums", "perm", "topicFilterType", "topicSysFlag",
                 "order", "attributes"}
        return cls(topicName=topic, topicFilterType=str(doc.get("topicFilterType", "SINGLE_TAG")),
                   order=bool(doc.get("order", False)), attributes=dict(attributes),
                   extra={k: v for k, v in doc.items() if k not in known}, **values)


class TopicConfigStore:
    """The topic configs of one broker, kept in memory and in ``topics.json``.

    Contract: :meth:`ensure_queues` persists atomically before it returns (after a crash the file
    holds the state before or after the call); ``dataVersion.counter`` grows by one per
    write; a file that cannot be parsed raises :class:`MetadataError` or
    :class:`MappingError` (naming the topic and field) at open. Thread-safe.
    """

    def __init__(self, store_path: str, broker: str) -> None:
        self.path = topic_config_path(store_path)
        self.broker = broker
        self._lock = threading.RLock()
        self._table: dict[str, TopicConfig] = {}
        self.data_version = loaded_data_version(None)
        doc = read_json_document(self.path, "topic configs")
        if doc is None:
            return
        table = doc.get("topicConfigTable", {}) if isinstance(doc, dict) else None
        if not isinstance(table, dict):
            raise MetadataError(f"{self.path!r}: topicConfigTable must be an object", path=self.path)
        self._table = {t: TopicConfig.from_json(d, topic=t, broker=broker, path=self.path) for t, d in table.items()}
        self.data_version = loaded_data_version(doc)

    def get(self, topic: str) -> TopicConfig | None:
        """``topic``'s config on this broker (None: none)."""
        with self._lock:
            return self._table.get(topic)

    def ensure_queues(self, topic: str, queue_nums: int) -> bool:
        """Make ``topic``'s config count at least ``queue_nums`` readable and writable queues
        (create it, or grow it; never shrink it); persists only when something changes.
        Returns whether it wrote."""
        if isinstance(queue_nums, bool) or not isinstance(queue_nums, int) or queue_nums < 0:
            raise MappingError(f"topic {topic!r}: queue count must be >= 0, got {queue_nums!r}", topic=topic,
                               queue=None, field="writeQueueNums", broker=self.broker)
        with self._lock:
            old = self._table.get(topic)
            if old is not None and old.queue_nums >= queue_nums:
                return False
            new = (TopicConfig(topicName=topic, readQueueNums=queue_nums, writeQueueNums=queue_nums)
                   if old is None else TopicConfig(
                       topicName=topic, readQueueNums=max(old.readQueueNums, queue_nums),
                       writeQueueNums=max(old.writeQueueNums, queue_nums), perm=old.perm,
                       topicFilterType=old.topicFilterType, topicSysFlag=old.topicSysFlag, order=old.order,
                       attributes=dict(old.attributes), extra=dict(old.extra)))
            self._table[topic] = new
            try:
                self._persist()
            except BaseException:
                if old is None:
                    self._table.pop(topic, None)
                else:
                    self._table[topic] = old
                raise
            return True

    def _persist(self) -> None:  # lock held
        self.data_version = write_versioned_json(self.path, self.data_version, {
            "topicConfigTable": {t: c.to_json() for t, c in sorted(self._table.items())}})
