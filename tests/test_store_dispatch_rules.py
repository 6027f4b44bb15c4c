"""When the dispatcher copies: group commit by count, by age, by size, and on force."""

from __future__ import annotations

import math

from store_workload import memory_options, small_config, tiered_commit
from tiered_core import Message
from tiered_core.access.tiered_store import TieredMessageStore

TOPIC = "orders"


def put_same_size(store: TieredMessageStore, n: int, size: int = 1000) -> None:
    """``n`` messages whose stored sizes are all equal."""
    for i in range(n):
        store.put_message(Message(topic=TOPIC, body=bytes([i % 251]) * size, keys=[f"k{i:05d}"]), 0)


def test_groups_wait_for_their_count_or_their_age_unless_forced(tmp_path, request):
    config = small_config(tmp_path, "memory", memory_options(request),
                          group_commit_count=100, group_commit_interval_ms=3_600_000)
    with TieredMessageStore.open(config) as store:
        put_same_size(store, 250)
        stats = store.dispatch(force=False)
        # two full groups of 100 go; the last 50 are neither enough nor old enough
        assert (stats.messages, stats.groups, tiered_commit(store, TOPIC, 0)) == (200, 2, 200)
        assert store.dispatch(force=False).messages == 0
        store.dispatcher.group_commit_interval_ms = 0  # now the oldest waiting message is old enough
        assert store.dispatch(force=False).messages == 50
        assert tiered_commit(store, TOPIC, 0) == 250
        put_same_size(store, 30)
        assert store.dispatch(force=True).messages == 30  # force ignores count and age


def test_a_group_stays_under_the_size_limit(tmp_path, request):
    limit = 10_000
    config = small_config(tmp_path, "memory", memory_options(request), group_commit_size=limit)
    with TieredMessageStore.open(config) as store:
        put_same_size(store, 95)
        store.local.reput()
        stored = store.local.get_messages(TOPIC, 0, 0, 1)[0].store_size
        per_group = math.ceil(limit / stored) - 1  # the most messages whose total stays under the limit
        assert per_group * stored < limit <= (per_group + 1) * stored
        stats = store.dispatch(force=True)
        assert stats.messages == 95 and stats.groups == math.ceil(95 / per_group)
