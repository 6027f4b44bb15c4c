"""A cluster of brokers in one process, and static topics over them (seed 002, RIP-21).

:class:`Cluster` opens one :class:`~tiered_core.access.store.TieredMessageStore` per broker
(each its own ``broker`` name and ``store_path``, all on the same tiered backend and
``cluster``) and one :class:`~tiered_core.static_topic.store.TopicQueueMappingStore` per
broker. On top of them:

* admin: :meth:`Cluster.create_static_topic`, :meth:`Cluster.remap_static_topic`,
  :meth:`Cluster.static_topic_status`, :meth:`Cluster.verify`;
* data path: :meth:`Cluster.put_message` (logic queue -> the leader's physical queue; the
  result's ``queue_offset`` is the logic offset), :meth:`Cluster.get_message` (logic
  offsets mapped across generations), :meth:`Cluster.get_min_offset_in_queue`,
  :meth:`Cluster.get_max_offset_in_queue`.

Reads of a generation whose broker is open go to that broker's store; otherwise they go
straight to the shared tiered backend through a read-only view of that broker's flat files
(:class:`~tiered_core.static_topic.reader.TieredBrokerReader`), which never writes under
the other broker's prefix.

Remap follows the seed's high-availability order ("切新禁旧再切新"), each step a durable
mapping write: (1) the new leader gets the new item with ``logicOffset`` -1 (undecided),
then (mapping before topic config) its ``topics.json`` counts the new physical queue;
(2) the old leader is fenced: its file gets the new item too, and the old item's
``endOffset`` (its physical max at that moment, taken under the cluster lock so no put
races it); the old leader's committed consumer offsets of the logic queue are carried to
the new leader's ``consumerOffset.json`` (never lowering one there); (3) the new leader's
item gets ``logicOffset`` = the old item's logic end
(so logic offsets stay contiguous: no skip at a generation boundary); (4) every broker's
file gets the new ``epoch``, and brokers that are neither leader nor previous leader of a
logic queue drop it once its data has left their local store (the leader keeps every
generation; :meth:`Cluster.trim_static_mappings` drops it later, after any local
retention run that deletes files, a broker's own background one included). A crash between steps leaves a
state that :meth:`Cluster.verify` reports; running the same remap again finishes it.

In-process puts and admin steps are serialised by one cluster lock (held per logic queue
move, so puts interleave with a remap of many queues).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import operator
import os
import threading
import time
import tomllib
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Iterator, Sequence

from tiered_core.access.results import GetMessageResult, GetMessageStatus, PutMessageResult, QueryMessageResult
from tiered_core.access.store import TieredMessageStore
from tiered_core.codec.message import Message, MessageExt
from tiered_core.codec.naming import validate_topic
from tiered_core.common import LONG_MAX, BoundaryType, now_ms
from tiered_core.config import StoreConfig
from tiered_core.errors import (ConfigError, Fenced, IllegalParam, MappingError, PrefixOwned, StateConflict,
                                UnknownObjects)
from tiered_core.flat.ownership import read_store_id
from tiered_core.static_topic.bulk import gc_paused
from tiered_core.static_topic.errors import UnknownStaticTopic
from tiered_core.static_topic.guard import DirectPutGuard
from tiered_core.static_topic.mapping import LogicQueueMappingItem, TopicQueueMappingDetail
from tiered_core.static_topic.offsets import ConsumerOffsetStore
from tiered_core.static_topic.reader import TieredBrokerReader
from tiered_core.static_topic.restore import infer_lost_items
from tiered_core.static_topic.store import TopicQueueMappingStore
from tiered_core.static_topic.topic_config import TopicConfigStore


@dataclass(frozen=True)
class Violation:
    """One broken rule found by :meth:`Cluster.verify`."""

    topic: str
    queue: int | None
    broker: str | None
    field: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
_PAST_TIER = frozenset({GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                        GetMessageStatus.NO_MESSAGE_IN_QUEUE})


class _ReadState:
    """What :meth:`Cluster.get_message` keeps per logic queue between calls (see ``_read_state``):
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


def _merge_items(topic: str, queue: int, lists: Iterable[tuple[str, list[LogicQueueMappingItem]]]
                 ) -> list[LogicQueueMappingItem]:
    """Merge one logic queue's items as several brokers know them: one item per ``gen``;
    a decided ``logicOffset`` and a known ``endOffset`` win over -1. Two brokers naming a
    different physical queue for the same gen is a :class:`MappingError`."""
    by_gen: dict[int, LogicQueueMappingItem] = {}
    for broker, items in lists:
        for item in items:
            old = by_gen.get(item.gen)
            if old is None:
                by_gen[item.gen] = item
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


