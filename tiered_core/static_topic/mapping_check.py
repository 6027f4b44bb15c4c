"""The consistency check of static topics across the open brokers (``tiered static-topic
verify``): every broken rule of the mappings, topic configs and physical queues, one
:class:`Violation` each.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tiered_core.errors import MappingError
from tiered_core.static_topic.bulk import gc_paused
from tiered_core.static_topic.mapping import LogicQueueMappingItem
from tiered_core.static_topic.topic_config import TopicConfigStore
from tiered_core.static_topic.topic_view import MappingViews, TopicView, physical_queue_count


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


class MappingCheck(MappingViews):
    """:meth:`verify` of :class:`~tiered_core.static_topic.cluster.Cluster` (a part of it):
    reads only; an empty list means consistent."""

    topic_configs: dict[str, TopicConfigStore]

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
