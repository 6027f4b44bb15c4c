"""The merged view of a static topic's mapping over the open brokers' files, and the
lookups every part of :class:`~tiered_core.static_topic.cluster.Cluster` shares.

:class:`TopicView` is one topic's logic queues (items oldest first) merged from every open
broker's mapping file (:func:`merge_items`: one item per ``gen``, decided values win);
:class:`MappingViews` is the part of the cluster that builds and caches those views,
checks broker names and logic queue ids, and finds which physical queues exist.
:func:`read_static_topic_items` merges the same way from the files alone, opening no store.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from tiered_core.config import StoreConfig
from tiered_core.errors import IllegalParam, MappingError, StateConflict
from tiered_core.static_topic.topic_errors import UnknownStaticTopic
from tiered_core.static_topic.mapping import LogicQueueMappingItem, TopicQueueMappingDetail
from tiered_core.static_topic.mapping_file import TopicQueueMappingStore

if TYPE_CHECKING:
    from tiered_core.access.tiered_store import TieredMessageStore


@dataclass
class TopicView:
    """The merged mapping of one static topic over the open brokers' files."""

    topic: str
    total_queues: int
    epochs: dict[str, int]
    queues: dict[int, list[LogicQueueMappingItem]]

    def __post_init__(self) -> None:
        self._readable: dict[int, tuple[list[LogicQueueMappingItem], list[int]]] = {}

    @property
    def epoch(self) -> int:
        return max(self.epochs.values())

    def readable(self, queue: int) -> tuple[list[LogicQueueMappingItem], list[int]]:
        """The decided items of ``queue`` (oldest first) and their logic start offsets (cached)."""
        hit = self._readable.get(queue)
        if hit is None:
            items = [i for i in self.queues.get(queue, ()) if i.decided]
            hit = self._readable[queue] = (items, [i.logicOffset for i in items])
        return hit




_DATA_VERSION = operator.attrgetter("data_version")


def merge_items(topic: str, queue: int, lists: Iterable[tuple[str, list[LogicQueueMappingItem]]],
                 unused: Callable[[LogicQueueMappingItem], bool] | None = None) -> list[LogicQueueMappingItem]:
    """Merge one logic queue's items as several brokers know them: one item per ``gen``;
    a decided ``logicOffset`` and a known ``endOffset`` win over -1. Two brokers naming a
    different physical queue for the same gen is a :class:`MappingError` -- unless one of
    them is undecided and ``unused`` says its physical queue never took a message (a remap
    cut short after its first step, then run again towards another broker): that one is
    dropped, the decided one stays."""
    by_gen: dict[int, LogicQueueMappingItem] = {}
    for broker, items in lists:
        for item in items:
            old = by_gen.get(item.gen)
            if old is None:
                by_gen[item.gen] = item
                continue
            if (old.bname, old.queueId) != (item.bname, item.queueId) and unused is not None \
                    and old.decided != item.decided and unused(item if old.decided else old):
                by_gen[item.gen] = old if old.decided else item
                continue
            if (old.bname, old.queueId) != (item.bname, item.queueId):
                raise MappingError(f"static topic {topic!r} logic queue {queue}: gen {item.gen} is "
                                   f"{old.bname}/{old.queueId} on one broker and {item.bname}/{item.queueId} on "
                                   f"broker {broker!r}", topic=topic, queue=queue, field="gen", broker=broker)
            by_gen[item.gen] = dataclasses.replace(
                old, logicOffset=old.logicOffset if old.decided else item.logicOffset,
                endOffset=old.endOffset if old.closed else item.endOffset,
                timeOfEnd=old.timeOfEnd if old.timeOfEnd >= 0 else item.timeOfEnd)
    return [by_gen[g] for g in sorted(by_gen)]


def physical_queue_count(queues: dict[int, list[LogicQueueMappingItem]], broker: str) -> int:
    """How many physical queues of the topic ``broker``'s topic config must count: its highest
    physical queue id in any generation of ``queues`` + 1 (0: it hosts none). Ids are never
    reused, so a topic config of at least this many read and write queues covers them all."""
    return max((i.queueId + 1 for items in queues.values() for i in items if i.bname == broker), default=0)



