"""Issue 12: per-broker ``topics.json`` (mapping before topic config) and consumer offsets that
survive the loss of the broker two leaders back (carried forward at each remap)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tiered_core import Message
from tiered_core.errors import MappingError, StateConflict
from tiered_core.static_topic import Cluster
from tiered_core.static_topic.consumer_offsets import ConsumerOffsetStore
from tiered_core.static_topic.mapping_file import mapping_path
from tiered_core.static_topic.topic_config import TopicConfigStore, topic_config_path

TOPIC = "orders"


def test_create_and_remap_write_topic_configs_in_rocketmq_shape(configs):
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        assert cluster.verify() == []
    doc = json.loads(open(topic_config_path(configs[2].store_path)).read())
    assert set(doc) == {"topicConfigTable", "dataVersion"}
    assert set(doc["dataVersion"]) == {"timestamp", "counter", "stateVersion"}
    entry = doc["topicConfigTable"][TOPIC]
    assert entry == {"topicName": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                     "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {}}
    # a (queues 0, 1 of gen 0) and b (queues 0, 1) keep their counts; c got its two new queues
    assert {c.broker: TopicConfigStore(c.store_path, c.broker).get(TOPIC).queue_nums for c in configs} == {
        "a": 2, "b": 2, "c": 2}


def test_verify_reports_a_short_or_missing_topic_config_and_a_config_without_mapping(configs):
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
    # a topic config short of the mapping (a crash between the two writes, by hand)
    path = topic_config_path(configs[0].store_path)
    doc = json.loads(open(path).read())
    doc["topicConfigTable"][TOPIC]["writeQueueNums"] = 1
    open(path, "w").write(json.dumps(doc))
    # c has a topic config of the static topic but lost its mapping
    shutil.copy(path, topic_config_path(configs[2].store_path))
    os.remove(mapping_path(configs[2].store_path))
    with Cluster.open(configs) as cluster:
        found = {(v.broker, v.field): v.message for v in cluster.verify()}
        assert "1 write queues, its mapping 2" in found[("a", "writeQueueNums")]
        assert "has its topic config: the mapping must come first" in found[("c", "topicQueueMappingInfoMap")]
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])  # the same command completes it
        assert cluster.verify() == []
        assert cluster.topic_configs["a"].get(TOPIC).writeQueueNums == 2


def test_create_refuses_a_normal_topic_that_has_a_topic_config(configs):
    TopicConfigStore(configs[1].store_path, "b").ensure_queues("plain", 8)
    with Cluster.open(configs) as cluster:
        with pytest.raises(StateConflict) as err:
            cluster.create_static_topic("plain", 4, ["a", "b"])
        assert err.value.context["broker"] == "b" and err.value.context["topic"] == "plain"
        assert cluster.verify() == []


def test_bad_topic_config_file_is_a_typed_error(configs):
    path = topic_config_path(configs[0].store_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").write(json.dumps({"topicConfigTable": {TOPIC: {"topicName": TOPIC, "readQueueNums": -1,
                                                                     "writeQueueNums": 2}}}))
    with pytest.raises(MappingError) as err:
        TopicConfigStore(configs[0].store_path, "a")
    assert err.value.context["field"] == "readQueueNums" and err.value.context["topic"] == TOPIC


def test_offsets_committed_two_leaders_back_survive_the_loss_of_that_broker(configs):
    a, b, c = configs
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 2, ["a"])
        for i in range(20):
            cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i), i % 2)
        cluster.commit_consumer_offset("g", TOPIC, 0, 7)
        cluster.commit_consumer_offset("g", TOPIC, 1, 9)
        cluster.commit_consumer_offset("h", TOPIC, 0, 3)
        cluster.remap_static_topic(TOPIC, ["b"])  # a -> b
        cluster.commit_consumer_offset("h", TOPIC, 0, 5)  # on b now
        cluster.remap_static_topic(TOPIC, ["c"])  # b -> c
        cluster.dispatch(force=True)
        cluster.close_broker("a")
    shutil.rmtree(a.store_path)
    with Cluster.open([b, c]) as cluster:
        assert cluster.query_consumer_offset("g", TOPIC, 0) == 7
        assert cluster.query_consumer_offset("g", TOPIC, 1) == 9
        assert cluster.query_consumer_offset("h", TOPIC, 0) == 5
        assert cluster.query_consumer_offset("h", TOPIC, 1) == -1
    # the value lives in the leader's own file, not only in a double-read of b
    assert ConsumerOffsetStore(c.store_path).query("g", TOPIC, 0) == 7


def test_raise_offsets_never_lowers_and_writes_only_on_change(tmp_path):
    store = ConsumerOffsetStore(str(tmp_path))
    store.commit("g", TOPIC, 0, 10)
    counter = store.data_version["counter"]
    assert store.raise_offsets(TOPIC, 0, {"g": 4}) is False
    assert store.data_version["counter"] == counter and store.query("g", TOPIC, 0) == 10
    assert store.raise_offsets(TOPIC, 0, {"g": 12, "h": 1}) is True
    reopened = ConsumerOffsetStore(str(tmp_path))
    assert (reopened.query("g", TOPIC, 0), reopened.query("h", TOPIC, 0)) == (12, 1)
    assert reopened.queue_offsets(TOPIC, 0) == {"g": 12, "h": 1}
