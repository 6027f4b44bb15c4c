"""What a broker that lost its disk can get back of its static-topic mappings.

A broker's ``topicQueueMapping.json`` lives in its ``store_path``; with the disk it is gone.
Most of it is known elsewhere: each logic queue is kept by the brokers of its two newest
generations (its leader keeps them all), so every logic queue that was ever moved is in
another broker's file, and :meth:`~tiered_core.static_topic.cluster.Cluster.restore_broker`
copies that back. What no other broker knows is a logic queue that was never moved from
the lost broker: one generation, ``gen`` 0, ``logicOffset`` 0, ``startOffset`` 0, open --
everything known but its physical queue id.

:func:`infer_lost_items` infers those ids from how ``create`` allocates them -- on each
broker, one block of consecutive ids, in logic-queue order, over the logic queues whose
generation 0 it hosts (the first block of a new topic starts at 0) -- and accepts the
inference only when every fact at hand agrees with it: the generation-0 ids the other
brokers still know (the logic queues moved away since) fix the block's start, no inferred
id is used by a known generation, and every physical queue of the topic that the broker
holds (in the tier after a lost disk) and no generation maps is one of the inferred ones.
Otherwise it infers nothing and says why. Even then, only a logic queue whose inferred
physical queue holds data is restored (the data is the evidence); one whose queue holds
nothing (its messages never left the lost disk) is listed, not mapped.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiered_core.static_topic.mapping import LogicQueueMappingItem


@dataclass(frozen=True)
class Inference:
    """The inferred generation-0 items of the lost logic queues whose physical queue holds
    data; ``empty``: the lost logic queues whose inferred physical queue holds nothing (not
    restored); ``reason``: why nothing could be inferred (then both are empty)."""

    items: dict[int, LogicQueueMappingItem]
    empty: tuple[int, ...] = ()
    reason: str | None = None


def infer_lost_items(broker: str, total_queues: int, queues: dict[int, list[LogicQueueMappingItem]],
                     held: set[int]) -> Inference:
    """The generation-0 items on ``broker`` of the logic queues in ``[0, total_queues)`` that
    ``queues`` (the merged mapping of the brokers that still have theirs) lacks; ``held``:
    the physical queue ids of the topic that ``broker`` holds (local store and tier). See
    the module doc for when the inference is accepted."""
    lost = [q for q in range(total_queues) if q not in queues]
    if not lost:
        return Inference({})
    known_gen0 = {q: items[0].queueId for q, items in queues.items()
                  if items and items[0].gen == 0 and items[0].bname == broker}
    used = {i.queueId for items in queues.values() for i in items if i.bname == broker}
    block = sorted(set(known_gen0) | set(lost))  # the logic queues whose generation 0 is on broker
    rank = {q: r for r, q in enumerate(block)}
    starts = {qid - rank[q] for q, qid in known_gen0.items()}
    if len(starts) > 1:
        return Inference({}, reason=f"the generation-0 ids other brokers know on {broker!r} "
                                    f"({dict(sorted(known_gen0.items()))}) are not one block allocated in "
                                    "logic-queue order")
    start = starts.pop() if starts else 0
    inferred = {q: start + rank[q] for q in lost}
    clash = sorted(set(inferred.values()) & used)
    if clash:
        return Inference({}, reason=f"inferred physical queue ids {clash} of {broker!r} are used by known "
                                    "generations")
    unexplained = sorted(held - used - set(inferred.values()))
    if unexplained:
        return Inference({}, reason=f"{broker!r} holds physical queues {unexplained} that neither a known "
                                    "generation nor the inferred ones map")
    return Inference({q: LogicQueueMappingItem(gen=0, queueId=qid, bname=broker, logicOffset=0, startOffset=0)
                      for q, qid in inferred.items() if qid in held},
                     empty=tuple(q for q, qid in inferred.items() if qid not in held))
