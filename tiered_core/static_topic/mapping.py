"""The static-topic mapping model (seed 002, RIP-21), named and shaped as RocketMQ names it.

A *logic queue* of a static topic is a stack of physical queues in time: each
:class:`LogicQueueMappingItem` (one *generation*) says that logic offsets from
``logicOffset`` on are physical offsets from ``startOffset`` on of physical queue
``queueId`` of broker ``bname``, up to ``endOffset`` (exclusive; -1 while it is the
leader and still growing). The newest item is the *leader* (the writable queue).

:class:`TopicQueueMappingDetail` is one broker's view of one static topic (RocketMQ's
``TopicQueueMappingDetail``): ``bname`` is the broker the detail belongs to (a file copied
to another broker is recognised by it and refused), ``epoch`` and ``totalQueues`` are the
same on every broker of a consistent topic, and ``hostedQueues`` maps each logic queue this
broker leads (or led one generation ago, as a backup) to its items, oldest first.

JSON: the field names are RocketMQ's (``gen``, ``queueId``, ``bname``, ``logicOffset``,
``startOffset``, ``endOffset``, ``timeOfStart``, ``timeOfEnd``; ``topic``, ``scope``,
``totalQueues``, ``bname``, ``epoch``, ``dirty``, ``currIdMap``, ``hostedQueues``). Integer
map keys are written quoted (standard JSON, which fastjson reads into its Integer maps).

Every check raises :class:`~tiered_core.errors.MappingError` whose context names the
``topic``, the logic ``queue`` (or None) and the ``field`` at fault, plus the ``broker``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from tiered_core.errors import MappingError

#: RocketMQ's ``MixAll.METADATA_SCOPE_GLOBAL``.
SCOPE_GLOBAL = "__global__"
#: RocketMQ's ``MixAll.LOGICAL_QUEUE_MOCK_BROKER_NAME``: the broker name clients see for logic queues.
LOGICAL_QUEUE_MOCK_BROKER_NAME = "__logical_queue_broker__"


def _err(msg: str, *, topic: str | None, queue: int | None, field_name: str, broker: str | None,
         **extra: Any) -> MappingError:
    where = f"static topic {topic!r}" + (f" logic queue {queue}" if queue is not None else "")
    owner = f" (mapping of broker {broker!r})" if broker else ""
    return MappingError(f"{where}{owner}: {field_name}: {msg}", topic=topic, queue=queue, field=field_name,
                        broker=broker, **extra)


def _int(doc: Mapping[str, Any], key: str, default: int | None, *, topic: str | None, queue: int | None,
         broker: str | None) -> int:
    value = doc.get(key, default)
    if type(value) is int:  # the common case, checked first: a file of 100,000 queues parses 700,000 of them
        return value
    if isinstance(value, str):  # the seed's examples quote numbers
        try:
            value = int(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(f"must be an integer, got {value!r}", topic=topic, queue=queue, field_name=key, broker=broker)
    return value


@dataclass(frozen=True, slots=True)  # slots: one object per item, no __dict__ (100,000s of them)
class LogicQueueMappingItem:
    """One generation of a logic queue: a range of one physical queue.

    Contract: ``gen >= 0``; ``queueId >= 0``; ``startOffset >= 0``; ``logicOffset`` is >= 0,
    or -1 while undecided (the newest item during a remap, seed "切新禁旧再切新");
    ``endOffset`` is -1 (open: the leader) or >= ``startOffset`` (exclusive).
    """

    gen: int
    queueId: int
    bname: str
    logicOffset: int
    startOffset: int = 0
    endOffset: int = -1
    timeOfStart: int = -1
    timeOfEnd: int = -1

    @property
    def decided(self) -> bool:
        """False while ``logicOffset`` is -1 (then no offset of this item can be computed)."""
        return self.logicOffset >= 0

    @property
    def closed(self) -> bool:
        """True once ``endOffset`` is known (the item was fenced)."""
        return self.endOffset >= 0

    def logic_end(self) -> int:
        """The logic offset just past this item's range (``endOffset`` must be known and
        ``logicOffset`` decided; otherwise :class:`MappingError`)."""
        if not self.decided or not self.closed:
            raise MappingError(f"item gen {self.gen} on {self.bname!r} has no logic end (logicOffset "
                               f"{self.logicOffset}, endOffset {self.endOffset})", topic=None, queue=None,
                               field="endOffset" if self.decided else "logicOffset", broker=self.bname)
        return self.logicOffset + (self.endOffset - self.startOffset)

    def to_logic(self, physical: int) -> int:
        """The logic offset of physical offset ``physical`` of this item's queue."""
        if not self.decided:
            raise MappingError(f"item gen {self.gen} on {self.bname!r} has an undecided logicOffset (-1): "
                               "no logic offset can be computed from it", topic=None, queue=None,
                               field="logicOffset", broker=self.bname)
        return self.logicOffset + (physical - self.startOffset)

    def to_physical(self, logic: int) -> int:
        """The physical offset of logic offset ``logic`` (the item must be decided)."""
        if not self.decided:
            raise MappingError(f"item gen {self.gen} on {self.bname!r} has an undecided logicOffset (-1)",
                               topic=None, queue=None, field="logicOffset", broker=self.bname)
        return self.startOffset + (logic - self.logicOffset)

    def to_json(self) -> dict[str, Any]:
        return {"bname": self.bname, "endOffset": self.endOffset, "gen": self.gen, "logicOffset": self.logicOffset,
                "queueId": self.queueId, "startOffset": self.startOffset, "timeOfEnd": self.timeOfEnd,
                "timeOfStart": self.timeOfStart}

    @classmethod
    def from_json(cls, doc: Any, *, topic: str | None = None, queue: int | None = None,
                  broker: str | None = None) -> "LogicQueueMappingItem":
        """Parse one item; missing optional fields take RocketMQ's defaults (-1, 0)."""
        if type(doc) is not dict and not isinstance(doc, Mapping):  # dict first: the ABC check is slow
            raise _err(f"an item must be an object, got {doc!r}", topic=topic, queue=queue, field_name="item",
                       broker=broker)
        bname = doc.get("bname")
        if not isinstance(bname, str) or not bname:
            raise _err(f"must be a broker name, got {bname!r}", topic=topic, queue=queue, field_name="bname",
                       broker=broker)
        kw = dict(topic=topic, queue=queue, broker=broker)
        item = cls(gen=_int(doc, "gen", None, **kw), queueId=_int(doc, "queueId", None, **kw), bname=bname,
                   logicOffset=_int(doc, "logicOffset", None, **kw), startOffset=_int(doc, "startOffset", 0, **kw),
                   endOffset=_int(doc, "endOffset", -1, **kw), timeOfStart=_int(doc, "timeOfStart", -1, **kw),
                   timeOfEnd=_int(doc, "timeOfEnd", -1, **kw))
        item.check(topic=topic, queue=queue, broker=broker)
        return item

    def check(self, *, topic: str | None, queue: int | None, broker: str | None) -> None:
        """Raise :class:`MappingError` when a field is out of its range (see the class contract)."""
        kw = dict(topic=topic, queue=queue, broker=broker)
        if self.gen < 0:
            raise _err(f"must be >= 0, got {self.gen}", field_name="gen", **kw)
        if self.queueId < 0:
            raise _err(f"must be >= 0, got {self.queueId}", field_name="queueId", **kw)
        if self.logicOffset < -1:
            raise _err(f"must be >= 0 or -1 (undecided), got {self.logicOffset}", field_name="logicOffset", **kw)
        if self.startOffset < 0:
            raise _err(f"must be >= 0, got {self.startOffset}", field_name="startOffset", **kw)
        if self.endOffset != -1 and self.endOffset < self.startOffset:
            raise _err(f"must be -1 or >= startOffset {self.startOffset}, got {self.endOffset}",
                       field_name="endOffset", **kw)


