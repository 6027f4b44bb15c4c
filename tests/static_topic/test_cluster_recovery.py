"""Cluster.load, a remap interrupted between its durable steps, and puts during a remap."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from tiered_core import Message
from tiered_core.static_topic import Cluster, load_cluster_configs
from tiered_core.static_topic.mapping_file import TopicQueueMappingStore

from static_topic_helpers import read_logic_queue

TOPIC = "orders"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"


def test_example_cluster_toml_loads(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "cluster.toml")
    configs = load_cluster_configs(tmp_path / "cluster.toml")
    assert [c.broker for c in configs] == ["broker-a", "broker-b", "broker-c"]
    assert {c.cluster for c in configs} == {"StaticCluster"}
    assert {c.driver_options["root"] for c in configs} == {str(tmp_path / "cluster-data" / "tiered")}
    assert configs[1].store_path == str(tmp_path / "cluster-data" / "broker-b")
    with Cluster.load(tmp_path / "cluster.toml") as cluster:
        cluster.create_static_topic(TOPIC, 3, ["broker-a", "broker-b"])
        assert cluster.put_message(Message(topic=TOPIC, body=b"x"), 2).queue_offset == 0
        assert cluster.verify() == []


class Crash(Exception):
    pass


# 9 durable writes in all: 3 per moved queue (new leader, fence, decide), then one per broker;
# after the 8th only broker c lacks the final write, and its file already holds that state.
@pytest.mark.parametrize("crash_after", [0, 1, 2, 3, 4, 5, 6, 7])
def test_interrupted_remap_is_reported_and_finished_by_running_it_again(configs, monkeypatch, crash_after):
    acked = {q: [] for q in range(4)}
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        for i in range(200):
            r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i), i % 4)
            acked[i % 4].append((r.queue_offset, b"m-%d" % i))
        real_put = TopicQueueMappingStore.put
        calls = {"n": 0}

        def failing_put(self, detail):  # the fault: the admin process dies after N durable writes
            calls["n"] += 1
            if calls["n"] > crash_after:
                raise Crash(calls["n"])
            return real_put(self, detail)

        monkeypatch.setattr(TopicQueueMappingStore, "put", failing_put)
        with pytest.raises(Crash):
            cluster.remap_static_topic(TOPIC, ["b", "c"])
        monkeypatch.setattr(TopicQueueMappingStore, "put", real_put)
    with Cluster.open(configs) as cluster:  # "restart": state only from the files
        problems = cluster.verify()
        # crash before the first write: nothing changed; after any later one: it shows
        assert bool(problems) == (crash_after > 0), problems
        assert all(p.topic == TOPIC for p in problems)
        for i in range(200, 240):  # puts still work mid-remap: the newest generation takes them
            r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i), i % 4)
            acked[i % 4].append((r.queue_offset, b"m-%d" % i))
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        assert cluster.verify() == []
        cluster.dispatch(force=True)
        for q in range(4):
            got = [(m.queue_offset, m.body) for m in read_logic_queue(cluster, TOPIC, q).messages]
            assert [b for _, b in got] == [b for _, b in acked[q]]
            assert [o for o, _ in got] == list(range(len(acked[q])))
            # an offset acknowledged while the new leader was undecided is -1 (seed); all others match
            assert all(a == o for (a, _), (o, _) in zip(acked[q], got) if a != -1)


def test_producer_keeps_putting_during_remap(configs):
    acked = {q: [] for q in range(8)}
    stop = threading.Event()
    errors = []

    def produce(cluster, start):
        i = start
        while not stop.is_set() or i < start + 500:
            try:
                r = cluster.put_message(Message(topic=TOPIC, body=b"p-%d" % i, keys=[f"p-{i}"]), i % 8)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            acked[i % 8].append((r.queue_offset, b"p-%d" % i))
            i += 1

    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 8, ["a", "b"])
        producer = threading.Thread(target=produce, args=(cluster, 0))
        producer.start()
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        stop.set()
        producer.join()
        assert not errors
        cluster.dispatch(force=True)
        cluster.close_broker("a")
        shutil.rmtree(configs[0].store_path)
        for q in range(8):
            got = [(m.queue_offset, m.body) for m in read_logic_queue(cluster, TOPIC, q).messages]
            assert got == acked[q]
