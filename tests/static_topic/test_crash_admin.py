"""SIGKILL the admin process at each step of create and remap (issue 12's crash test).

After each kill: ``verify`` names what is incomplete (unless the kill came before the first
write), re-running the same command completes it, and no acknowledged message is lost.
Create makes 3 mapping writes (one per broker); the remap of 4 logic queues from a,b to
b,c makes 9 (3 per moved queue: new leader, fence, decide; then 3 epoch writes). Each is
killed after every write and in the middle of every write: 24 runs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_core import Message
from tiered_core.access.results import GetMessageStatus
from tiered_core.static_topic import Cluster

from static_topic_helpers import broker_configs

CHILD = Path(__file__).with_name("crash_admin_child.py")
TOPIC = "orders"


def kill_child(root: Path, command: str, where: str, k: int) -> None:
    proc = subprocess.run([sys.executable, str(CHILD), str(root), command, where, str(k)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])


def read_all(cluster, q):
    out, offset = [], 0
    while True:
        res = cluster.get_message("g", TOPIC, q, offset, 50)
        if res.status is not GetMessageStatus.FOUND:
            assert res.status is GetMessageStatus.OFFSET_OVERFLOW_ONE, res.status
            return out
        out.extend((m.queue_offset, m.body) for m in res.messages)
        offset = res.next_begin_offset


@pytest.mark.parametrize("where,k", [("after", 1), ("after", 2), ("during", 1), ("during", 2), ("during", 3)])
def test_create_killed_then_rerun(tmp_path, where, k):
    kill_child(tmp_path, "create", where, k)
    with Cluster.open(broker_configs(tmp_path)) as cluster:
        problems = cluster.verify()
        done = k if where == "after" else k - 1
        assert bool(problems) == (done > 0), problems
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        assert cluster.verify() == []
        assert [cluster.put_message(Message(topic=TOPIC, body=b"x"), q).queue_offset for q in range(4)] == [0] * 4


REMAP_POINTS = [("after", k) for k in range(1, 9)] + [("during", k) for k in range(1, 10)]


@pytest.mark.parametrize("where,k", REMAP_POINTS)
def test_remap_killed_then_rerun(tmp_path, where, k):
    acked = {q: [] for q in range(4)}
    configs = broker_configs(tmp_path)
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        for i in range(120):
            r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i), i % 4)
            acked[i % 4].append((r.queue_offset, b"m-%d" % i))
    kill_child(tmp_path, "remap", where, k)
    with Cluster.open(configs) as cluster:
        problems = cluster.verify()
        done = k if where == "after" else k - 1  # durable writes before the kill
        if done != 8:  # after the 8th only c's epoch write is missing, and c's file already holds
            assert bool(problems) == (done > 0), problems  # that state (see test_cluster_recovery)
        for i in range(120, 160):  # producers go on against the half-done state
            r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i), i % 4)
            acked[i % 4].append((r.queue_offset, b"m-%d" % i))
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        assert cluster.verify() == []
        for q in range(4):
            got = read_all(cluster, q)
            assert [b for _, b in got] == [b for _, b in acked[q]]
            assert [o for o, _ in got] == list(range(len(acked[q])))
            assert all(a == o for (a, _), (o, _) in zip(acked[q], got) if a != -1)