def check_items(topic: str, queue: int, items: list[LogicQueueMappingItem], *, broker: str | None) -> None:
    """Check one logic queue's items: not empty; strictly increasing ``gen``; increasing
    ``logicOffset`` (an item starts where the previous one ends, or later, when both are
    known); no physical queue (``bname``, ``queueId``) used twice; ``logicOffset`` -1 and
    ``endOffset`` -1 only on the newest item (and on the one before it while the newest is
    undecided, mid-remap). Raises :class:`MappingError` naming the field."""
    kw = dict(topic=topic, queue=queue, broker=broker)
    if not items:
        raise _err("a hosted logic queue needs at least one item", field_name="hostedQueues", **kw)
    seen: dict[tuple[str, int], int] = {}
    for i, item in enumerate(items):
        item.check(**kw)
        last = i == len(items) - 1
        if not last and not item.decided:
            raise _err(f"-1 (undecided) is allowed only on the newest item, found on gen {item.gen}",
                       field_name="logicOffset", **kw)
        # the one exception: during a remap the old leader's end is unknown until the new
        # leader's logicOffset is decided (seed: write new leader, fence old, then decide)
        remap_pending = i == len(items) - 2 and not items[-1].decided
        if not last and not item.closed and not remap_pending:
            raise _err(f"gen {item.gen} is not the newest item but has no endOffset (-1)",
                       field_name="endOffset", **kw)
        key = (item.bname, item.queueId)
        if key in seen:
            raise _err(f"physical queue {item.bname}/{item.queueId} is used by gen {seen[key]} and gen {item.gen}",
                       field_name="queueId", **kw)
        seen[key] = item.gen
        if i:
            prev = items[i - 1]
            if item.gen <= prev.gen:
                raise _err(f"must increase: gen {item.gen} follows gen {prev.gen}", field_name="gen", **kw)
            if item.decided and item.logicOffset < prev.logic_end():
                raise _err(f"gen {item.gen} starts at {item.logicOffset}, inside gen {prev.gen} "
                           f"(which ends at {prev.logic_end()})", field_name="logicOffset", **kw)


