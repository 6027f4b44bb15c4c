"""Static-topic admin: create, remap, trim, status and restore of a broker's mappings.

Remap follows the seed's high-availability order ("切新禁旧再切新"), each step a durable
mapping write: (1) the new leader gets the new item with ``logicOffset`` -1 (undecided),
then (mapping before topic config) its ``topics.json`` counts the new physical queue;
(2) the old leader is fenced: its file gets the new item too, and the old item's
``endOffset`` (its physical max at that moment, taken under the cluster lock so no put
races it); the old leader's committed consumer offsets of the logic queue are carried to
the new leader's ``consumerOffset.json`` (never lowering one there); (3) the new leader's
item gets ``logicOffset`` = the old item's logic end (so logic offsets stay contiguous: no
skip at a generation boundary); (4) every broker's file gets the new ``epoch``, and
brokers that are neither leader nor previous leader of a logic queue drop it once its
data has left their local store (the leader keeps every generation;
:meth:`StaticTopicAdmin.trim_static_mappings` drops it later, after any local retention
run that deletes files, a broker's own background one included). A crash between steps
leaves a state that :meth:`~tiered_core.static_topic.mapping_check.MappingCheck.verify`
reports; running the same remap again finishes it.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Sequence

from tiered_core.codec.naming import cluster_dir, validate_topic
from tiered_core.common import now_ms
from tiered_core.errors import IllegalParam, MappingError, StateConflict
from tiered_core.static_topic.bulk import gc_paused
from tiered_core.static_topic.consumer_offsets import ConsumerOffsetStore
from tiered_core.static_topic.generation_bounds import GenerationBounds
from tiered_core.static_topic.mapping import LogicQueueMappingItem, TopicQueueMappingDetail
from tiered_core.static_topic.restore import infer_lost_items
from tiered_core.static_topic.topic_config import TopicConfigStore
from tiered_core.static_topic.topic_view import TopicView, physical_queue_count

#: The most logic queues a static topic may have: each is a physical queue on its broker and
#: an entry in every broker's mapping file (and a bound keeps a typo from exhausting memory).
MAX_TOTAL_QUEUES = 65536


class StaticTopicAdmin(GenerationBounds):
    """The admin steps of :class:`~tiered_core.static_topic.cluster.Cluster` (a part of it,
    sharing its state and its lock). Each step writes mappings before topic configs and
    is idempotent: re-running one after a crash finishes it. Errors: :class:`IllegalParam`
    for bad input, :class:`MappingError` for a mapping that disagrees with the request,
    :class:`StateConflict` for a topic that is already a normal one."""

    offsets: dict[str, ConsumerOffsetStore]
    topic_configs: dict[str, TopicConfigStore]

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
        if isinstance(total_queues, bool) or not isinstance(total_queues, int) \
                or not 1 <= total_queues <= MAX_TOTAL_QUEUES:
            raise IllegalParam(f"total_queues must be an integer from 1 to {MAX_TOTAL_QUEUES}, got {total_queues!r}",
                               topic=topic, field="total_queues")
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
                if len(queues) < total_queues:
                    self._check_create_rerun(topic, brokers, queues, total_queues)
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

    def _check_create_rerun(self, topic: str, brokers: list[str], queues: dict[int, list[LogicQueueMappingItem]],
                            total_queues: int) -> None:
        """A re-run of create maps the logic queues no open broker maps as new (generation 0,
        logic offset 0). That finishes a create a crash cut short, and nothing else: a
        logic queue whose broker was dropped from the cluster has handed out logic offsets,
        and mapped again it would hand them out a second time. Refused (MappingError) when
        the re-run names other brokers or another order than the create did (what ``takeover
        --restore-lost-queues`` infers physical queue ids from), or when the tier holds
        this topic under a broker that is not open."""
        for q, items in sorted(queues.items()):
            expected = brokers[q % len(brokers)]
            if len(items) == 1 and items[0].gen == 0 and items[0].bname != expected:
                raise MappingError(
                    f"static topic {topic!r} was created with logic queue {q} on broker {items[0].bname!r}, but "
                    f"this create puts it on {expected!r}: re-run create with the broker list it was first run "
                    "with, in the same order", topic=topic, queue=q, field="brokers", broker=items[0].bname)
        missing = [q for q in range(total_queues) if q not in queues]
        elsewhere = self._tiered_elsewhere(topic)
        if elsewhere:
            raise MappingError(
                f"static topic {topic!r}: logic queues {missing} have no mapping on any open broker, and the tier "
                f"holds the topic under broker(s) {elsewhere} that this cluster does not open: their generations "
                "have handed out logic offsets, which a new mapping would hand out again. Add those brokers back "
                "to the cluster file (a broker that lost its disk: `tiered static-topic takeover --cluster FILE "
                "--broker B`)", topic=topic, queue=missing[0], field="hostedQueues", broker=elsewhere[0])

    def _tiered_elsewhere(self, topic: str) -> list[str]:
        """The brokers not open here under whose tier prefix ``topic`` has objects."""
        store = next(iter(self.stores.values()))
        cluster = store.config.cluster
        top = cluster_dir(cluster) + "/"
        found: set[str] = set()
        for path, _size in store.driver.list(top):
            parts = path[len(top):].split("/")
            if len(parts) > 2 and parts[1] == topic and parts[0] not in self.stores:
                found.add(parts[0])
        return sorted(found)

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
                                   "broker: open the broker(s) that hosted them (a broker dropped from the "
                                   "cluster file: add it back; one that lost its disk: `tiered static-topic "
                                   "takeover --cluster FILE --broker B`); a create a crash cut short: re-run "
                                   "create with the same brokers, in the same order", topic=topic,
                                   queue=missing[0], field="hostedQueues", broker=None)
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
