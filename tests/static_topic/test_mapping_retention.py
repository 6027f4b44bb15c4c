"""Generations older than the two newest leave the old broker's mapping file only once their
data has left that broker's local store (issue 12); they stay readable from the tier."""

from __future__ import annotations

import time

from static_topic_helpers import broker_configs

from tiered_core import Message
from tiered_core.static_topic import Cluster

TOPIC = "aging"
FAR_FUTURE_MS = 1 << 50
BODY = b"x" * 1024


def first_generation_on_a(cluster: Cluster) -> None:
    """Logic queue 0 created on a, 100 messages put there, then remapped to b."""
    cluster.create_static_topic(TOPIC, 1, ["a"])
    for _ in range(100):
        cluster.put_message(Message(topic=TOPIC, body=BODY), 0)
    cluster.remap_static_topic(TOPIC, ["b"])


def fill_a(cluster: Cluster) -> None:
    """200 messages of another topic on a: its commit log moves past generation 0's files."""
    for _ in range(200):
        cluster.stores["a"].put_message(Message(topic="filler", body=BODY), 0)


def test_old_generation_stays_mapped_until_local_retention_removed_it(tmp_path):
    configs = broker_configs(tmp_path, local_commit_log_file_size=64 << 10)
    with Cluster.open(configs) as cluster:
        first_generation_on_a(cluster)
        cluster.put_message(Message(topic=TOPIC, body=BODY), 0)
        cluster.remap_static_topic(TOPIC, ["c"])  # a's gen 0 is now older than the two newest
        assert 0 in cluster.mappings["a"].get(TOPIC).hostedQueues  # its data is still in a's local store
        assert cluster.trim_static_mappings() == 0
        fill_a(cluster)  # then tier everything and expire locally
        cluster.dispatch(force=True)
        assert cluster.delete_expired_local(FAR_FUTURE_MS) > 0
        assert cluster.mappings["a"].get(TOPIC).hostedQueues == {}
        assert cluster.verify() == []
        res = cluster.get_message("g", TOPIC, 0, 0, 32)  # still readable, from the tier
        assert res.found and [m.queue_offset for m in res.messages] == list(range(32))
        assert cluster.get_max_offset_in_queue(TOPIC, 0) == 101


def test_fully_tiered_and_expired_old_generation_is_dropped_by_the_remap(tmp_path):
    configs = broker_configs(tmp_path, local_commit_log_file_size=64 << 10)
    with Cluster.open(configs) as cluster:
        first_generation_on_a(cluster)
        fill_a(cluster)
        cluster.dispatch(force=True)
        assert cluster.delete_expired_local(FAR_FUTURE_MS) > 0
        assert 0 in cluster.mappings["a"].get(TOPIC).hostedQueues  # previous leader: kept
        cluster.remap_static_topic(TOPIC, ["c"])
        assert cluster.mappings["a"].get(TOPIC).hostedQueues == {}  # dropped at once: nothing local


def test_background_local_retention_trims_the_mapping_by_itself(tmp_path):
    """Nothing calls trim or retention here: the brokers' own retention timers (background
    stores) delete a's expired local files, and the cluster's listener trims a's mapping."""
    configs = broker_configs(tmp_path, local_commit_log_file_size=64 << 10, local_retention_hours=0,
                             local_retention_interval_ms=50, group_commit_interval_ms=0)
    with Cluster.open(configs, background=True) as cluster:
        first_generation_on_a(cluster)
        cluster.put_message(Message(topic=TOPIC, body=BODY), 0)
        cluster.remap_static_topic(TOPIC, ["c"])
        # the tail of gen 0 is in a's active local file, which retention never deletes
        assert 0 in cluster.mappings["a"].get(TOPIC).hostedQueues
        fill_a(cluster)  # gen 0's files become deletable once tiered
        deadline = time.monotonic() + 60
        while cluster.mappings["a"].get(TOPIC).hostedQueues and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cluster.mappings["a"].get(TOPIC).hostedQueues == {}
        assert cluster.stores["a"].local.get_min_offset_in_queue(TOPIC, 0) == 100  # gone locally
        assert cluster.verify() == []
        res = cluster.get_message("g", TOPIC, 0, 0, 32)  # still readable, from the tier
        assert res.found and [m.queue_offset for m in res.messages] == list(range(32))
