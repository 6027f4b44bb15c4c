"""The one documented skip at a generation boundary (issue 12): a middle generation whose
broker is gone and whose data was only partly tiered. Readers move on to the next
generation's first logic offset instead of stalling; the skipped offsets are counted in
``skipped_offsets``, ``static_topic_status`` and ``tiered static-topic verify``."""

from __future__ import annotations

import json
import shutil

from tiered_core import Message
from tiered_core.access.results import GetMessageStatus
from tiered_core.cli import main as cli_main
from tiered_core.static_topic import Cluster

from static_topic_helpers import read_logic_queue

TOPIC = "partly"


def put(cluster, n, tag):
    return [cluster.put_message(Message(topic=TOPIC, body=b"%s-%d" % (tag, i)), 0).queue_offset for i in range(n)]


def partly_tiered(cluster, tmp_path):
    cluster.create_static_topic(TOPIC, 1, ["a"])
    put(cluster, 10, b"a")
    cluster.dispatch(force=True)  # the tier holds a's offsets 0..9
    put(cluster, 5, b"a-late")  # 10..14: only in a's local store
    cluster.remap_static_topic(TOPIC, ["b"])
    assert put(cluster, 5, b"b") == list(range(15, 20))
    cluster.close_broker("a", drain=False)
    shutil.rmtree(tmp_path / "a")


def test_read_skips_the_untiered_tail_once_and_counts_it(configs, tmp_path):
    with Cluster.open(configs) as cluster:
        partly_tiered(cluster, tmp_path)
        got, statuses, _ = read_logic_queue(cluster, TOPIC, 0, 4, skips=True)
        assert [(m.queue_offset, m.body) for m in got] == (
            [(i, b"a-%d" % i) for i in range(10)] + [(15 + i, b"b-%d" % i) for i in range(5)])
        assert GetMessageStatus.OFFSET_FOUND_NULL not in statuses
        res = cluster.get_message("g", TOPIC, 0, 12, 32)  # inside the gap: straight to the next generation
        assert res.status is GetMessageStatus.NO_MATCHED_MESSAGE and res.next_begin_offset == 15
        assert cluster.skipped_reads == 2
        assert cluster.skipped_offsets() == [{"topic": TOPIC, "queue": 0, "gen": 0, "bname": "a",
                                              "from": 10, "to": 15, "count": 5}]
        assert cluster.static_topic_status(TOPIC)["queues"][0]["skippedOffsets"] == 5
        assert cluster.verify() == []  # allowed, documented: not a violation


def test_nothing_skipped_when_the_generation_was_fully_tiered(configs, tmp_path):
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 1, ["a"])
        put(cluster, 10, b"a")
        cluster.remap_static_topic(TOPIC, ["b"])
        put(cluster, 5, b"b")
        cluster.close_broker("a")  # drains: everything tiered
        shutil.rmtree(tmp_path / "a")
        got = read_logic_queue(cluster, TOPIC, 0, 4, skips=True).messages
        assert [m.queue_offset for m in got] == list(range(15))
        assert cluster.skipped_offsets() == [] and cluster.skipped_reads == 0
        assert cluster.static_topic_status(TOPIC)["queues"][0]["skippedOffsets"] == 0


def test_verify_cli_reports_the_skipped_offsets(configs, tmp_path, capsys):
    with Cluster.open(configs) as cluster:
        partly_tiered(cluster, tmp_path)
    # the cluster file names only the brokers still there
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(f'[tiered]\ndriver = "posix"\ncluster = "{configs[0].cluster}"\nread_ahead_cache_bytes = 0\n'
                   f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n'
                   + "".join(f'[[broker]]\nbroker = "{b}"\nstore_path = "{tmp_path / b}"\n' for b in ("b", "c")))
    assert cli_main(["static-topic", "verify", "--cluster", str(cfg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True
    assert [(g["gen"], g["bname"], g["from"], g["to"], g["count"]) for g in doc["skipped"]] == [(0, "a", 10, 15, 5)]
    assert cli_main(["static-topic", "verify", "--cluster", str(cfg)]) == 0
    assert "5 logic offset(s) [10, 15) never tiered" in capsys.readouterr().out


def test_the_same_skip_once_the_broker_that_lost_its_disk_is_taken_over(configs, tmp_path):
    """The broker comes back by the documented path (a take-over after its lost disk): it is
    open again, but the closed generation's untiered tail is gone for good. Readers stalled
    on OFFSET_FOUND_NULL at its first offset while verify reported nothing."""
    with Cluster.open(configs) as cluster:
        partly_tiered(cluster, tmp_path)
    with Cluster.open(configs, take_over=["a"]) as cluster:
        assert cluster.restore_broker("a")
        got, statuses, _ = read_logic_queue(cluster, TOPIC, 0, 4, skips=True)
        assert [m.queue_offset for m in got] == list(range(10)) + list(range(15, 20))
        assert GetMessageStatus.OFFSET_FOUND_NULL not in statuses
        res = cluster.get_message("g", TOPIC, 0, 10, 32)
        assert res.status is GetMessageStatus.NO_MATCHED_MESSAGE and res.next_begin_offset == 15
        assert cluster.skipped_offsets() == [{"topic": TOPIC, "queue": 0, "gen": 0, "bname": "a",
                                              "from": 10, "to": 15, "count": 5}]
        assert cluster.verify() == []
