"""Cluster.get_message's per-logic-queue read state (bounds cached per mapping view) and
the local store's lock-free caught-up reput: every answer stays what a fresh computation
gives -- a put is readable at once, a remap or a closed broker is seen at once."""

from __future__ import annotations

from tiered_core import Message
from tiered_core.access.results import GetMessageStatus
from tiered_core.static_topic import Cluster

TOPIC = "paths"


def put(cluster, n, tag):
    return [cluster.put_message(Message(topic=TOPIC, body=b"%s-%d" % (tag, i)), 0).queue_offset for i in range(n)]


def test_leader_reads_see_every_put_at_once(configs):
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 1, ["a"])
        for i in range(20):
            offset = put(cluster, 1, b"x")[0]
            res = cluster.get_message("g", TOPIC, 0, offset, 32)  # cached max must not hide the put
            assert res.status is GetMessageStatus.FOUND
            assert [m.queue_offset for m in res.messages] == [offset]
            assert res.max_offset == offset + 1
            over = cluster.get_message("g", TOPIC, 0, offset + 1, 32)
            assert over.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and over.max_offset == offset + 1
        # a put straight into the leader's store (another queue) moves the mark: still right
        cluster.stores["a"].put_message(Message(topic="other", body=b"o"), 0)
        assert cluster.get_message("g", TOPIC, 0, 20, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE


def test_remap_and_closed_broker_rebuild_the_read_state(configs, tmp_path):
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 1, ["a"])
        put(cluster, 10, b"a")
        assert cluster.get_message("g", TOPIC, 0, 0, 32).max_offset == 10
        cluster.remap_static_topic(TOPIC, ["b"])
        assert put(cluster, 5, b"b") == list(range(10, 15))
        res = cluster.get_message("g", TOPIC, 0, 0, 32)
        assert [m.queue_offset for m in res.messages] == list(range(10)) and res.next_begin_offset == 10
        # a read below the leader may report a max up to 1 s old: any value the queue had since
        # the remap (on a loaded machine the leader's reput may have made only some puts visible)
        assert 10 <= res.max_offset <= 15
        res = cluster.get_message("g", TOPIC, 0, 10, 32)
        assert res.max_offset == 15  # a read at the leader: fresh, the old view's bound not reused
        assert [(m.queue_offset, m.queue_id, m.body) for m in res.messages] == [
            (10 + i, 0, b"b-%d" % i) for i in range(5)]
        cluster.dispatch(force=True)
        cluster.close_broker("a")
        res = cluster.get_message("g", TOPIC, 0, 0, 32)  # now from the tier, same answer
        assert [m.body for m in res.messages] == [b"a-%d" % i for i in range(10)]
        assert res.max_offset == 15


def test_bad_arguments_still_raise_after_the_topic_was_served(configs):
    import pytest

    from tiered_core.errors import IllegalParam, MappingError
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 1, ["a"])
        put(cluster, 1, b"x")
        assert cluster.get_message("g", TOPIC, 0, 0, 32).status is GetMessageStatus.FOUND
        with pytest.raises(IllegalParam):
            cluster.get_message("g", TOPIC, 1, 0, 32)
        with pytest.raises(IllegalParam):
            cluster.get_message("g", TOPIC, 0, -1, 32)
        with pytest.raises(IllegalParam):
            cluster.get_message("g", TOPIC, 0, 0, 0)
        with pytest.raises((IllegalParam, MappingError)):
            cluster.get_message("g", "bad topic!", 0, 0, 32)


def test_caught_up_reput_returns_at_once_and_picks_up_new_puts(configs):
    with Cluster.open(configs) as cluster:
        local = cluster.stores["a"].local
        local.reput()
        assert local.reput() == 0 and local.reput_offset == local.commit_log.max_offset
        before = local.commit_log.max_offset
        cluster.stores["a"].put_message(Message(topic="t", body=b"x"), 0)
        local.reput()  # (the store's own reput thread may have taken the put first, on a loaded machine)
        assert local.commit_log.max_offset > before and local.reput_offset == local.commit_log.max_offset
        assert local.reput() == 0


def test_a_min_that_moved_under_the_cached_bounds_is_reported_at_once(tmp_path):
    """The earliest item's min is cached for up to a second; an offset that local retention
    removed meanwhile still gets OFFSET_TOO_SMALL with the fresh min, never a retry loop."""
    from static_topic_helpers import broker_configs

    configs = broker_configs(tmp_path, storage_level="DISABLE", local_commit_log_file_size=64 << 10)
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 1, ["a"])
        for i in range(200):
            cluster.put_message(Message(topic=TOPIC, body=b"x" * 1024), 0)
        first = cluster.get_message("g", TOPIC, 0, 0, 8)  # caches the min (0)
        assert first.status is GetMessageStatus.FOUND and first.min_offset == 0
        cluster.dispatch(force=True)
        assert cluster.delete_expired_local(1 << 50) > 0
        fresh_min = cluster.get_min_offset_in_queue(TOPIC, 0)
        assert fresh_min > 8
        res = cluster.get_message("g", TOPIC, 0, 8, 8)
        assert res.status is GetMessageStatus.OFFSET_TOO_SMALL, res
        assert res.next_begin_offset == res.min_offset == fresh_min
        again = cluster.get_message("g", TOPIC, 0, fresh_min, 8)
        assert again.status is GetMessageStatus.FOUND and again.messages[0].queue_offset == fresh_min