def read_static_topic_items(configs: Sequence[StoreConfig], topic: str) -> tuple[int, dict[int, list[LogicQueueMappingItem]]]:
    """``(totalQueues, logic queue -> items oldest first)`` of ``topic``, merged from the mapping
    files of ``configs``' brokers, read only (no store is opened, nothing is claimed or written:
    what a planner on another process needs). Brokers whose ``store_path`` is gone are skipped.
    Raises :class:`MappingError` when no broker maps ``topic`` or they disagree."""
    details = {}
    for c in configs:
        if not os.path.isdir(c.store_path):
            continue
        d = TopicQueueMappingStore(c.store_path, c.broker).get(topic)
        if d is not None:
            details[c.broker] = d
    if not details:
        raise UnknownStaticTopic(f"{topic!r} is not a static topic of any broker", topic=topic, queue=None,
                                 field="topic", broker=None, known=[])
    totals = {d.totalQueues for d in details.values()}
    if len(totals) > 1:
        raise MappingError(f"static topic {topic!r}: brokers disagree on totalQueues", topic=topic, queue=None,
                           field="totalQueues", broker=None)
    queues = {q: merge_items(topic, q, [(b, d.hostedQueues[q]) for b, d in details.items() if q in d.hostedQueues])
              for q in sorted({q for d in details.values() for q in d.hostedQueues})}
    return totals.pop(), queues


