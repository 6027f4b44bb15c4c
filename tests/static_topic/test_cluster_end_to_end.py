"""The core static-topic scenario on the POSIX driver with three brokers (issue 12).

Create 8 logic queues on brokers a and b; put messages; remap to b and c; put more;
dispatch; close broker a and delete its whole store_path; then every acknowledged message
reads back from logic offset 0 of its logic queue exactly once, in put order, with
contiguous logic offsets -- the generation on the gone broker served from the tier only.
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest
from static_topic_helpers import broker_configs, read_logic_queue
from store_workload import backend_options

from tiered_core import Message
from tiered_core.static_topic import Cluster

TOPIC = "orders"
QUEUES = 8


def put_batch(cluster, start, count, acked):
    for i in range(start, start + count):
        q = i % QUEUES
        r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i, keys=[f"k-{i}"]), q)
        assert r.ok
        acked[q].append((r.queue_offset, b"m-%d" % i))


@pytest.mark.parametrize("driver", ["posix", "gcs"])
def test_create_remap_drop_broker_reads_every_message_once(request, tmp_path, driver):
    configs = broker_configs(tmp_path, driver=driver, options=backend_options(request, driver, tmp_path))
    acked = {q: [] for q in range(QUEUES)}
    cluster = Cluster.open(configs)
    try:
        status = cluster.create_static_topic(TOPIC, QUEUES, ["a", "b"])
        assert [q["leader"]["bname"] for q in status["queues"]] == ["a", "b"] * 4
        assert cluster.verify() == []
        put_batch(cluster, 0, 12_000, acked)
        cluster.dispatch(force=True)
        # a producer thread keeps putting while the remap runs
        producer = threading.Thread(target=put_batch, args=(cluster, 12_000, 2_000, acked))
        producer.start()
        status = cluster.remap_static_topic(TOPIC, ["b", "c"])
        producer.join()
        assert {q["leader"]["bname"] for q in status["queues"]} == {"b", "c"}
        assert cluster.verify() == []
        put_batch(cluster, 14_000, 6_000, acked)
        cluster.dispatch(force=True)
        a_path = configs[0].store_path
        cluster.close_broker("a")
        shutil.rmtree(a_path)
        assert not os.path.exists(a_path)

        total = 0
        for q in range(QUEUES):
            # acknowledged logic offsets were contiguous from 0 at put time
            assert [o for o, _ in acked[q]] == list(range(len(acked[q])))
            got, _, end = read_logic_queue(cluster, TOPIC, q, 97)
            assert [m.queue_offset for m in got] == list(range(len(acked[q])))
            assert [m.body for m in got] == [b for _, b in acked[q]]
            assert {m.queue_id for m in got} == {q}
            assert end.max_offset == len(acked[q]) == cluster.get_max_offset_in_queue(TOPIC, q)
            assert cluster.get_min_offset_in_queue(TOPIC, q) == 0
            total += len(got)
        assert total == 20_000
        print(f"\n{total} acknowledged messages read back once, in order, contiguous logic offsets; "
              f"leaders {sorted({q['leader']['bname'] for q in cluster.static_topic_status(TOPIC)['queues']})}")
        # queues whose first generation lived on a: read from the tier without broker a
        status = cluster.static_topic_status(TOPIC)
        on_a = [q for q in status["queues"] if q["items"][0]["bname"] == "a"]
        assert on_a and all(len(q["items"]) == 2 for q in on_a)
        assert "a" in cluster._readers and "a" not in cluster.stores  # served by the read-only tier view
        # key and time lookups find messages of every generation, the gone broker's too
        q0_first = [b for _, b in acked[0]]
        for i in (0, 8, 11_992, 12_000, 19_992):  # logic queue 0: gen 0 on a (gone), gen 1 on b or c
            got = cluster.query_message(TOPIC, f"k-{i}").messages
            assert [(m.queue_id, m.body) for m in got] == [(0, b"m-%d" % i)], i
            assert got[0].queue_offset == q0_first.index(b"m-%d" % i)
        msgs = read_logic_queue(cluster, TOPIC, 0, 500).messages
        for m in (msgs[1], msgs[len(msgs) // 2], msgs[-1]):
            off = cluster.get_offset_in_queue_by_time(TOPIC, 0, m.store_timestamp)
            assert msgs[off].store_timestamp == m.store_timestamp and off <= m.queue_offset
        assert not any(os.path.exists(os.path.join(c.store_path, "..", "a")) for c in configs[1:])
    finally:
        cluster.close()


def test_reopened_cluster_keeps_mappings_and_offsets(configs):
    acked = {q: [] for q in range(QUEUES)}
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, QUEUES, ["a", "b"])
        put_batch(cluster, 0, 160, acked)
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        put_batch(cluster, 160, 160, acked)
        cluster.dispatch(force=True)
    with Cluster.open(configs) as cluster:
        assert cluster.verify() == []
        for q in range(QUEUES):
            got = read_logic_queue(cluster, TOPIC, q, 7).messages
            assert [(m.queue_offset, m.body) for m in got] == acked[q]


def test_consumer_offsets_time_and_key_lookups_across_a_remap(configs):
    acked = {q: [] for q in range(QUEUES)}
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, QUEUES, ["a", "b"])
        put_batch(cluster, 0, 800, acked)
        for q in range(QUEUES):
            cluster.commit_consumer_offset("g1", TOPIC, q, 40 + q)
        cluster.dispatch(force=True)
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        put_batch(cluster, 800, 800, acked)
        cluster.dispatch(force=True)
        # committed before the remap, returned after it (double-read-check: leader, then previous)
        assert [cluster.query_consumer_offset("g1", TOPIC, q) for q in range(QUEUES)] == [40 + q for q in range(QUEUES)]
        cluster.commit_consumer_offset("g1", TOPIC, 0, 150)
        assert cluster.query_consumer_offset("g1", TOPIC, 0) == 150
        assert cluster.query_consumer_offset("nobody", TOPIC, 0) == -1
        # keys of both generations are found, with logic queue ids and offsets
        for i in (3, 1203):
            got = cluster.query_message(TOPIC, f"k-{i}").messages
            assert [(m.queue_id, m.body) for m in got] == [(i % QUEUES, b"m-%d" % i)]
            assert got[0].queue_offset == dict((b, o) for o, b in acked[i % QUEUES])[b"m-%d" % i]
        # time lookups land in the right generation
        for q in (0, 5):
            msgs = read_logic_queue(cluster, TOPIC, q, 97).messages
            for m in (msgs[3], msgs[len(msgs) // 2 + 7], msgs[-1]):
                off = cluster.get_offset_in_queue_by_time(TOPIC, q, m.store_timestamp)
                assert msgs[off].store_timestamp == m.store_timestamp and off <= m.queue_offset
            assert cluster.get_offset_in_queue_by_time(TOPIC, q, 0) == 0
            assert cluster.get_offset_in_queue_by_time(TOPIC, q, msgs[-1].store_timestamp + 10_000) == len(msgs)
