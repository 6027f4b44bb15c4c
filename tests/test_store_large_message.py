"""A 5 MiB message is tiered and read back with the default 4 MiB group commit size.

RocketMQ #10998: the dispatcher checked the group size before appending, so a message
of at least ``tieredStoreGroupCommitSize`` was never dispatched and blocked its queue.
Here it goes alone in its own group, on every driver (azure splits the write into
several append blocks of at most 4 MiB).
"""

from __future__ import annotations

import random

import pytest

from store_workload import DRIVERS, Sent, Workload, assert_exactly_once, backend_options, small_config
from tiered_core import Message
from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.config import StoreConfig
from tiered_core.errors import IllegalParam

MiB = 1 << 20
BIG = 5 * MiB
TOPIC = "big"


@pytest.fixture(params=DRIVERS)
def driver_setup(request, tmp_path):
    return request.param, backend_options(request, request.param, tmp_path)


def put_mixed(store: TieredMessageStore, workload: Workload, sizes: list[int]) -> list[bytes]:
    """Put messages of ``sizes`` on queue 0, recording them in ``workload``; returns the bodies."""
    rng = random.Random(len(sizes))
    bodies = [rng.randbytes(n) for n in sizes]
    sent = workload.sent.setdefault((TOPIC, 0), [])
    for body in bodies:
        key = f"{TOPIC}-0-{len(sent)}"
        res = store.put_message(Message(topic=TOPIC, body=body, keys=[key], tags="tag0"), 0)
        sent.append(Sent(body, key, "tag0", res.queue_offset, res.commitlog_offset, res.store_timestamp))
    return bodies


def test_five_mib_messages_are_dispatched_alone_and_read_back(driver_setup, tmp_path):
    driver, options = driver_setup
    config = small_config(tmp_path, driver, options, local_commit_log_file_size=32 * MiB,
                          commit_log_max_size=64 * MiB, read_ahead_cache_bytes=64 * MiB)
    assert config.group_commit_size == StoreConfig().group_commit_size == 4 * MiB  # the default
    workload = Workload(topics=(TOPIC,), queues=1)
    with TieredMessageStore.open(config) as store:
        put_mixed(store, workload, [100, 200, BIG, BIG, 300])
        stats = store.dispatch(force=True)
        assert stats.errors == [] and stats.messages == 5
        # [100, 200] | [BIG] | [BIG] | [300]: a group stays under 4 MiB unless it is one message
        assert stats.groups == 4
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)
        got = store.get_message("g", TOPIC, 0, 3, 1)
        assert got.found and got.tier is StoreTier.TIERED and got.messages[0].body == workload.sent[(TOPIC, 0)][3].body


def test_a_message_larger_than_the_read_ahead_cache_is_read_directly(tmp_path):
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered")}, storage_level="FORCE",
                          local_commit_log_file_size=16 * MiB, commit_log_max_size=64 * MiB,
                          read_ahead_cache_bytes=4 * MiB)
    workload = Workload(topics=(TOPIC,), queues=1)
    with TieredMessageStore.open(config) as store:
        bodies = put_mixed(store, workload, [10, BIG, 20])
        store.dispatch(force=True)
        got = store.get_message("g", TOPIC, 0, 1, 4)
        assert (got.status, got.tier) == (GetMessageStatus.FOUND, StoreTier.TIERED)
        assert got.messages[0].body == bodies[1] and got.next_begin_offset > 1
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)


def test_a_message_larger_than_a_tiered_segment_is_refused_at_put(tmp_path):
    """It could never fit a tiered segment (it would block its queue forever): the put is
    refused with an error naming the limit, nothing is stored, the queue goes on."""
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered")}, storage_level="FORCE",
                          local_commit_log_file_size=16 * MiB, commit_log_max_size=1 * MiB)
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic=TOPIC, body=b"a" * 10), 0)
        with pytest.raises(IllegalParam, match="at most"):
            store.put_message(Message(topic=TOPIC, body=b"b" * (2 * MiB)), 0)
        store.put_message(Message(topic=TOPIC, body=b"c" * 20), 0)
        store.dispatch(force=True)
        assert store.flat_files.get(TOPIC, 0).consume_queue_commit_offset() == 2
        got = store.get_message("g", TOPIC, 0, 0, 8)
        assert got.tier is StoreTier.TIERED and [m.body[:1] for m in got.messages] == [b"a", b"c"]
