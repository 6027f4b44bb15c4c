"""A static topic's physical queues take the cluster's puts only (issue 18, finding 7).

``tiered put`` straight into a physical queue of a static topic -- a fenced generation's,
the leader's, or one no generation uses -- is refused (exit 2, ``DirectPutRefused`` naming
the topic, the queue, the logic queue and the fix) and writes nothing; the cluster's own
puts go on. ``static-topic verify`` reports messages a physical queue holds that the
mapping does not account for (written by a store opened on its own, without the guard).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from static_topic_helpers import cluster_toml

from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.cli import main
from tiered_core.static_topic import Cluster, load_cluster_configs
from tiered_core.static_topic.topic_errors import DirectPutRefused

TOPIC = "orders"

CLUSTER = cluster_toml("direct", ("a", "b"))


def broker_file(root: Path, broker: str) -> str:
    """A store config file of one broker of the cluster (what `tiered put --config` takes)."""
    path = root / f"{broker}.toml"
    path.write_text(f'[tiered]\ndriver = "posix"\ncluster = "direct"\nbroker = "{broker}"\n'
                    f'store_path = "./{broker}"\n[tiered.options]\nroot = "./tier"\n')
    return str(path)


def cli(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def cluster_file(tmp_path) -> str:
    """Logic queues 0 and 1 created on broker a, one message each, then moved to b: a's
    physical queues are fenced generations (end 1), b's lead."""
    f = tmp_path / "cluster.toml"
    f.write_text(CLUSTER)
    with Cluster.load(f) as cluster:
        cluster.create_static_topic(TOPIC, 2, ["a"])
        for q in (0, 1):
            cluster.put_message(Message(topic=TOPIC, body=b"before-%d" % q), q)
        cluster.remap_static_topic(TOPIC, ["b"])
    return str(f)


def physical_max(root: Path, broker: str, queue: int) -> int:
    with TieredMessageStore.open(StoreConfig.load(broker_file(root, broker))) as store:
        return store.get_max_offset_in_queue(TOPIC, queue)


def test_tiered_put_into_a_physical_queue_is_refused(tmp_path, cluster_file, capsys):
    for broker, queue, logic, why in (("a", 0, 0, "fenced at physical offset 1"), ("b", 0, 0, "its leader"),
                                      ("a", 7, None, "no generation of the mapping uses it")):
        before = physical_max(tmp_path, broker, queue)
        code, doc = cli(capsys, "put", "--config", broker_file(tmp_path, broker), "--topic", TOPIC,
                        "--queue", str(queue), "--body", "direct")
        err = doc["error"]
        assert (code, err["code"], err["type"]) == (2, "ILLEGAL_PARAM", "DirectPutRefused"), doc
        assert (err["topic"], err["queue_id"], err["broker"], err["logic_queue"]) == (TOPIC, queue, broker, logic)
        assert why in err["message"] and "tiered static-topic put --cluster FILE" in err["fix"]
        assert physical_max(tmp_path, broker, queue) == before  # nothing written
    # other topics of the same broker take direct puts as before
    code, doc = cli(capsys, "put", "--config", broker_file(tmp_path, "a"), "--topic", "plain", "--body", "x")
    assert code == 0 and doc["queue_offset"] == 0
    # the fix the error names works: the logic queue, through the cluster
    code, doc = cli(capsys, "static-topic", "put", "--cluster", cluster_file, "--topic", TOPIC, "--queue", "0",
                    "--body", "through-the-cluster")
    assert code == 0 and (doc["queue"], doc["queue_offset"], doc["broker"]) == (0, 1, "b")
    assert cli(capsys, "static-topic", "verify", "--cluster", cluster_file) == (
        0, {"ok": True, "violations": [], "skipped": []})


def test_in_process_direct_puts_are_refused_and_cluster_puts_go_on(cluster_file):
    with Cluster.load(cluster_file) as cluster:
        for broker in ("a", "b"):
            with pytest.raises(DirectPutRefused) as err:
                cluster.stores[broker].put_message(Message(topic=TOPIC, body=b"direct"), 0)
            assert (err.value.topic, err.value.queue_id, err.value.broker) == (TOPIC, 0, broker)
        with pytest.raises(DirectPutRefused):  # the leader through a fenced broker's store is still direct
            cluster.stores["a"].put_message(Message(topic=TOPIC, body=b"direct"), 0)
        offsets: list[int] = []

        def producer(q: int) -> None:
            for i in range(50):
                offsets.append(cluster.put_message(Message(topic=TOPIC, body=b"m"), q).queue_offset)

        threads = [threading.Thread(target=producer, args=(q,)) for q in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(offsets) == sorted(list(range(1, 51)) * 2)
        assert cluster.verify() == []


def test_verify_reports_messages_the_mapping_does_not_account_for(tmp_path, cluster_file, capsys):
    # a store opened on its own (Python API, no guard) puts past the fenced generation's end
    # and into a physical queue no generation uses
    with TieredMessageStore.open(load_cluster_configs(cluster_file)[0]) as store:
        assert getattr(store, "put_guard", None) is None
        assert store.put_message(Message(topic=TOPIC, body=b"past-the-end"), 0).queue_offset == 1
        store.put_message(Message(topic=TOPIC, body=b"nowhere"), 5)
    code, doc = cli(capsys, "static-topic", "verify", "--cluster", cluster_file)
    assert code == 1 and not doc["ok"]
    found = {(v["queue"], v["broker"], v["field"]) for v in doc["violations"]}
    assert found == {(0, "a", "endOffset"), (None, "a", "queueId")}, doc
    texts = " ".join(v["message"] for v in doc["violations"])
    assert "physical queue a/0" in texts and "[1, 2)" in texts and "physical queue a/5" in texts
