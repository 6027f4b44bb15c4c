"""The data path of static topics: puts to a logic queue's leader, and reads of logic
offsets mapped across generations (each generation a physical queue, on an open broker's
store or, when its broker is not open, on the tier alone), time and key lookups.

:meth:`LogicDataPath.get_message` runs in named steps: the read plan of the logic queue
(:class:`_ReadState`, rebuilt when the mapping view changes), its bounds
(:meth:`~LogicDataPath._read_bounds`, cached up to a second where that is safe), the
generation that holds the offset (:meth:`~LogicDataPath._locate`), one physical read, the
translation of the batch to logic offsets (:meth:`~LogicDataPath._as_logic`), and the
answer when the physical read found nothing (:meth:`~LogicDataPath._answer_empty`).
"""

from __future__ import annotations

import bisect
import math
import time
from typing import NamedTuple

from tiered_core.access.results import GetMessageResult, GetMessageStatus, PutMessageResult, QueryMessageResult
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.codec.message import Message, MessageExt
from tiered_core.codec.naming import validate_topic
from tiered_core.common import LONG_MAX, BoundaryType
from tiered_core.errors import Fenced, IllegalParam, MappingError
from tiered_core.static_topic.generation_bounds import GenerationBounds
from tiered_core.static_topic.guard import DirectPutGuard
from tiered_core.static_topic.mapping import LogicQueueMappingItem
from tiered_core.static_topic.tiered_broker_reader import TieredBrokerReader
from tiered_core.static_topic.topic_view import TopicView

_PAST_TIER = frozenset({GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                        GetMessageStatus.NO_MESSAGE_IN_QUEUE})


class _ReadState:
    """What :meth:`LogicDataPath.get_message` keeps per logic queue between calls (see ``_read_state``):
    per decided item (oldest first) its logic start, its logic end (closed items), the open
    store that serves it or else the tier-only reader of its broker, and the offset delta
    ``logicOffset - startOffset`` applied to a whole batch; and the cached bounds."""

    __slots__ = ("view", "readable", "starts", "ends", "stores", "readers", "deltas", "lo", "lo_at", "hi",
                 "hi_at", "hi_mark")

    def __init__(self, view: TopicView, readable: list[LogicQueueMappingItem], starts: list[int],
                 ends: list[int | None], stores: list[TieredMessageStore | None],
                 readers: list[TieredBrokerReader | None]) -> None:
        self.view, self.readable, self.starts, self.ends = view, readable, starts, ends
        self.stores, self.readers = stores, readers
        self.deltas = [i.logicOffset - i.startOffset for i in readable]
        self.lo = self.hi = 0
        self.lo_at = self.hi_at = -math.inf
        self.hi_mark: int | None = None  # the leader's commit-log max offset when ``hi`` was fresh


class _Located(NamedTuple):
    """Where one read goes: the generation's index in the read plan, its item, the next
    generation's item (None: it is the newest), its logic end, and how many to read."""

    idx: int
    item: LogicQueueMappingItem
    next_item: LogicQueueMappingItem | None
    end: int
    count: int