class Cluster:
    """Brokers of one cluster on one shared tiered backend, opened in this process.

    Contract: every config has its own ``broker`` and ``store_path``, and all share
    ``cluster``, ``driver`` and driver options (else :class:`ConfigError`). Errors name
    what was wrong: an unknown broker or a logic queue id out of range is
    :class:`IllegalParam`; a put through a broker that no longer leads the logic queue is
    :class:`Fenced`; an inconsistent or undecided mapping is :class:`MappingError`.
    """

    @gc_paused()  # bulk work over every logic queue (see static_topic.bulk)
    def __init__(self, configs: Sequence[StoreConfig], *, background: bool = False,
                 take_over: Collection[str] = (), source: str | None = None, read_only: bool = False) -> None:
        if not configs:
            raise ConfigError("a cluster needs at least one broker config", key="broker")
        names = [c.broker for c in configs]
        if isinstance(take_over, str) or not set(take_over) <= set(names):
            raise IllegalParam(f"take_over names {sorted(set(take_over) - set(names)) or take_over!r}, not brokers "
                               f"of the cluster (brokers: {sorted(names)})", field="broker")
        self.source = source  # the cluster file, named in errors' fixes
        for what, values in (("broker", names), ("store_path", [os.path.abspath(c.store_path) for c in configs])):
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:
                raise ConfigError(f"every broker needs its own {what}; {dup} is used twice", key=what)
        first = configs[0]
        for c in configs[1:]:
            for key in ("cluster", "driver"):
                if getattr(c, key) != getattr(first, key):
                    raise ConfigError(f"broker {c.broker!r} has {key} {getattr(c, key)!r}, broker {first.broker!r} "
                                      f"has {getattr(first, key)!r}: a cluster shares one tiered backend", key=key)
            if dict(c.driver_options) != dict(first.driver_options):
                raise ConfigError(f"broker {c.broker!r} has other driver options than broker {first.broker!r}: "
                                  "a cluster shares one tiered backend", key="options")
        self.configs: dict[str, StoreConfig] = {c.broker: c for c in configs}
        self.stores: dict[str, TieredMessageStore] = {}
        self.mappings: dict[str, TopicQueueMappingStore] = {}
        self.offsets: dict[str, ConsumerOffsetStore] = {}
        self.topic_configs: dict[str, TopicConfigStore] = {}
        self._readers: dict[str, TieredBrokerReader] = {}
        self._guards: dict[str, DirectPutGuard] = {}
        self._views: dict[str, tuple[tuple, TopicView]] = {}
        self._min_cache: dict[tuple[str, int, int], tuple[int, float]] = {}
        self._max_cache: dict[tuple[str, int, int], tuple[int, float]] = {}
        self._read_states: dict[tuple[str, int], _ReadState] = {}
        self._valid_topics: set[str] = set()
        self.skipped_reads = 0  # reads answered with a skip past a partly tiered generation
        self._closing = False
        self._lock = threading.RLock()
        try:
            for c in configs:
                self.mappings[c.broker] = TopicQueueMappingStore(c.store_path, c.broker)
                self.offsets[c.broker] = ConsumerOffsetStore(c.store_path)
                self.topic_configs[c.broker] = TopicConfigStore(c.store_path, c.broker)
                try:
                    store = TieredMessageStore.open(c, background=background, take_over=c.broker in take_over,
                                                    read_only=read_only)
                except PrefixOwned as exc:
                    raise self._lost_broker(c, exc) from exc
                except UnknownObjects as exc:
                    # read-only opens do not ask the owner: a broker without its store id lost its disk
                    if read_store_id(c.store_path) is None:
                        raise self._lost_broker(c, exc) from exc
                    raise
                self.stores[c.broker] = store
                # its static topics' physical queues take the cluster's puts only (static_topic.guard)
                store.put_guard = self._guards[c.broker] = DirectPutGuard(self.mappings[c.broker], c.broker)
                # every local retention run that deleted files, the store's own timer included
                store.add_local_expiry_listener(self._on_local_expiry)
        except BaseException:
            self.close()
            raise

    def _lost_broker(self, config: StoreConfig, exc: PrefixOwned | UnknownObjects) -> PrefixOwned:
        """``exc`` (another store owns the broker's tier prefix) said at cluster level: which
        broker, and the fix that works from the cluster file."""
        fix = (f"tiered static-topic takeover --cluster {self.source or 'CLUSTER_FILE'} --broker {config.broker}")
        context = {**exc.context, "broker": config.broker, "fix": fix}
        return PrefixOwned(
            f"broker {config.broker!r} cannot open: another store owns its tier prefix {exc.context.get('prefix')!r} "
            f"({exc.context.get('owner', 'unknown owner')}); this is a new store at {config.store_path!r}. If broker "
            f"{config.broker!r} lost its disk or moved to this store_path, stop the old broker {config.broker!r} "
            f"and run `{fix}` (it takes the prefix over, rebuilds the broker's metadata from the tier and its "
            "static-topic mappings from the other brokers); if two brokers share the name "
            f"{config.broker!r} on one backend, give this one its own name", **context)

    @classmethod
    def open(cls, configs: Sequence[StoreConfig], *, background: bool = False,
             take_over: Collection[str] = (), read_only: bool = False) -> "Cluster":
        """Open every broker of ``configs`` (see the class contract). ``take_over``: brokers
        whose store takes its tier prefix over from the store that owned it (a broker that
        lost its disk, see :meth:`restore_broker`); the others refuse a prefix another store
        owns with :class:`PrefixOwned` naming the broker and that fix. ``read_only`` opens each
        broker's store read-only (``TieredMessageStore.open(..., read_only=True)``): for status
        and verify, which write nothing."""
        return cls(configs, background=background, take_over=take_over, read_only=read_only)

    @classmethod
    def load(cls, path: str | os.PathLike, *, background: bool = False,
             take_over: Collection[str] = (), read_only: bool = False) -> "Cluster":
        """Open the cluster a TOML file describes: ``[tiered]`` (and ``[tiered.options]``)
        holds what every broker shares; each ``[[broker]]`` table holds one broker's own keys
        (at least ``broker`` and ``store_path``) and overrides the shared ones. Relative paths
        resolve against the file's directory. See ``examples/cluster.toml``. ``take_over`` and
        ``read_only``: as :meth:`open`."""
        return cls(load_cluster_configs(path), background=background, take_over=take_over,
                   source=os.fspath(path), read_only=read_only)

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

    def close_broker(self, name: str, *, drain: bool = True) -> None:
        """Close one broker (its store and mapping); reads of its generations then go to the tier.

        ``drain`` (default) first tiers everything the broker holds: a forced dispatch, then
        its open key-index file is sealed and uploaded, so its messages stay findable by key
        once its ``store_path`` is gone."""
        self._check_broker(name)
        with self._lock:
            store = self.stores.get(name)
            if store is not None and drain:
                store.dispatch(force=True)
                store.index.roll_file()
                store.index.compact_and_upload()
            self.stores.pop(name, None)
            self.mappings.pop(name, None)
            self.offsets.pop(name, None)
            self.topic_configs.pop(name, None)
            self._guards.pop(name, None)
            reader = self._readers.pop(name, None)
        if reader is not None:
            reader.close()
        if store is not None:
            store.close()

    def dispatch(self, force: bool = True) -> None:
        """One synchronous dispatch round on every open broker; refreshes read-only views."""
        for store in list(self.stores.values()):
            store.dispatch(force=force)

    def close(self) -> None:
        self._closing = True  # a retention run finishing meanwhile trims nothing
        for reader in list(self._readers.values()):
            reader.close()
        self._readers.clear()
        for name in list(self.stores):
            self.stores.pop(name).close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- mapping views ----------------------------------------------------------------------

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
            queues[q] = _merge_items(topic, q, [(b, d.hostedQueues[q]) for b, d in details.items()
                                                 if q in d.hostedQueues])
        return TopicView(topic, totals.pop(), {b: d.epoch for b, d in details.items()}, queues)

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

    # -- physical offsets -------------------------------------------------------------------

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
        serve: its broker is not open and the tier holds only its first part (the rest never
        left that broker's local store). ``None`` when nothing is missing or the broker is open."""
        if item.bname in self.stores or not (item.decided and item.closed):
            return None
        end = item.logic_end()
        held = item.to_logic(max(self._reader(item.bname).max_offset(topic, item.queueId), item.startOffset))
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

    # -- admin ------------------------------------------------------------------------------

    @gc_paused()  # bulk work over every logic queue (see static_topic.bulk)
    def create_static_topic(self, topic: str, total_queues: int, brokers: Sequence[str]) -> dict[str, Any]:
        """Create static topic ``topic`` with ``total_queues`` logic queues spread round-robin over
        ``brokers`` (logic queue i on ``brokers[i % len(brokers)]``, a fresh physical queue each).

        Writes the mapping to every open broker of the cluster (brokers hosting nothing get one
        with ``epoch`` and ``totalQueues``: the seed's "No Target Brokers"), hosting brokers
        first; then, mapping before topic config, the topic config (``topics.json``, its
        physical queue count) on every broker hosting a physical queue. Idempotent:
        re-running after a crash completes a half-done create. Refuses a topic that already
        has data or a topic config as a normal topic (:class:`StateConflict`) and a
        ``total_queues`` that disagrees with an existing mapping (:class:`MappingError`,
        field ``totalQueues``). Returns :meth:`static_topic_status`.
        """
        validate_topic(topic)
        if isinstance(total_queues, bool) or not isinstance(total_queues, int) or total_queues < 1:
            raise IllegalParam(f"total_queues must be an integer >= 1, got {total_queues!r}", topic=topic,
                               field="total_queues")
        brokers = self._check_targets(topic, brokers)
        with self._lock:
            details = self._details(topic)
            if details:
                view = self._view(topic, details)
                if view.total_queues != total_queues:
                    raise MappingError(f"static topic {topic!r} exists with totalQueues {view.total_queues}, "
                                       f"not {total_queues}", topic=topic, queue=None, field="totalQueues",
                                       broker=None, existing=view.total_queues, requested=total_queues)
                epoch = view.epoch
                queues = dict(view.queues)
            else:
                for name, configs in self.topic_configs.items():
                    if configs.get(topic) is not None:  # a mapping is always written before its topic config
                        raise StateConflict(f"{topic!r} is already a normal topic (broker {name!r} has its topic "
                                            "config, no broker a mapping); a static topic needs a new name",
                                            topic=topic, broker=name, field="topicConfigTable")
                for name, store in self.stores.items():
                    store.local.reput()  # puts not yet in a consume queue count too
                    if any(t == topic for t, _ in store.local.list_queues()) or any(
                            f.topic == topic for f in store.flat_files.files()):
                        raise StateConflict(f"{topic!r} is already a normal topic with data on broker {name!r}; "
                                            "a static topic needs a new name", topic=topic, broker=name)
                epoch = now_ms()
                queues = {}
            now = now_ms()
            next_id: dict[str, int] = {}  # per broker: computed once, then counted on (linear in queues)
            for q in range(total_queues):
                if q not in queues:
                    b = brokers[q % len(brokers)]
                    qid = next_id[b] if b in next_id else self._next_queue_id(topic, b, queues)
                    next_id[b] = qid + 1
                    queues[q] = [LogicQueueMappingItem(gen=0, queueId=qid, bname=b, logicOffset=0, startOffset=0,
                                                       timeOfStart=now)]
            hosting = [b for b in self.mappings if any(items[-1].bname == b for items in queues.values())]
            for b in hosting + [b for b in self.mappings if b not in hosting]:
                hosted = {q: items for q, items in queues.items() if b in {i.bname for i in items[-2:]}}
                self.mappings[b].put(TopicQueueMappingDetail(topic=topic, totalQueues=total_queues, bname=b,
                                                             epoch=epoch, hostedQueues=hosted))
            # the seed's order: every mapping (the source of truth) first, then the topic configs
            for b in self.topic_configs:
                count = physical_queue_count(queues, b)
                if count:
                    self.topic_configs[b].ensure_queues(topic, count)
        return self.static_topic_status(topic)

    def _check_targets(self, topic: str, brokers: Sequence[str]) -> list[str]:
        if isinstance(brokers, str) or not brokers:
            raise IllegalParam(f"static topic {topic!r}: give a non-empty list of broker names, got {brokers!r}",
                               topic=topic, field="brokers")
        out: list[str] = []
        for b in brokers:
            self._open_store(b)
            if b not in out:
                out.append(b)
        return out

    @gc_paused()  # bulk work over every logic queue (see static_topic.bulk)
    def remap_static_topic(self, topic: str, brokers: Sequence[str]) -> dict[str, Any]:
        """Move logic queues' leaders so they are spread over ``brokers`` (a queue whose leader is
        already on a target broker with room stays), in the seed's high-availability order
        (see the module doc). The epoch grows by one. Re-running the same remap after a crash
        finishes it. Returns :meth:`static_topic_status`.

        An old leader that is closed cannot be fenced in its own file; its item is then ended
        at what the tier holds of its queue (messages it never dispatched are not mapped).
        The new leader's topic config grows to count its new physical queue once the new item is
        durable in its mapping. Consumer offsets: queries double-read-check (leader, then the
        previous leader), and each move also carries the fenced leader's committed offsets of
        the moved logic queue forward to the new leader (never lowering one it already has), so
        they outlive the broker two leaders back.
        """
        validate_topic(topic)
        brokers = self._check_targets(topic, brokers)
        with self._lock:
            view = self._view(topic)
            missing = [q for q in range(view.total_queues) if q not in view.queues]
            if missing:
                raise MappingError(f"static topic {topic!r}: logic queues {missing} have no mapping on any open "
                                   "broker; repair (re-run create) before a remap", topic=topic, queue=missing[0],
                                   field="hostedQueues", broker=None)
            epoch = view.epoch + 1
            cap = math.ceil(view.total_queues / len(brokers))
            load = {b: 0 for b in brokers}
            plan: dict[int, str] = {}
            for q in range(view.total_queues):
                leader = view.queues[q][-1].bname
                if leader in load and load[leader] < cap:
                    plan[q] = leader
                    load[leader] += 1
            for q in range(view.total_queues):
                if q not in plan:
                    target = min(brokers, key=lambda b: (load[b], brokers.index(b)))
                    plan[q] = target
                    load[target] += 1
        for q in range(view.total_queues):
            with self._lock:  # one logic queue at a time: puts to the others go on
                self._move(topic, q, plan[q], epoch)
        with self._lock:
            self._sync_epoch(topic, epoch)
        return self.static_topic_status(topic)

    def _write_queue(self, broker: str, topic: str, queue: int, items: list[LogicQueueMappingItem],
                     epoch: int, total: int) -> None:
        store = self.mappings[broker]
        detail = store.get(topic) or TopicQueueMappingDetail(topic=topic, totalQueues=total, bname=broker,
                                                             epoch=epoch)
        detail.hostedQueues[queue] = list(items)
        detail.epoch = max(detail.epoch, epoch)
        store.put(detail)

    def _move(self, topic: str, queue: int, target: str, epoch: int) -> None:
        view = self._view(topic)
        items = view.queues[queue]
        last = items[-1]
        if last.decided and last.bname == target:
            self.topic_configs[target].ensure_queues(topic, last.queueId + 1)  # no write when complete
            return
        if last.bname != target:
            if not last.decided:  # an unfinished move elsewhere: finish it first
                self._move(topic, queue, last.bname, epoch)
                items = self._view(topic).queues[queue]
                last = items[-1]
            new = LogicQueueMappingItem(gen=last.gen + 1, queueId=self._next_queue_id(topic, target), bname=target,
                                        logicOffset=-1, startOffset=0, timeOfStart=now_ms())
            # step 1: the new leader, logic offset undecided
            self._write_queue(target, topic, queue, items + [new], epoch, view.total_queues)
            items = items + [new]
        new, prev = items[-1], items[-2]
        # the new physical queue in the topic config, after the mapping that names it is durable
        self.topic_configs[target].ensure_queues(topic, new.queueId + 1)
        # step 2: fence the old leader (no more puts to it), recording where it ends
        if not prev.closed:
            old_store = self.stores.get(prev.bname)
            if old_store is not None:
                old_store.local.reput()  # every acknowledged put into the consume queue: the max is exact
            end = max(self._phys_max(topic, prev), prev.startOffset)
            prev = dataclasses.replace(prev, endOffset=end, timeOfEnd=now_ms())
        if prev.bname in self.mappings:
            old = self.mappings[prev.bname].get(topic)
            old_leader = old.leader(queue) if old is not None else None
            if old_leader is None or old_leader.gen < new.gen:
                self._write_queue(prev.bname, topic, queue, items[:-2] + [prev, new], epoch, view.total_queues)
        # the fenced leader takes no more commits (they go to the new one since step 1): carry
        # its offsets of this logic queue forward, so a query finds them once it is gone
        carried = self._offsets_of(prev.bname)
        if carried is not None:
            self.offsets[target].raise_offsets(topic, queue, carried.queue_offsets(topic, queue))
        # step 3: decide the new item's logic offset: contiguous with the old item's end
        new = dataclasses.replace(new, logicOffset=prev.logic_end())
        self._write_queue(target, topic, queue, items[:-2] + [prev, new], epoch, view.total_queues)

    def _offsets_of(self, broker: str) -> ConsumerOffsetStore | None:
        """``broker``'s consumer offsets: its open store's, else read from its ``store_path`` while
        that still exists (a closed broker); None when it is gone."""
        store = self.offsets.get(broker)
        if store is None and broker in self.configs and os.path.isdir(self.configs[broker].store_path):
            store = ConsumerOffsetStore(self.configs[broker].store_path)
        return store

    def _sync_epoch(self, topic: str, epoch: int) -> None:
        """Step 4: every open broker gets ``epoch``; a logic queue stays in a broker's file only
        while that broker holds one of its two newest generations (the leader keeps all), or
        an older one whose data is still in its local store (see :meth:`trim_static_mappings`)."""
        view = self._view(topic)
        for b, store in self.mappings.items():
            store.put(TopicQueueMappingDetail(topic=topic, totalQueues=view.total_queues, bname=b, epoch=epoch,
                                              hostedQueues=self._hosted_by(b, topic, view)))

    def _holds_locally(self, broker: str, topic: str, item: LogicQueueMappingItem) -> bool:
        """Whether ``broker``'s local store still has any of ``item``'s physical range."""
        store = self.stores.get(broker)
        if store is None:
            return False
        store.local.reput()
        lo = max(store.local.get_min_offset_in_queue(topic, item.queueId), item.startOffset)
        hi = store.local.get_max_offset_in_queue(topic, item.queueId)
        if item.closed:
            hi = min(hi, item.endOffset)
        return lo < hi

    def _hosted_by(self, broker: str, topic: str, view: TopicView) -> dict[int, list[LogicQueueMappingItem]]:
        """The logic queues ``broker``'s mapping file keeps: those where it holds one of the two
        newest generations, or an older generation whose data has not left its local store yet
        (older generations stay readable from the tier either way)."""
        hosted = {}
        for q, items in view.queues.items():
            if broker in {i.bname for i in items[-2:]} or any(
                    i.bname == broker and self._holds_locally(broker, topic, i) for i in items[:-2]):
                hosted[q] = items
        return hosted

    @gc_paused()  # bulk work over every logic queue (see static_topic.bulk)
    def trim_static_mappings(self, topic: str | None = None) -> int:
        """Drop from each open broker's mapping file the logic queues it keeps only for an old
        generation (older than the two newest) whose data has since left its local store
        (local retention); returns how many (broker, topic) files were rewritten."""
        written = 0
        with self._lock:
            for t, view in self._readable_views(topic):
                for b, store in list(self.mappings.items()):
                    d = store.get(t)
                    if d is None:
                        continue
                    hosted = {q: items for q, items in self._hosted_by(b, t, view).items() if q in d.hostedQueues}
                    if set(hosted) != set(d.hostedQueues):
                        store.put(dataclasses.replace(d, hostedQueues={q: d.hostedQueues[q] for q in hosted}))
                        written += 1
        return written

    def _on_local_expiry(self, deleted_files: int) -> None:
        """A broker's local retention deleted files (called by its store, on the thread that ran
        it: the background timer of a store opened with ``background=True``): trim."""
        if not self._closing:
            self.trim_static_mappings()

    def delete_expired_local(self, now_ms: int | None = None) -> int:
        """Local retention on every open broker now (never a message not yet tiered); each run
        that deletes files trims the mappings (:meth:`trim_static_mappings`), as the brokers'
        own background retention does. Returns how many commit-log files were deleted."""
        return sum(store.delete_expired_local(now_ms) for store in list(self.stores.values()))

    @gc_paused()  # bulk work over every logic queue (see static_topic.bulk)
    def static_topic_status(self, topic: str) -> dict[str, Any]:
        """Per logic queue: its items (oldest first), leader, min and max logic offsets, and
        ``skippedOffsets``: how many logic offsets readers skip at generation boundaries
        (:meth:`skipped_offsets`; 0 normally)."""
        with self._lock:
            view = self._view(topic)
            # one pass over the topic, not one per logic queue: the skipped ranges, and every
            # acknowledged put made visible once per broker (then each queue's max needs no reput)
            skipped: dict[int, int] = {}
            for g in self.skipped_offsets(topic):
                skipped[g["queue"]] = skipped.get(g["queue"], 0) + g["count"]
            for store in self.stores.values():
                store.local.reput()
            queues = []
            for q in range(view.total_queues):
                items = view.queues.get(q, [])
                entry: dict[str, Any] = {"queue": q, "items": [i.to_json() for i in items]}
                if items:
                    entry["leader"] = {"bname": items[-1].bname, "queueId": items[-1].queueId}
                    entry["minOffset"] = self._min_of(topic, items)
                    readable = view.readable(q)[0]
                    entry["maxOffset"] = self._logic_end(topic, readable[-1], fresh=False) if readable else -1
                    entry["skippedOffsets"] = skipped.get(q, 0)
                queues.append(entry)
            return {"topic": topic, "totalQueues": view.total_queues, "epoch": view.epoch, "epochs": view.epochs,
                    "queues": queues}

    @gc_paused()  # bulk work over every logic queue (see static_topic.bulk)
    def verify(self) -> list[Violation]:
        """Check every static topic across the open brokers; one :class:`Violation` per broken rule
        (an empty list: consistent). Rules: every open broker has a mapping of the topic (a
        topic config without one is named as such); every open broker hosting physical queues
        of it has a topic config counting at least them (``topics.json``);
        epochs and ``totalQueues`` agree; generations agree between brokers; every logic queue
        has items; its leader's broker knows it leads; no undecided (-1) leader item; the
        previous leader is fenced; every message in a physical queue of the topic on an open
        broker is accounted for by the mapping (:meth:`_unaccounted_messages`)."""
        out: list[Violation] = []
        with self._lock:
            physical = self._physical_queues(set(self._static_topics()))
            for topic in self._static_topics():
                details = self._details(topic)
                for b in self.mappings:
                    if b not in details:
                        has_config = b in self.topic_configs and self.topic_configs[b].get(topic) is not None
                        why = (" but has its topic config: the mapping must come first" if has_config
                               else " (create/remap incomplete)")
                        out.append(Violation(topic, None, b, "topicQueueMappingInfoMap",
                                             f"broker {b!r} has no mapping of {topic!r}{why}"))
                if len({d.epoch for d in details.values()}) > 1:
                    out.append(Violation(topic, None, None, "epoch", "brokers disagree on the epoch: "
                                         f"{ {b: d.epoch for b, d in details.items()} } (remap incomplete)"))
                try:
                    view = self._view(topic, details)
                except MappingError as exc:
                    out.append(Violation(topic, getattr(exc, "queue", None), getattr(exc, "broker", None),
                                         getattr(exc, "field", "mapping"), exc.message))
                    continue
                for b, configs in self.topic_configs.items():
                    need = physical_queue_count(view.queues, b)
                    config = configs.get(topic)
                    if b not in details or not need:
                        continue
                    if config is None:
                        out.append(Violation(topic, None, b, "topicConfigTable",
                                             f"broker {b!r} maps {need} physical queue(s) of {topic!r} but has no "
                                             "topic config (create/remap incomplete: re-run it)"))
                    elif config.queue_nums < need:
                        out.append(Violation(topic, None, b, "writeQueueNums",
                                             f"broker {b!r}'s topic config of {topic!r} counts {config.readQueueNums} "
                                             f"read / {config.writeQueueNums} write queues, its mapping {need} "
                                             "(create/remap incomplete: re-run it)"))
                for q in range(view.total_queues):
                    items = view.queues.get(q)
                    if not items:
                        out.append(Violation(topic, q, None, "hostedQueues", "no open broker maps this logic queue"))
                        continue
                    last = items[-1]
                    if not last.decided:
                        out.append(Violation(topic, q, last.bname, "logicOffset",
                                             f"leader gen {last.gen} is undecided (-1): remap incomplete"))
                    own = details.get(last.bname)
                    if last.bname in self.mappings and (own is None or own.leader(q) is None
                                                        or own.leader(q).gen != last.gen):
                        out.append(Violation(topic, q, last.bname, "hostedQueues",
                                             f"broker {last.bname!r} does not know it leads gen {last.gen}"))
                    if len(items) > 1:
                        prev = items[-2]
                        pd = details.get(prev.bname)
                        if prev.bname in self.mappings and pd is not None and (
                                pd.leader(q) is None or pd.leader(q).bname == prev.bname):
                            out.append(Violation(topic, q, prev.bname, "endOffset",
                                                 f"previous leader {prev.bname!r} is not fenced (remap incomplete)"))
                out.extend(self._unaccounted_messages(topic, view, physical))
        return out

    @gc_paused()  # bulk work over every logic queue (see static_topic.bulk)
    def restore_broker(self, broker: str, *, restore_lost: bool = False) -> list[dict[str, Any]]:
        """Give open broker ``broker`` back the static-topic mappings and topic configs it
        lost with its disk (after :meth:`open` with ``take_over=[broker]``), from what the
        other open brokers know: for every static topic, a detail of the current epoch
        holding the logic queues it should keep (:meth:`_hosted_by`), merged over what its
        file still has (nothing it has is dropped). The logic queues only its lost file knew
        are inferred (:func:`~tiered_core.static_topic.restore.infer_lost_items`) and, with
        ``restore_lost``, written too. Returns one entry per topic: ``topic``,
        ``from_peers`` (logic queues restored from the other brokers), ``lost`` (inferred:
        ``queue``, ``bname``, ``queueId``), ``restored`` (whether they were written),
        ``empty`` (lost logic queues whose physical queue holds nothing: not restorable),
        ``reason`` (why nothing could be inferred) and ``unmapped`` (logic queues no broker
        maps afterwards)."""
        self._open_store(broker)
        report: list[dict[str, Any]] = []
        with self._lock:
            topics = self._static_topics()
            physical = self._physical_queues(set(topics))
            for topic in topics:
                view = self._view(topic)
                mine = self.mappings[broker].get(topic)
                had = dict(mine.hostedQueues) if mine is not None else {}
                hosted = {**had, **self._hosted_by(broker, topic, view)}
                guess = infer_lost_items(broker, view.total_queues, view.queues,
                                         physical.get(broker, {}).get(topic, set()))
                if restore_lost:
                    hosted.update({q: [item] for q, item in guess.items.items()})
                epoch = max(view.epoch, mine.epoch if mine is not None else 0)
                if mine is None or hosted != had or epoch != mine.epoch:
                    self.mappings[broker].put(TopicQueueMappingDetail(topic=topic, totalQueues=view.total_queues,
                                                                      bname=broker, epoch=epoch, hostedQueues=hosted))
                # mapping before topic config, as create and remap write them
                count = physical_queue_count(hosted, broker)
                if count:
                    self.topic_configs[broker].ensure_queues(topic, count)
                mapped = set(view.queues) | (set(guess.items) if restore_lost else set())
                report.append({"topic": topic, "from_peers": sorted(set(hosted) - set(had) - set(guess.items)),
                               "lost": [{"queue": q, "bname": i.bname, "queueId": i.queueId}
                                        for q, i in sorted(guess.items.items())],
                               "restored": bool(restore_lost and guess.items), "empty": list(guess.empty),
                               "reason": guess.reason,
                               "unmapped": [q for q in range(view.total_queues) if q not in mapped]})
        return report

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

    def _unaccounted_messages(self, topic: str, view: TopicView,
                              physical: dict[str, dict[str, set[int]]]) -> list[Violation]:
        """Messages in physical queues of ``topic`` on open brokers that no generation maps: past
        a closed generation's ``endOffset``, or in a physical queue no generation uses (puts
        straight into the physical queue; readers of the logic queue never see them). The
        second check needs every generation: it runs only when each logic queue's leader (which
        keeps all its generations) is open. Lock held."""
        mapped: dict[tuple[str, int], tuple[int, LogicQueueMappingItem]] = {}
        for q, items in view.queues.items():
            for item in items:
                mapped[(item.bname, item.queueId)] = (q, item)
        complete = len(view.queues) == view.total_queues and all(
            items[-1].bname in self.stores for items in view.queues.values())
        out: list[Violation] = []
        for b, store in self.stores.items():
            for qid in sorted(physical.get(b, {}).get(topic, ())):
                hit = mapped.get((b, qid))
                hi = store.get_max_offset_in_queue(topic, qid)
                if hit is not None:
                    q, item = hit
                    if item.closed and hi > item.endOffset:
                        out.append(Violation(topic, q, b, "endOffset", (
                            f"physical queue {b}/{qid} (gen {item.gen} of logic queue {q}, fenced at "
                            f"{item.endOffset}) holds {hi - item.endOffset} message(s) at physical offsets "
                            f"[{item.endOffset}, {hi}) past its end, which no generation maps: put straight into "
                            "the physical queue, never read through the logic queue")))
                elif complete and hi > 0:
                    lo = store.get_min_offset_in_queue(topic, qid)
                    out.append(Violation(topic, None, b, "queueId", (
                        f"physical queue {b}/{qid} of static topic {topic!r} holds message(s) at physical offsets "
                        f"[{lo}, {hi}) but no generation of any logic queue maps it: put straight into the "
                        "physical queue, never read through a logic queue")))
        return out

    # -- data path --------------------------------------------------------------------------

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
            return self.put_message_to_broker(items[-1].bname, message, queue_id)

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
            readable, starts, ends = st.readable, st.starts, st.ends
            now = time.monotonic()
            # the earliest item's min, up to a second old: it only grows, so a stale value is
            # never above the true one (an offset below it is too small for sure; one that fell
            # below the true min meanwhile gets the physical queue's OFFSET_TOO_SMALL, answered
            # with a fresh min after the read); likewise the leader's max for a read below it
            if now - st.lo_at < 1.0:
                lo = st.lo
            else:
                lo = st.lo = self._min_offset(topic, queue_id, readable[0], fresh=True)
                st.lo_at = now
            if offset >= starts[-1]:  # the read may reach the leader: every acknowledged put visible
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
            if offset < lo:
                return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, next_begin_offset=lo, min_offset=lo,
                                        max_offset=hi)
            if offset >= hi:
                status = (GetMessageStatus.OFFSET_OVERFLOW_ONE if offset == hi
                          else GetMessageStatus.OFFSET_OVERFLOW_BADLY)
                return GetMessageResult(status, next_begin_offset=hi, min_offset=lo, max_offset=hi)
            idx = bisect.bisect_right(starts, offset) - 1
            item = readable[idx]
            nxt_item = readable[idx + 1] if idx + 1 < len(readable) else None
            end = ends[idx]
            if end is None:
                end = self._logic_end(topic, item) if nxt_item is not None else hi
            if offset >= end:  # a hole between generations: move on, no stall
                return GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, next_begin_offset=nxt_item.logicOffset
                                        if nxt_item is not None else hi, min_offset=lo, max_offset=hi)
            count = min(max_count, end - offset)
            delta = st.deltas[idx]
            store = st.stores[idx]
            reader = st.readers[idx]
        # one translation per batch: the physical offset of the first message, then the
        # delta onto each message's own offset (no per-message item lookup)
        res = (store.get_message(group, topic, item.queueId, offset - delta, count) if reader is None
               else reader.get_message(topic, item.queueId, offset - delta, count))
        messages: list[MessageExt] = res.messages
        if messages:
            if item.closed and messages[-1].queue_offset >= item.endOffset:
                messages = res.messages = [m for m in messages if m.queue_offset < item.endOffset]
        if messages:
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
            if nxt >= end and nxt_item is not None:
                nxt = nxt_item.logicOffset
            res.status, res.next_begin_offset, res.min_offset, res.max_offset = GetMessageStatus.FOUND, nxt, lo, hi
            return res
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

    def _min_of(self, topic: str, items: list[LogicQueueMappingItem]) -> int:
        first = items[0]
        if not first.decided:
            return -1  # the seed allows -1 only here and at put
        return max(first.logicOffset, first.to_logic(self._phys_min(topic, first)))

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
        end = LONG_MAX if end is None else end
        with self._lock:
            view = self._view(topic)
            by_phys = {(i.bname, i.queueId): (q, i) for q, items in view.queues.items() for i in items if i.decided}
        found: list[MessageExt] = []
        for broker in sorted({b for b, _ in by_phys}):
            store = self.stores.get(broker)
            hits = (store.query_message(topic, key, max_count, begin, end).messages if store is not None
                    else self._reader(broker).query_message(topic, key, max_count, begin, end))
            for m in hits:
                hit = by_phys.get((broker, m.queue_id))
                if hit is None:
                    continue
                q, item = hit
                if m.queue_offset < item.startOffset or (item.closed and m.queue_offset >= item.endOffset):
                    continue
                m.queue_offset, m.queue_id = item.to_logic(m.queue_offset), q
                found.append(m)
        found.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
        return QueryMessageResult(found[:max_count])

    # -- consumer offsets ---------------------------------------------------------------------

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``group``'s logic ``offset`` of logic queue ``queue_id`` on the queue's leader."""
        if offset < 0:
            raise IllegalParam(f"offset must be >= 0, got {offset}", offset=offset, topic=topic, queue=queue_id)
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
    queues = {q: _merge_items(topic, q, [(b, d.hostedQueues[q]) for b, d in details.items() if q in d.hostedQueues])
              for q in sorted({q for d in details.values() for q in d.hostedQueues})}
    return totals.pop(), queues


def load_cluster_configs(path: str | os.PathLike) -> list[StoreConfig]:
    """The broker configs of a cluster TOML file (see :meth:`Cluster.load`)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"cluster file {path!r} does not exist", key="cluster", source=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read cluster file {path!r}: {exc}", key="cluster", source=path) from None
    return cluster_configs_from_text(text, os.path.dirname(os.path.abspath(path)), source=path)


def cluster_configs_from_text(text: str, base_dir: str, *, source: str = "<cluster text>") -> list[StoreConfig]:
    """The broker configs of a cluster TOML text (see :meth:`Cluster.load`); relative paths
    resolve against ``base_dir``."""
    path = source
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot read cluster file {path!r}: {exc}", key="cluster", source=path) from None
    shared = doc.get("tiered", {})
    brokers = doc.get("broker")
    if not isinstance(shared, dict) or not isinstance(brokers, list) or not brokers:
        raise ConfigError(f"{path}: needs a [tiered] table and at least one [[broker]] table", key="broker",
                          source=path)
    out = []
    for i, table in enumerate(brokers):
        if not isinstance(table, dict) or "broker" not in table or "store_path" not in table:
            raise ConfigError(f"{path}: [[broker]] #{i + 1} needs 'broker' and 'store_path'", key="broker",
                              source=path)
        values = {**shared, **table}
        options = {**shared.get("options", {}), **table.get("options", {})}
        values["options"] = options
        out.append(StoreConfig.from_mapping(values, base_dir, source=f"{path} [[broker]] {table['broker']}"))
    return out
