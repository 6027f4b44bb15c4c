"""A broker of a static-topic cluster that lost its disk (issue 18, finding 7).

Every ``static-topic`` command then fails with PREFIX_OWNED (its new, empty store_path is a
new store; the old one owns the tier prefix). The error names the broker and the fix that
works from the cluster file, ``tiered static-topic takeover --cluster FILE --broker B``,
which takes the prefix over, rebuilds the broker's metadata from the tier, and restores its
mappings: from the other brokers' files, and (``--restore-lost-queues``) the logic queues
only its lost file knew, inferred and checked against what the tier holds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from static_topic_helpers import cluster_toml, read_logic_queue
from tiered_core import Message
from tiered_core.cli import main
from tiered_core.static_topic import Cluster, LogicQueueMappingItem
from tiered_core.static_topic.restore import infer_lost_items

CLUSTER = cluster_toml("lost", shared="read_ahead_cache_bytes = 0\n")


def cli(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def bodies(cluster: Cluster, topic: str, queue: int) -> list[bytes]:
    return [m.body for m in read_logic_queue(cluster, topic, queue).messages]


@pytest.fixture
def lost_b(tmp_path) -> tuple[str, dict]:
    """``moved``: 4 logic queues created on b and a, b's moved to c (b keeps them as their
    previous leader); ``stay``: 2 logic queues on b only. Every message tiered, then b's
    store_path deleted. Returns the cluster file and what each logic queue held."""
    f = tmp_path / "cluster.toml"
    f.write_text(CLUSTER)
    held: dict[tuple[str, int], list[bytes]] = {}
    with Cluster.load(f) as cluster:
        cluster.create_static_topic("moved", 4, ["b", "a"])
        cluster.create_static_topic("stay", 2, ["b"])
        for topic, queues in (("moved", 4), ("stay", 2)):
            for q in range(queues):
                for i in range(3):
                    body = f"{topic}-{q}-{i}".encode()
                    cluster.put_message(Message(topic=topic, body=body), q)
                    held.setdefault((topic, q), []).append(body)
        cluster.remap_static_topic("moved", ["a", "c"])
        for q in range(4):
            body = f"moved-{q}-after".encode()
            cluster.put_message(Message(topic="moved", body=body), q)
            held[("moved", q)].append(body)
        cluster.dispatch(force=True)
    shutil.rmtree(tmp_path / "b")  # the disk is lost
    return str(f), held


def test_every_command_names_the_broker_and_the_cluster_level_fix(lost_b, capsys):
    f, _ = lost_b
    fix = f"tiered static-topic takeover --cluster {f} --broker b"
    for argv in (("status", "--topic", "moved"), ("verify",), ("remap", "--topic", "moved", "--brokers", "a"),
                 ("create", "--topic", "new", "--queues", "2", "--brokers", "a"),
                 ("put", "--topic", "moved", "--queue", "0", "--body", "x")):
        code, doc = cli(capsys, "static-topic", argv[0], "--cluster", f, *argv[1:])
        err = doc["error"]
        assert (code, err["code"], err["broker"], err["fix"]) == (5, "PREFIX_OWNED", "b", fix), argv
        assert f"`{fix}`" in err["message"] and "broker 'b'" in err["message"]
        # the owner is named, read-only commands too (status and verify said "unknown owner")
        assert "unknown owner" not in err["message"] and "(store " in err["message"], argv
        assert err["prefix"].endswith("/b/"), argv


def test_takeover_restores_the_broker_from_the_cluster_file(lost_b, capsys):
    f, held = lost_b
    code, doc = cli(capsys, "static-topic", "takeover", "--cluster", f, "--broker", "b")
    assert code == 1 and doc["took_over_from"] is not None and doc["owner"]["epoch"] == 2
    by_topic = {t["topic"]: t for t in doc["topics"]}
    assert by_topic["moved"]["from_peers"] == [0, 2] and by_topic["moved"]["unmapped"] == []
    stay = by_topic["stay"]
    assert (stay["lost"], stay["restored"], stay["unmapped"]) == (
        [{"queue": 0, "bname": "b", "queueId": 0}, {"queue": 1, "bname": "b", "queueId": 1}], False, [0, 1])
    code, doc = cli(capsys, "static-topic", "verify", "--cluster", f)
    assert code == 1 and {(v["topic"], v["queue"]) for v in doc["violations"]} == {("stay", 0), ("stay", 1)}

    code, doc = cli(capsys, "static-topic", "takeover", "--cluster", f, "--broker", "b", "--restore-lost-queues")
    assert code == 0 and doc["took_over_from"] is None  # the prefix is b's new store's already
    assert {t["topic"]: t["restored"] for t in doc["topics"]} == {"moved": False, "stay": True}
    assert cli(capsys, "static-topic", "verify", "--cluster", f) == (0, {"ok": True, "violations": [], "skipped": []})
    with Cluster.load(f) as cluster:
        for (topic, q), expected in held.items():
            assert bodies(cluster, topic, q) == expected, (topic, q)


def test_takeover_of_a_broker_that_is_not_in_the_file(lost_b, capsys):
    f, _ = lost_b
    code, doc = cli(capsys, "static-topic", "takeover", "--cluster", f, "--broker", "zz")
    assert (code, doc["error"]["code"], doc["error"]["broker"]) == (2, "ILLEGAL_PARAM", "zz")


def item(q: int, qid: int, broker: str, gen: int = 0, logic: int = 0, end: int = -1) -> LogicQueueMappingItem:
    return LogicQueueMappingItem(gen=gen, queueId=qid, bname=broker, logicOffset=logic, endOffset=end)


def test_lost_queues_are_inferred_only_when_every_fact_agrees():
    # logic queues 0..5 created on [b, a]: b has 0, 2, 4 as its physical queues 0, 1, 2;
    # 0 was moved to c since (so its generation 0 on b is known), 2 and 4 only b knew
    known = {0: [item(0, 0, "b", end=5), item(0, 0, "c", gen=1, logic=5)], 1: [item(1, 0, "a")],
             3: [item(3, 1, "a")], 5: [item(5, 2, "a")]}
    got = infer_lost_items("b", 6, known, held={0, 1, 2})
    assert got.reason is None and {q: i.queueId for q, i in got.items.items()} == {2: 1, 4: 2}
    assert all((i.gen, i.logicOffset, i.startOffset, i.endOffset) == (0, 0, 0, -1) for i in got.items.values())
    # a lost logic queue whose physical queue holds nothing: listed, not restored
    got = infer_lost_items("b", 6, known, held={0, 1})
    assert {q: i.queueId for q, i in got.items.items()} == {2: 1} and got.empty == (4,)
    # a physical queue the inference does not explain: nothing inferred
    got = infer_lost_items("b", 6, known, held={0, 1, 2, 7})
    assert not got.items and "[7]" in got.reason
    # known generation-0 ids that are not one block in logic-queue order: nothing inferred
    odd = {**known, 1: [item(1, 5, "b", end=1), item(1, 0, "a", gen=1, logic=1)]}
    got = infer_lost_items("b", 6, odd, held={0, 1, 2, 5})
    assert not got.items and "not one block" in got.reason