class LogicDataPath(GenerationBounds):
    """Puts and reads of logic queues (a part of :class:`~tiered_core.static_topic.cluster.Cluster`,
    sharing its state and lock). A put goes to the logic queue's leader only (else
    :class:`Fenced`); a read never tells a consumer to skip what a generation still holds
    (the one documented exception: :meth:`get_message`)."""

    _guards: dict[str, DirectPutGuard]
    _read_states: dict[tuple[str, int], _ReadState]
    _valid_topics: set[str]
    skipped_reads: int

    def _read_state(self, topic: str, queue_id: int) -> "_ReadState":
        """The per-view read plan of one logic queue (decided items, their logic starts, the
        closed items' logic ends) and its cached bounds; rebuilt whenever the merged mapping
        view changes (a remap step, a broker closed), so nothing outlives the mapping it came from."""
        view = self._view(topic)
        key = (topic, queue_id)
        st = self._read_states.get(key)
        if st is not None and st.view is view:
            return st
        self._items(topic, queue_id)  # raises on a bad queue id or an unmapped queue
        readable, starts = view.readable(queue_id)
        ends = [i.logic_end() if i.closed else None for i in readable]
        # a broker opens or closes only with a change of the mapping view (close_broker drops
        # its mapping store), which rebuilds this state: the resolved stores stay right
        stores = [self.stores.get(i.bname) for i in readable]
        readers = [self._reader(i.bname) if s is None else None for i, s in zip(readable, stores)]
        st = self._read_states[key] = _ReadState(view, readable, starts, ends, stores, readers)
        self._valid_topics.add(topic)
        return st


    def leader(self, topic: str, queue_id: int) -> LogicQueueMappingItem:
        """The newest item (the leader generation) of logic queue ``queue_id`` (errors as
        :meth:`put_message`'s)."""
        with self._lock:
            return self._items(topic, queue_id)[1][-1]

    def put_message(self, message: Message, queue_id: int) -> PutMessageResult:
        """Put ``message`` into logic queue ``queue_id`` of its (static) topic: it goes to the
        leader's physical queue; the result's ``queue_offset`` is the logic offset (-1 while
        the leader's ``logicOffset`` is undecided, as the seed allows)."""
        with self._lock:
            _, items = self._items(message.topic, queue_id)
            leader = items[-1]
            try:
                return self.put_message_to_broker(leader.bname, message, queue_id)
            except Fenced as exc:
                # every remap writes the new leader's file first: the cluster knowing a leader
                # that its own file does not name means that file is older (a restored backup)
                fix = f"tiered static-topic takeover --cluster {self.source or 'CLUSTER_FILE'} --broker {leader.bname}"
                raise Fenced(f"static topic {message.topic!r} logic queue {queue_id}: the cluster's mappings name "
                             f"broker {leader.bname!r} its leader (gen {leader.gen}), but that broker's own mapping "
                             "file does not (older than the others': restored from a backup?); nothing was "
                             f"written. Run `{fix}`: it gives the broker back the mappings the other brokers know",
                             **{**exc.context, "leader": leader.bname, "gen": leader.gen, "fix": fix}) from None

    def put_message_to_broker(self, broker: str, message: Message, queue_id: int) -> PutMessageResult:
        """What a broker does with a put to logic queue ``queue_id`` (RocketMQ's
        ``rewriteRequestForStaticTopic``): it writes only when its own mapping names itself
        the leader; otherwise :class:`Fenced` naming topic, queue, broker and the leader."""
        store = self._open_store(broker)
        topic = message.topic
        with self._lock:
            found = self.mappings[broker].leader(topic, queue_id)
            if found is None:
                raise MappingError(f"broker {broker!r} has no mapping of static topic {topic!r}", topic=topic,
                                   queue=queue_id, field="topicQueueMappingInfoMap", broker=broker)
            total, leader = found
            if not 0 <= queue_id < total:
                raise IllegalParam(f"static topic {topic!r}: logic queue id {queue_id} is outside "
                                   f"[0, {total})", topic=topic, queue=queue_id, field="queue_id")
            if leader is None or leader.bname != broker:
                now = f"now led by {leader.bname!r}" if leader is not None else "not hosted here"
                raise Fenced(f"static topic {topic!r} logic queue {queue_id}: broker {broker!r} is fenced "
                             f"({now}); puts go to the leader", topic=topic, queue=queue_id, broker=broker,
                             leader=leader.bname if leader is not None else None)
            res = self._guards[broker].put_admitted(store, message, leader.queueId)
            logic = leader.to_logic(res.queue_offset) if leader.decided else -1
            return PutMessageResult(res.status, logic, res.commitlog_offset, res.store_timestamp)


    def get_message(self, group: str, topic: str, queue_id: int, offset: int,
                    max_count: int = 32) -> GetMessageResult:
        """Up to ``max_count`` messages of logic queue ``queue_id`` from logic ``offset``.

        Returned messages carry the logic queue id and logic offsets; ``next_begin_offset``
        moves on to the next generation when one is exhausted. OutOfRange (seed rules):
        OFFSET_TOO_SMALL only below the earliest item's min, OFFSET_OVERFLOW_* only at or
        above the leader's max; a read the physical queue cannot serve inside a middle
        generation is OFFSET_FOUND_NULL with ``next_begin_offset`` = ``offset`` (retry; never
        a reset). The leader's messages are not readable while its ``logicOffset`` is -1.

        The one documented skip: a generation followed by another whose broker is not open and
        whose data was only partly tiered (its tail never left the gone broker's local store)
        can never be served past what the tier holds; a read there answers NO_MATCHED_MESSAGE
        with ``next_begin_offset`` = the next generation's first logic offset instead of
        stalling. The skipped offsets are counted: :meth:`skipped_offsets`, ``skippedOffsets``
        in :meth:`static_topic_status`, ``skipped`` in ``tiered static-topic verify``; each such
        read adds one to :attr:`skipped_reads`.
        """
        if topic not in self._valid_topics:  # a topic already served needs no re-check
            validate_topic(topic)
        if max_count <= 0:
            raise IllegalParam(f"max_count must be > 0, got {max_count}", max_count=max_count)
        if offset < 0:
            raise IllegalParam(f"offset must be >= 0, got {offset}", offset=offset, topic=topic, queue=queue_id)
        with self._lock:
            st = self._read_state(topic, queue_id)
            lo, hi = self._read_bounds(st, topic, queue_id, offset)
            where = self._locate(st, topic, offset, max_count, lo, hi)
            if type(where) is GetMessageResult:
                return where
        item = where.item
        delta = st.deltas[where.idx]
        # one translation per batch: the physical offset of the first message, then the
        # delta onto each message's own offset (no per-message item lookup)
        reader = st.readers[where.idx]
        res = (st.stores[where.idx].get_message(group, topic, item.queueId, offset - delta, where.count)
               if reader is None else reader.get_message(topic, item.queueId, offset - delta, where.count))
        if res.messages and self._as_logic(res, where, queue_id, delta, lo, hi):
            return res
        return self._answer_empty(res, st, topic, queue_id, offset, where, lo, hi)

    def _read_bounds(self, st: _ReadState, topic: str, queue_id: int, offset: int) -> tuple[int, int]:
        """The logic queue's ``(min, max)`` for a read at ``offset`` (lock held). The earliest
        item's min may be up to a second old: it only grows, so a stale value is never above
        the true one (an offset below it is too small for sure; one that fell below the true
        min meanwhile gets the physical queue's OFFSET_TOO_SMALL, answered with a fresh min
        after the read, see :meth:`_answer_empty`); likewise the leader's max for a read below it."""
        readable = st.readable
        now = time.monotonic()
        if now - st.lo_at < 1.0:
            lo = st.lo
        else:
            lo = st.lo = self._min_offset(topic, queue_id, readable[0], fresh=True)
            st.lo_at = now
        if offset >= st.starts[-1]:  # the read may reach the leader: every acknowledged put visible
            # unchanged while nothing was appended to the leader's open store since the last
            # fresh value (its max only moves by a put; the reput is what makes it visible)
            leader = readable[-1]
            store = st.stores[-1]
            mark = store.local.commit_log.max_offset if store is not None and not leader.closed else None
            if mark is not None and mark == st.hi_mark:
                hi = st.hi
            else:
                hi = st.hi = self._max_offset(topic, queue_id, leader, fresh=True)
                st.hi_mark = mark
            st.hi_at = now
        elif now - st.hi_at < 1.0:
            hi = st.hi
        else:
            hi = st.hi = self._max_offset(topic, queue_id, readable[-1], fresh=False)
            st.hi_at, st.hi_mark = now, None
        return lo, hi

    def _locate(self, st: _ReadState, topic: str, offset: int, max_count: int, lo: int,
                hi: int) -> _Located | GetMessageResult:
        """The generation holding logic ``offset``, or the answer without a read: out of range
        (the seed's OutOfRange rules), or a hole between generations (move on, no stall)."""
        if offset < lo:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, next_begin_offset=lo, min_offset=lo,
                                    max_offset=hi)
        if offset >= hi:
            status = (GetMessageStatus.OFFSET_OVERFLOW_ONE if offset == hi
                      else GetMessageStatus.OFFSET_OVERFLOW_BADLY)
            return GetMessageResult(status, next_begin_offset=hi, min_offset=lo, max_offset=hi)
        readable = st.readable
        idx = bisect.bisect_right(st.starts, offset) - 1
        item = readable[idx]
        nxt_item = readable[idx + 1] if idx + 1 < len(readable) else None
        end = st.ends[idx]
        if end is None:
            end = self._logic_end(topic, item) if nxt_item is not None else hi
        if offset >= end:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, next_begin_offset=nxt_item.logicOffset
                                    if nxt_item is not None else hi, min_offset=lo, max_offset=hi)
        return _Located(idx, item, nxt_item, end, min(max_count, end - offset))

    @staticmethod
    def _as_logic(res: GetMessageResult, where: _Located, queue_id: int, delta: int, lo: int, hi: int) -> bool:
        """Turn a physical read's messages into the logic queue's, in place: drop those past a
        closed generation's end, move each onto its logic offset and queue id, and set the
        result's status and bounds. False when none is left (nothing is changed then)."""
        item = where.item
        messages: list[MessageExt] = res.messages
        if item.closed and messages[-1].queue_offset >= item.endOffset:
            messages = res.messages = [m for m in messages if m.queue_offset < item.endOffset]
            if not messages:
                return False
        # the stores build fresh MessageExt objects and results on every read (the read-ahead
        # cache keeps bytes, not objects), so rewriting them in place changes nothing anyone
        # else holds (a stored message's queue id is its physical queue's, item.queueId)
        if item.queueId != queue_id:
            for m in messages:
                m.queue_offset += delta
                m.queue_id = queue_id
        elif delta:
            for m in messages:
                m.queue_offset += delta
        nxt = messages[-1].queue_offset + 1
        if nxt >= where.end and where.next_item is not None:
            nxt = where.next_item.logicOffset
        res.status, res.next_begin_offset, res.min_offset, res.max_offset = GetMessageStatus.FOUND, nxt, lo, hi
        return True

    def _answer_empty(self, res: GetMessageResult, st: _ReadState, topic: str, queue_id: int, offset: int,
                      where: _Located, lo: int, hi: int) -> GetMessageResult:
        """The answer to a read whose generation returned no message: never a reset of the
        consumer while a generation still holds what it asked for."""
        idx, item, nxt_item = where.idx, where.item, where.next_item
        if res.status is GetMessageStatus.OFFSET_TOO_SMALL and idx == 0:
            # the earliest item's min moved past ``offset`` since ``lo`` was cached: report it fresh
            with self._lock:
                lo = st.lo = self._min_offset(topic, queue_id, item, fresh=True)
                st.lo_at = time.monotonic()
            if offset < lo:
                return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, next_begin_offset=lo, min_offset=lo,
                                        max_offset=hi, tier=res.tier)
        if res.status is GetMessageStatus.OFFSET_TOO_SMALL and idx > 0:
            # truncated middle generation: its remaining data starts later; never reset the consumer
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=max(
                offset, item.to_logic(res.next_begin_offset)), min_offset=lo, max_offset=hi, tier=res.tier)
        if res.status is GetMessageStatus.NO_MATCHED_MESSAGE:
            return GetMessageResult(res.status, next_begin_offset=item.to_logic(res.next_begin_offset),
                                    min_offset=lo, max_offset=hi, tier=res.tier)
        if nxt_item is not None and res.status in _PAST_TIER:
            gap = self._tier_gap(topic, item)
            if gap is not None and offset >= gap[0]:
                # the generation's broker is gone and its tail never reached the tier: nothing
                # will ever fill [gap): skip to the next generation (counted, see skipped_offsets)
                with self._lock:
                    self.skipped_reads += 1
                return GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, next_begin_offset=nxt_item.logicOffset,
                                        min_offset=lo, max_offset=hi, tier=res.tier)
        return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=offset, min_offset=lo,
                                max_offset=hi, tier=res.tier)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The smallest logic offset still readable (from the earliest decided item)."""
        with self._lock:
            _, items = self._items(topic, queue_id)
            return self._min_of(topic, items)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The logic offset just past the last readable message (the newest decided item's end)."""
        with self._lock:
            view, _ = self._items(topic, queue_id)
            readable = view.readable(queue_id)[0]
            return self._logic_end(topic, readable[-1]) if readable else -1  # -1: nothing decided yet


    # -- time and key lookups -----------------------------------------------------------------

    def _phys_by_time(self, topic: str, item: LogicQueueMappingItem, timestamp: int,
                      boundary: BoundaryType) -> int:
        store = self.stores.get(item.bname)
        if store is not None:
            return store.get_offset_in_queue_by_time(topic, item.queueId, timestamp, boundary)
        return self._reader(item.bname).fetcher.get_offset_in_queue_by_time(topic, item.queueId, timestamp, boundary)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int,
                                    boundary: BoundaryType = BoundaryType.LOWER) -> int:
        """The logic offset of the first (LOWER) or last (UPPER) message stored at ``timestamp``,
        or of the first message after it (LOWER) -- segmented by generation: items whose
        ``timeOfEnd`` is before ``timestamp`` (LOWER) or whose ``timeOfStart`` is after it
        (UPPER) are skipped without a read. Past every message: the max offset."""
        with self._lock:
            _, items = self._items(topic, queue_id)
            readable = [i for i in items if i.decided]
            order = readable if boundary is BoundaryType.LOWER else list(reversed(readable))
            for item in order:
                if boundary is BoundaryType.LOWER and 0 <= item.timeOfEnd < timestamp:
                    continue
                if boundary is BoundaryType.UPPER and item.timeOfStart > timestamp and item is not readable[0]:
                    continue
                start = item.to_physical(max(item.logicOffset, self.get_min_offset_in_queue(topic, queue_id)))
                end = item.endOffset if item.closed else max(self._phys_max(topic, item), item.startOffset)
                if end <= start:
                    continue
                phys = min(max(self._phys_by_time(topic, item, timestamp, boundary), start), end)
                if phys < end:
                    return item.to_logic(phys)
            return self._logic_end(topic, readable[-1])

    def query_message(self, topic: str, key: str, max_count: int = 32, begin: int = 0,
                      end: int | None = None) -> QueryMessageResult:
        """Messages of ``topic`` with ``key`` in ``[begin, end]`` from every broker holding a
        generation of the topic (a closed one through its uploaded key index in the tier);
        each carries its logic queue id and logic offset."""
        validate_topic(topic)
        if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count <= 0:
            raise IllegalParam(f"max_count must be an integer > 0, got {max_count!r}", max_count=max_count,
                               topic=topic)
        end = LONG_MAX if end is None else end
        with self._lock:
            view = self._view(topic)
            by_phys = {(i.bname, i.queueId): (q, i) for q, items in view.queues.items() for i in items if i.decided}
        found: list[MessageExt] = []
        error = None
        for broker in sorted({b for b, _ in by_phys}):
            store = self.stores.get(broker)
            result = (store.query_message(topic, key, max_count, begin, end) if store is not None
                      else self._reader(broker).query_message(topic, key, max_count, begin, end))
            error = error or result.error
            for m in result.messages:
                hit = by_phys.get((broker, m.queue_id))
                if hit is None:
                    continue
                q, item = hit
                if m.queue_offset < item.startOffset or (item.closed and m.queue_offset >= item.endOffset):
                    continue
                m.queue_offset, m.queue_id = item.to_logic(m.queue_offset), q
                found.append(m)
        found.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
        return QueryMessageResult(found[:max_count], None if len(found) >= max_count else error)
