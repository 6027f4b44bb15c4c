"""Physical queues of a static topic take puts from the cluster only.

A static topic's messages live in physical queues of its brokers, each generation of a
logic queue a range ``[startOffset, endOffset)`` of one of them. A put straight into such a
queue (``tiered put --config broker.toml --topic T --queue Q``, or
``TieredMessageStore.put_message`` on a broker's store) lands outside every mapped range --
past a fenced generation's end, or in a queue no generation uses -- where the logic queue
never serves it; into the leader's queue it would take a logic offset behind the cluster's
back. So every broker store gets a :class:`DirectPutGuard` (the store's
:attr:`~tiered_core.access.tiered_store.TieredMessageStore.put_guard`): a put whose topic this
broker's mapping file maps is refused with
:class:`~tiered_core.static_topic.topic_errors.DirectPutRefused` (exit 2) naming the topic, the
physical queue, the logic queue it belongs to and what to run instead, unless it is the
cluster's own put (:meth:`DirectPutGuard.put_admitted`: the physical queue of the logic
queue's leader). Puts to other topics pass (one dictionary lookup).

:class:`~tiered_core.static_topic.cluster.Cluster` guards the stores it opens;
:func:`refuse_direct_puts` guards a store opened on its own (``tiered put`` does).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from tiered_core.static_topic.topic_errors import DirectPutRefused
from tiered_core.static_topic.mapping_file import TopicQueueMappingStore, mapping_path, read_json_document

if TYPE_CHECKING:
    from tiered_core.access.results import PutMessageResult
    from tiered_core.access.tiered_store import TieredMessageStore
    from tiered_core.codec.message import Message


class DirectPutGuard:
    """Refuses every put into a topic that ``mappings`` (one broker's mapping file) maps,
    except the cluster's own, admitted one at a time per thread by :meth:`put_admitted`.

    Contract: raises :class:`DirectPutRefused` before anything is written; thread-safe (the
    admission is per thread); reads ``mappings`` live, so a topic made static after the
    store opened is guarded from then on.
    """

    def __init__(self, mappings: TopicQueueMappingStore, broker: str) -> None:
        self.mappings = mappings
        self.broker = broker
        self._admitted = threading.local()

    def put_admitted(self, store: "TieredMessageStore", message: "Message", queue_id: int) -> "PutMessageResult":
        """``store.put_message(message, queue_id)`` admitted by this guard: the cluster's put
        into the physical queue of the logic queue's leader (admitted for this thread and
        this queue only, for the duration of the call)."""
        local = self._admitted
        previous = getattr(local, "queue", None)
        local.queue = (message.topic, queue_id)
        try:
            return store.put_message(message, queue_id)
        finally:
            local.queue = previous

    def __call__(self, message: "Message", queue_id: int) -> None:
        topic = message.topic
        if not self.mappings.maps(topic) or getattr(self._admitted, "queue", None) == (topic, queue_id):
            return
        found = self.mappings.logic_queue_of(topic, queue_id)
        if found is None:
            where = "no generation of the mapping uses it: a message there would belong to no logic queue"
            logic = None
        else:
            logic, item = found
            where = (f"it is generation {item.gen} of logic queue {logic}, "
                     + (f"fenced at physical offset {item.endOffset}: a message there would be past its end, "
                        "never read through the logic queue" if item.closed else
                        "its leader: only the cluster's put checks the broker still leads and is serialised with remaps"))
        target = f"logic queue {logic}" if logic is not None else "a logic queue"
        fix = (f"put into {target} through the cluster: `tiered static-topic put --cluster FILE --topic {topic} "
               f"--queue {logic if logic is not None else 'N'}` (or Cluster.put_message(message, "
               f"{logic if logic is not None else 'queue_id'}))")
        raise DirectPutRefused(
            f"topic {topic!r} is a static topic: physical queue {queue_id} of broker {self.broker!r} takes puts from "
            f"the cluster only ({where}); {fix}. Nothing was written",
            topic=topic, queue_id=queue_id, broker=self.broker, logic_queue=logic, fix=fix)


def refuse_direct_puts(store: "TieredMessageStore", topic: str | None = None) -> bool:
    """Guard a broker store opened on its own (not through a
    :class:`~tiered_core.static_topic.cluster.Cluster`) against puts into its static topics'
    physical queues, from its mapping file ``{store_path}/config/topicQueueMapping.json``
    (read only). ``topic``: the only topic the caller will put to (a one-shot put): the file
    is then parsed fully only when it maps that topic. Returns whether a guard was set
    (False: the broker maps no static topic, or not ``topic``). A mapping file that cannot
    be read raises its :class:`~tiered_core.errors.MappingError` /
    :class:`~tiered_core.errors.MetadataError`."""
    config = store.config
    path = mapping_path(config.store_path)
    if not os.path.isfile(path):
        return False
    if topic is not None:
        doc = read_json_document(path, "static-topic mapping")
        table = doc.get("topicQueueMappingInfoMap") if isinstance(doc, dict) else None
        if isinstance(table, dict) and topic not in table:
            return False  # (a malformed file falls through to the full load, which names what is wrong)
    mappings = TopicQueueMappingStore(config.store_path, config.broker)
    if not mappings.topics():
        return False
    store.put_guard = DirectPutGuard(mappings, config.broker)
    return True