class MappingViews:
    """The cluster's mapping views (a part of :class:`~tiered_core.static_topic.cluster.Cluster`,
    which owns the state below): one cached :class:`TopicView` per topic, rebuilt when any
    open broker's mapping file changes. Unknown topics raise :class:`UnknownStaticTopic`, a
    bad logic queue id :class:`IllegalParam`, an inconsistent mapping :class:`MappingError`.
    Call with the cluster lock held."""

    configs: dict[str, StoreConfig]
    stores: dict[str, "TieredMessageStore"]
    mappings: dict[str, TopicQueueMappingStore]
    _views: dict[str, tuple[tuple, TopicView]]

    # -- brokers ---------------------------------------------------------------------------

    def _check_broker(self, name: str) -> None:
        if name not in self.configs:
            raise IllegalParam(f"broker {name!r} is not in the cluster (brokers: {sorted(self.configs)})",
                               broker=name, field="broker")

    def _open_store(self, name: str) -> TieredMessageStore:
        self._check_broker(name)
        store = self.stores.get(name)
        if store is None:
            raise StateConflict(f"broker {name!r} is closed", broker=name)
        return store


    def _details(self, topic: str) -> dict[str, TopicQueueMappingDetail]:
        return {b: d for b, m in self.mappings.items() if (d := m.get(topic)) is not None}

    def _static_topics(self) -> list[str]:
        """Every topic some open broker has a mapping of (call with the lock held)."""
        return sorted({t for m in self.mappings.values() for t in m.topics()})

    def _readable_views(self, topic: str | None) -> Iterator[tuple[str, TopicView]]:
        """``(topic, view)`` of ``topic`` (None: every static topic) whose mappings agree
        enough to read; the others are skipped (``verify`` reports them). Lock held."""
        for t in [topic] if topic is not None else self._static_topics():
            try:
                yield t, self._view(t)
            except MappingError:
                continue

    def _view(self, topic: str, details: dict[str, TopicQueueMappingDetail] | None = None) -> TopicView:
        if details is None:
            # cached per topic until any open broker's mapping file changes: every write
            # replaces its dataVersion dict (a new counter), so the dicts themselves are the key
            # (held here, never equal to a later one; a closed broker's is gone from the tuple)
            key = tuple(map(_DATA_VERSION, self.mappings.values()))
            hit = self._views.get(topic)
            if hit is not None and hit[0] == key:
                return hit[1]
            view = self._merge_view(topic, self._details(topic))
            self._views[topic] = (key, view)
            return view
        return self._merge_view(topic, details)

    def _merge_view(self, topic: str, details: dict[str, TopicQueueMappingDetail]) -> TopicView:
        if not details:
            raise self._unknown_topic(topic)
        totals = {d.totalQueues for d in details.values()}
        if len(totals) > 1:
            raise MappingError(f"static topic {topic!r}: brokers disagree on totalQueues: "
                               f"{ {b: d.totalQueues for b, d in details.items()} }", topic=topic, queue=None,
                               field="totalQueues", broker=None)
        queues: dict[int, list[LogicQueueMappingItem]] = {}
        for q in sorted({q for d in details.values() for q in d.hostedQueues}):
            queues[q] = merge_items(topic, q, [(b, d.hostedQueues[q]) for b, d in details.items()
                                                 if q in d.hostedQueues],
                                    unused=lambda item: self._never_used(topic, item))
        return TopicView(topic, totals.pop(), {b: d.epoch for b, d in details.items()}, queues)

    def _never_used(self, topic: str, item: LogicQueueMappingItem) -> bool:
        """Whether ``item``'s physical queue holds no message, in its broker's local store or
        tier (False when its broker is not open: nothing tells)."""
        store = self.stores.get(item.bname)
        if store is None:
            return False
        store.local.reput()  # every acknowledged put is in a consume queue
        return store.get_max_offset_in_queue(topic, item.queueId) <= 0

    def _unknown_topic(self, topic: str) -> UnknownStaticTopic:
        known = self._static_topics()
        listed = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        return UnknownStaticTopic(f"{topic!r} is not a static topic on any open broker of the cluster (static "
                                  f"topics: {listed or 'none'}); `tiered static-topic create` makes one",
                                  topic=topic, queue=None, field="topic", broker=None, known=known[:20])

    def _items(self, topic: str, queue_id: int) -> tuple[TopicView, list[LogicQueueMappingItem]]:
        view = self._view(topic)
        if not isinstance(queue_id, int) or not 0 <= queue_id < view.total_queues:
            raise IllegalParam(f"static topic {topic!r}: logic queue id {queue_id} is outside "
                               f"[0, {view.total_queues})", topic=topic, queue=queue_id, field="queue_id")
        items = view.queues.get(queue_id)
        if not items:
            raise MappingError(f"static topic {topic!r}: logic queue {queue_id} has no mapping on any open broker",
                               topic=topic, queue=queue_id, field="hostedQueues", broker=None)
        return view, items

    def _next_queue_id(self, topic: str, broker: str,
                       queues: dict[int, list[LogicQueueMappingItem]] | None = None) -> int:
        """A physical queue id of ``broker`` never used by ``topic`` (no physical queue reuse):
        past every id its local store, its tiered files, the open brokers' mappings and
        ``queues`` (a mapping being built) use. One pass over each: call it once per broker
        and count on from there when allocating many ids."""
        store = self._open_store(broker)
        store.local.reput()
        used = {qid for t, qid in store.local.list_queues() if t == topic}
        # the tier's too: after a lost local disk, physical queues live on there only
        used |= {f.queue_id for f in store.flat_files.files() if f.topic == topic}
        for m in self.mappings.values():
            d = m.get(topic)
            if d is not None:
                used |= {i.queueId for items in d.hostedQueues.values() for i in items if i.bname == broker}
        if queues:
            used |= {i.queueId for items in queues.values() for i in items if i.bname == broker}
        return max(used) + 1 if used else 0


    def _physical_queues(self, topics: set[str]) -> dict[str, dict[str, set[int]]]:
        """broker -> topic -> the physical queue ids of ``topics`` each open broker holds, in its
        local store or its tiered files (one pass over each broker's queues). Lock held."""
        out: dict[str, dict[str, set[int]]] = {}
        for b, store in self.stores.items():
            store.local.reput()  # every acknowledged put is in a consume queue
            held = out[b] = {}
            for t, qid in store.local.list_queues():
                if t in topics:
                    held.setdefault(t, set()).add(qid)
            for f in store.flat_files.files():
                if f.topic in topics:
                    held.setdefault(f.topic, set()).add(f.queue_id)
        return out

