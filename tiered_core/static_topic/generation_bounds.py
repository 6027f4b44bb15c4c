"""Physical bounds of each generation, in logic offsets: what
:class:`~tiered_core.static_topic.cluster.Cluster` asks of an open broker's store, or of
the tier alone when the broker is not open (a
:class:`~tiered_core.static_topic.tiered_broker_reader.TieredBrokerReader` per broker,
made on first use), and the cached min/max of a logic queue that reads use.
"""

from __future__ import annotations

import time
from typing import Any

from tiered_core.static_topic.mapping import LogicQueueMappingItem
from tiered_core.static_topic.tiered_broker_reader import TieredBrokerReader
from tiered_core.static_topic.topic_view import MappingViews


class GenerationBounds(MappingViews):
    """Min and max offsets of generations (a part of
    :class:`~tiered_core.static_topic.cluster.Cluster`): ``_phys_*`` in the physical queue,
    ``_min_offset``/``_max_offset``/``_logic_end`` in logic offsets. A generation whose
    broker is not open answers from the tier's snapshot taken when its reader was made.
    Cached values (``fresh=False``) are at most a second old and never past the true bound
    in the direction that would skip a message (mins only grow, maxes only grow)."""

    _readers: dict[str, TieredBrokerReader]
    _min_cache: dict[tuple[str, int, int], tuple[int, float]]
    _max_cache: dict[tuple[str, int, int], tuple[int, float]]
    _lock: Any

    def _reader(self, broker: str) -> TieredBrokerReader:
        reader = self._readers.get(broker)
        if reader is None:
            base = self.configs.get(broker) or next(iter(self.configs.values()))
            reader = self._readers[broker] = TieredBrokerReader(base, broker)
        return reader

    def _phys_min(self, topic: str, item: LogicQueueMappingItem) -> int:
        store = self.stores.get(item.bname)
        if store is not None:
            return store.get_min_offset_in_queue(topic, item.queueId)
        return self._reader(item.bname).min_offset(topic, item.queueId)

    def _phys_max(self, topic: str, item: LogicQueueMappingItem, fresh: bool = True) -> int:
        store = self.stores.get(item.bname)
        if store is not None:
            if fresh:
                store.local.reput()  # every acknowledged put is readable (cheap when caught up)
            return store.get_max_offset_in_queue(topic, item.queueId)
        return self._reader(item.bname).max_offset(topic, item.queueId)

    def _min_offset(self, topic: str, queue: int, first: LogicQueueMappingItem, fresh: bool) -> int:
        """The earliest item's min logic offset. ``fresh=False`` (a read past the earliest item,
        which reports it only) may use a value up to a second old: the min only grows."""
        key = (topic, queue, first.gen)
        now = time.monotonic()
        hit = self._min_cache.get(key)
        if not fresh and hit is not None and now - hit[1] < 1.0:
            return hit[0]
        lo = max(first.logicOffset, first.to_logic(self._phys_min(topic, first)))
        self._min_cache[key] = (lo, now)
        return lo

    def _max_offset(self, topic: str, queue: int, leader: LogicQueueMappingItem, fresh: bool) -> int:
        """The newest decided item's logic end. ``fresh=False`` (a read below that item, which
        reports it only) may use a value up to a second old: the max only grows."""
        key = (topic, queue, leader.gen)
        now = time.monotonic()
        hit = self._max_cache.get(key)
        if not fresh and hit is not None and now - hit[1] < 1.0:
            return hit[0]
        hi = self._logic_end(topic, leader, fresh)
        self._max_cache[key] = (hi, now)
        return hi

    def _logic_end(self, topic: str, item: LogicQueueMappingItem, fresh: bool = True) -> int:
        """The logic offset past the item's last message (decided items only); ``fresh=False``
        skips the reput (a read below the leader needs only a recent bound)."""
        if item.closed:
            return item.logic_end()
        return item.to_logic(max(self._phys_max(topic, item, fresh), item.startOffset))

    def _tier_gap(self, topic: str, item: LogicQueueMappingItem) -> tuple[int, int] | None:
        """The logic range ``[first, end)`` of a closed, decided generation that no read can ever
        serve: its broker holds only its first part, the rest never left that broker's local
        store and is gone -- the broker is not open (only the tier answers), or it is open
        but lost that store (a take-over after a lost disk: a closed generation takes no put,
        so its physical queue never grows back to its end). ``None`` when nothing is missing."""
        if not (item.decided and item.closed):
            return None
        end = item.logic_end()
        held = item.to_logic(max(self._phys_max(topic, item), item.startOffset))
        first = max(item.logicOffset, min(held, end))
        return (first, end) if first < end else None

    def skipped_offsets(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Every generation boundary a reader skips (see :meth:`get_message`): one entry per
        middle generation on a broker that is not open whose data was only partly tiered --
        topic, logic queue, gen, broker, the skipped logic range ``[from, to)`` and ``count``.
        Only generations followed by another one are listed (the newest is never skipped)."""
        out: list[dict[str, Any]] = []
        with self._lock:
            for t, view in self._readable_views(topic):
                for q in range(view.total_queues):
                    readable, _ = view.readable(q)
                    for item in readable[:-1]:
                        gap = self._tier_gap(t, item)
                        if gap is not None:
                            out.append({"topic": t, "queue": q, "gen": item.gen, "bname": item.bname,
                                        "from": gap[0], "to": gap[1], "count": gap[1] - gap[0]})
        return out


    def _min_of(self, topic: str, items: list[LogicQueueMappingItem]) -> int:
        first = items[0]
        if not first.decided:
            return -1  # the seed allows -1 only here and at put
        return max(first.logicOffset, first.to_logic(self._phys_min(topic, first)))

