"""SIGKILL the admin process at each step of create and remap (issue 12's crash test).

After each kill: ``verify`` names what is incomplete (unless the kill came before the first
write), re-running the same command completes it, and no acknowledged message or committed
consumer offset is lost. Durable writes are counted over the three files an admin command
writes (``topicQueueMapping.json``, ``topics.json``, ``consumerOffset.json``).

Create makes 5: one mapping per broker (a, b, c), then the topic configs of a and b (mapping
before topic config). The remap of 4 logic queues from a,b to b,c moves queues 0 and 2 to c
and makes 13: 5 per moved queue (c's new item, c's topic config, a fenced, the offsets
carried from a to c, c's item decided), then 3 epoch writes. Each run is killed after one
write or in the middle of one (temp file fsynced, not renamed): 35 runs on POSIX, and a
representative 6 on the GCS emulator (the tier on fake-gcs-server; the mapping, topic-config
and offset files are local files either way).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from store_workload import backend_options
from tiered_core import Message
from tiered_core.static_topic import Cluster

from static_topic_helpers import broker_configs, read_logic_queue

CHILD = Path(__file__).with_name("crash_admin_child.py")
TOPIC = "orders"
CREATE_WRITES = 5
REMAP_WRITES = 13


def kill_child(root: Path, command: str, where: str, k: int, driver: str, options: dict) -> None:
    proc = subprocess.run([sys.executable, str(CHILD), str(root), command, where, str(k), driver,
                           json.dumps(options)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])


def topic_configs(cluster):
    return {b: (c.readQueueNums, c.writeQueueNums) for b, s in cluster.topic_configs.items()
            if (c := s.get(TOPIC)) is not None}


CREATE_POINTS = [("posix", "after", k) for k in range(1, CREATE_WRITES + 1)] + [
    ("posix", "during", k) for k in range(1, CREATE_WRITES + 1)] + [("gcs", "after", 3), ("gcs", "during", 5)]


@pytest.mark.parametrize("driver,where,k", CREATE_POINTS)
def test_create_killed_then_rerun(request, tmp_path, driver, where, k):
    options = backend_options(request, driver, tmp_path)
    configs = broker_configs(tmp_path, driver=driver, options=options)
    kill_child(tmp_path, "create", where, k, driver, options)
    with Cluster.open(configs) as cluster:
        problems = cluster.verify()
        done = k if where == "after" else k - 1
        assert bool(problems) == (0 < done < CREATE_WRITES), problems
        if done == 3:  # every mapping, no topic config yet: verify names both brokers' topic configs
            assert {(v.broker, v.field) for v in problems} == {("a", "topicConfigTable"), ("b", "topicConfigTable")}
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        assert cluster.verify() == []
        assert topic_configs(cluster) == {"a": (2, 2), "b": (2, 2)}
        assert [cluster.put_message(Message(topic=TOPIC, body=b"x"), q).queue_offset for q in range(4)] == [0] * 4


REMAP_POINTS = [("posix", "after", k) for k in range(1, REMAP_WRITES)] + [
    ("posix", "during", k) for k in range(1, REMAP_WRITES + 1)] + [
    ("gcs", "after", 2), ("gcs", "after", 4), ("gcs", "during", 5), ("gcs", "during", 9)]


@pytest.mark.parametrize("driver,where,k", REMAP_POINTS)
def test_remap_killed_then_rerun(request, tmp_path, driver, where, k):
    options = backend_options(request, driver, tmp_path)
    configs = broker_configs(tmp_path, driver=driver, options=options)
    acked = {q: [] for q in range(4)}
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        for i in range(120):
            r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i), i % 4)
            acked[i % 4].append((r.queue_offset, b"m-%d" % i))
        for q in range(4):
            cluster.commit_consumer_offset("g", TOPIC, q, 10 + q)
    kill_child(tmp_path, "remap", where, k, driver, options)
    with Cluster.open(configs) as cluster:
        problems = cluster.verify()
        done = k if where == "after" else k - 1  # durable writes before the kill
        if done != REMAP_WRITES - 1:  # after the 12th only c's epoch write is missing, and c's file
            assert bool(problems) == (done > 0), problems  # already holds that state (test_cluster_recovery)
        if done in (1, 6):  # c's new item is durable, its topic config not yet: verify names it
            assert ("c", "writeQueueNums" if done == 6 else "topicConfigTable") in {
                (v.broker, v.field) for v in problems}, problems
        for i in range(120, 160):  # producers go on against the half-done state
            r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i), i % 4)
            acked[i % 4].append((r.queue_offset, b"m-%d" % i))
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        assert cluster.verify() == []
        assert topic_configs(cluster) == {"a": (2, 2), "b": (2, 2), "c": (2, 2)}
        for q in range(4):
            got = [(m.queue_offset, m.body) for m in read_logic_queue(cluster, TOPIC, q).messages]
            assert [b for _, b in got] == [b for _, b in acked[q]]
            assert [o for o, _ in got] == list(range(len(acked[q])))
            assert all(a == o for (a, _), (o, _) in zip(acked[q], got) if a != -1)
            assert cluster.query_consumer_offset("g", TOPIC, q) == 10 + q
        # the moved queues' offsets were carried from a (fenced) to c (the new leader)
        assert [cluster.offsets["c"].query("g", TOPIC, q) for q in (0, 2)] == [10, 12]