@dataclass
class TopicQueueMappingDetail:
    """One broker's mapping of one static topic (see the module doc).

    Contract (checked by :meth:`check`): ``bname`` non-empty; ``totalQueues >= 1``; every
    hosted logic queue id in ``[0, totalQueues)`` with valid items (:func:`check_items`);
    ``currIdMap`` maps logic queue id -> physical queue id for the logic queues whose leader
    (newest item) is on ``bname`` (it is derived by :meth:`rebuild_id_map`).
    """

    topic: str
    totalQueues: int
    bname: str
    epoch: int
    scope: str = SCOPE_GLOBAL
    dirty: bool = False
    currIdMap: dict[int, int] = field(default_factory=dict)
    hostedQueues: dict[int, list[LogicQueueMappingItem]] = field(default_factory=dict)

    def leader(self, queue: int) -> LogicQueueMappingItem | None:
        """The newest item of logic queue ``queue`` as this broker knows it (None: not hosted)."""
        items = self.hostedQueues.get(queue)
        return items[-1] if items else None

    def rebuild_id_map(self) -> None:
        """Recompute ``currIdMap`` from ``hostedQueues``."""
        self.currIdMap = {q: items[-1].queueId for q, items in sorted(self.hostedQueues.items())
                          if items and items[-1].bname == self.bname}

    def copy(self) -> "TopicQueueMappingDetail":
        return dataclasses.replace(self, currIdMap=dict(self.currIdMap),
                                   hostedQueues={q: list(v) for q, v in self.hostedQueues.items()})

    def check(self, expected_broker: str | None = None) -> None:
        """Raise :class:`MappingError` on the first rule broken (see the class contract);
        ``expected_broker``: the broker this detail must belong to (a copy from another
        broker is refused)."""
        kw = dict(topic=self.topic, queue=None, broker=self.bname)
        if not self.bname:
            raise _err("must name the broker the mapping belongs to", field_name="bname", **kw)
        if expected_broker is not None and self.bname != expected_broker:
            raise _err(f"belongs to broker {self.bname!r}, not to {expected_broker!r}: a mapping copied from "
                       "another broker is never used", field_name="bname", expected=expected_broker, **kw)
        if self.totalQueues < 1:
            raise _err(f"must be >= 1, got {self.totalQueues}", field_name="totalQueues", **kw)
        if self.epoch < 0:
            raise _err(f"must be >= 0, got {self.epoch}", field_name="epoch", **kw)
        for queue, items in self.hostedQueues.items():
            if not 0 <= queue < self.totalQueues:
                raise _err(f"logic queue id {queue} is outside [0, {self.totalQueues})", field_name="hostedQueues",
                           topic=self.topic, queue=queue, broker=self.bname)
            check_items(self.topic, queue, items, broker=self.bname)

    def to_json(self) -> dict[str, Any]:
        return {
            "bname": self.bname,
            "currIdMap": {str(k): v for k, v in sorted(self.currIdMap.items())},
            "dirty": self.dirty,
            "epoch": self.epoch,
            "hostedQueues": {str(q): [i.to_json() for i in items] for q, items in sorted(self.hostedQueues.items())},
            "scope": self.scope,
            "topic": self.topic,
            "totalQueues": self.totalQueues,
        }

    @classmethod
    def from_json(cls, doc: Any, *, topic: str | None = None,
                  expected_broker: str | None = None) -> "TopicQueueMappingDetail":
        """Parse and :meth:`check` one detail (``topic``: the key it was stored under)."""
        if not isinstance(doc, Mapping):
            raise _err(f"must be an object, got {type(doc).__name__}", topic=topic, queue=None,
                       field_name="topicQueueMappingInfoMap", broker=expected_broker)
        name = doc.get("topic", topic)
        if not isinstance(name, str) or (topic is not None and name != topic):
            raise _err(f"the detail names topic {name!r} but is stored under {topic!r}", topic=topic, queue=None,
                       field_name="topic", broker=expected_broker)
        bname = doc.get("bname")
        if not isinstance(bname, str):
            raise _err(f"must be a broker name, got {bname!r}", topic=name, queue=None, field_name="bname",
                       broker=expected_broker)
        kw = dict(topic=name, queue=None, broker=bname)
        hosted_doc = doc.get("hostedQueues") or {}
        if not isinstance(hosted_doc, Mapping):
            raise _err("must be an object", field_name="hostedQueues", **kw)
        hosted: dict[int, list[LogicQueueMappingItem]] = {}
        for key, items in hosted_doc.items():
            try:
                q = int(key)
            except (TypeError, ValueError):
                raise _err(f"logic queue id {key!r} is not an integer", field_name="hostedQueues", **kw) from None
            if not isinstance(items, list):
                raise _err("must be a list of items", field_name="hostedQueues", topic=name, queue=q, broker=bname)
            hosted[q] = [LogicQueueMappingItem.from_json(i, topic=name, queue=q, broker=bname) for i in items]
        id_doc = doc.get("currIdMap") or {}
        if not isinstance(id_doc, Mapping):
            raise _err("must be an object", field_name="currIdMap", **kw)
        try:
            curr = {int(k): int(v) for k, v in id_doc.items()}
        except (TypeError, ValueError):
            raise _err(f"must map integers to integers, got {dict(id_doc)!r}", field_name="currIdMap", **kw) from None
        dirty = doc.get("dirty", False)
        scope = doc.get("scope", SCOPE_GLOBAL)
        detail = cls(topic=name, totalQueues=_int(doc, "totalQueues", None, **kw), bname=bname,
                     epoch=_int(doc, "epoch", None, **kw), scope=scope if isinstance(scope, str) else SCOPE_GLOBAL,
                     dirty=bool(dirty), currIdMap=curr, hostedQueues=hosted)
        detail.check(expected_broker)
        return detail
