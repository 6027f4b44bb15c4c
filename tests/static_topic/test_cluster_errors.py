"""Bad input to a static-topic cluster gets a typed error naming it; nothing stored is harmed."""

from __future__ import annotations

import os
import shutil

import pytest

from tiered_core import Message
from tiered_core.errors import (
    ConfigError, ErrorCode, Fenced, IllegalParam, MappingError, StateConflict, TieredStoreError,
)
from tiered_core.static_topic import Cluster, LogicQueueMappingItem
from tiered_core.static_topic.cluster_config import cluster_configs_from_text
from tiered_core.static_topic.mapping_file import mapping_path

TOPIC = "orders"


@pytest.fixture
def cluster(configs):
    c = Cluster.open(configs)
    yield c
    c.close()


def msg(i: int = 0) -> Message:
    return Message(topic=TOPIC, body=b"m-%d" % i, keys=[f"k-{i}"])


def test_mapping_file_from_another_broker_is_refused_at_open(configs):
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
    shutil.copy(mapping_path(configs[0].store_path), mapping_path(configs[2].store_path))
    with pytest.raises(MappingError) as err:
        Cluster.open(configs)
    assert err.value.code is ErrorCode.MAPPING
    assert (err.value.topic, err.value.field, err.value.broker) == (TOPIC, "bname", "a")
    assert err.value.path == mapping_path(configs[2].store_path)


def test_total_queues_mismatch(cluster):
    cluster.create_static_topic(TOPIC, 4, ["a", "b"])
    before = open(mapping_path(cluster.configs["a"].store_path)).read()
    with pytest.raises(MappingError) as err:
        cluster.create_static_topic(TOPIC, 6, ["a", "b"])
    assert (err.value.topic, err.value.field, err.value.existing, err.value.requested) == (TOPIC, "totalQueues", 4, 6)
    assert open(mapping_path(cluster.configs["a"].store_path)).read() == before
    assert cluster.create_static_topic(TOPIC, 4, ["a", "b"])["totalQueues"] == 4  # same again: no-op


def test_logic_queue_id_out_of_range(cluster):
    cluster.create_static_topic(TOPIC, 4, ["a", "b"])
    for bad in (4, -1):
        with pytest.raises(IllegalParam) as err:
            cluster.put_message(msg(), bad)
        assert (err.value.topic, err.value.queue, err.value.field) == (TOPIC, bad, "queue_id")
        with pytest.raises(IllegalParam):
            cluster.get_message("g", TOPIC, bad, 0, 1)


def test_put_to_a_fenced_queue(cluster):
    cluster.create_static_topic(TOPIC, 2, ["a"])
    assert cluster.put_message_to_broker("a", msg(), 0).queue_offset == 0
    cluster.remap_static_topic(TOPIC, ["c"])
    with pytest.raises(Fenced) as err:
        cluster.put_message_to_broker("a", msg(1), 0)
    assert (err.value.topic, err.value.queue, err.value.broker, err.value.leader) == (TOPIC, 0, "a", "c")
    assert cluster.put_message(msg(2), 0).queue_offset == 1  # through the cluster: the new leader


def test_unknown_broker_name(cluster):
    with pytest.raises(IllegalParam) as err:
        cluster.create_static_topic(TOPIC, 4, ["a", "zz"])
    assert (err.value.broker, err.value.field) == ("zz", "broker")
    assert cluster.mappings["a"].get(TOPIC) is None  # nothing written
    cluster.create_static_topic(TOPIC, 4, ["a"])
    with pytest.raises(IllegalParam):
        cluster.remap_static_topic(TOPIC, ["nope"])
    with pytest.raises(IllegalParam):
        cluster.put_message_to_broker("nope", msg(), 0)


def test_normal_topic_with_data_is_not_made_static(cluster):
    cluster.stores["b"].put_message(msg(), 0)
    with pytest.raises(StateConflict) as err:
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
    assert (err.value.topic, err.value.broker) == (TOPIC, "b")


def test_undecided_offset_is_refused():
    item = LogicQueueMappingItem(gen=1, queueId=0, bname="b", logicOffset=-1)
    with pytest.raises(MappingError) as err:
        item.to_physical(5)
    assert err.value.field == "logicOffset"


def test_read_only_view_never_writes_under_another_prefix(configs, tmp_path):
    from tiered_core.static_topic import TieredBrokerReader

    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 2, ["a"])
        for i in range(10):
            cluster.put_message(msg(i), i % 2)
        cluster.dispatch(force=True)
        cluster.close_broker("a")
        tier = str(tmp_path / "tier")
        before = sorted((p, os.path.getsize(os.path.join(p, f))) for p, _, fs in os.walk(tier) for f in fs)
        reader = TieredBrokerReader(configs[1], "a")
        try:
            assert reader.max_offset(TOPIC, 0) == 5
            with pytest.raises(StateConflict) as err:
                reader.driver.create("x/a/y")
            assert err.value.broker == "a"
        finally:
            reader.close()
        after = sorted((p, os.path.getsize(os.path.join(p, f))) for p, _, fs in os.walk(tier) for f in fs)
        assert before == after


@pytest.mark.parametrize("text,key", [
    ('[tiered]\noptions = 3\n[[broker]]\nbroker = "a"\nstore_path = "a"\n', "tiered.options"),
    ('[tiered]\n[[broker]]\nbroker = "a"\nstore_path = "a"\noptions = "root=x"\n', "broker.options"),
])
def test_options_that_are_not_a_table_are_a_config_error(text, key):
    with pytest.raises(ConfigError) as err:
        cluster_configs_from_text(text, "/nonexistent", source="cluster.toml")
    assert err.value.key == key and "cluster.toml" in str(err.value)


def test_a_rerun_of_create_never_maps_again_a_queue_of_a_dropped_broker(configs):
    """Broker b led logic queue 1 and was dropped from the cluster: create re-run on a and c
    would map queue 1 afresh at logic offset 0, handing out offsets b's messages hold."""
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 2, ["a", "b"])
        assert [cluster.put_message(msg(i), 1).queue_offset for i in range(3)] == [0, 1, 2]
        cluster.dispatch()
    a_and_c = [c for c in configs if c.broker != "b"]
    with Cluster.open(a_and_c) as cluster:
        before = open(mapping_path(cluster.configs["a"].store_path)).read()
        with pytest.raises(MappingError) as err:
            cluster.remap_static_topic(TOPIC, ["a", "c"])
        assert "re-run create" not in str(err.value).split(";")[0] and "add it back" in str(err.value)
        with pytest.raises(MappingError) as err:
            cluster.create_static_topic(TOPIC, 2, ["a", "c"])
        assert (err.value.field, err.value.broker, err.value.queue) == ("hostedQueues", "b", 1)
        assert open(mapping_path(cluster.configs["a"].store_path)).read() == before
        with pytest.raises(MappingError):
            cluster.put_message(msg(9), 1)  # still unmapped: nothing handed out again
    with Cluster.open(configs) as cluster:
        assert cluster.put_message(msg(3), 1).queue_offset == 3


def test_a_rerun_of_create_keeps_the_first_runs_broker_order(configs, monkeypatch):
    """create cut short after a's mapping; re-run with the brokers in another order, it would
    give a's logic queues physical ids out of logic-queue order, which a lost-disk take-over
    infers from. Refused; the same order finishes it."""
    from tiered_core.static_topic import mapping_file

    real_put = mapping_file.TopicQueueMappingStore.put

    def crash_after_first(self, detail):
        real_put(self, detail)
        raise KeyboardInterrupt  # the process dies here

    with Cluster.open(configs) as cluster:
        monkeypatch.setattr(mapping_file.TopicQueueMappingStore, "put", crash_after_first)
        with pytest.raises(KeyboardInterrupt):
            cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        monkeypatch.setattr(mapping_file.TopicQueueMappingStore, "put", real_put)
    with Cluster.open(configs) as cluster:
        with pytest.raises(MappingError) as err:
            cluster.create_static_topic(TOPIC, 4, ["b", "a"])
        assert (err.value.field, err.value.queue, err.value.broker) == ("brokers", 0, "a")
        status = cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        assert status["totalQueues"] == 4
        hosted = {q: (items[0].bname, items[0].queueId) for q, items in cluster._view(TOPIC, cluster._details(TOPIC)).queues.items()}
        assert hosted == {0: ("a", 0), 1: ("b", 0), 2: ("a", 1), 3: ("b", 1)}


@pytest.mark.parametrize("bad", [0, -3, 65537, 10 ** 11, True, "4"])
def test_total_queues_out_of_range_is_refused_before_anything_is_written(cluster, bad):
    with pytest.raises(IllegalParam) as err:
        cluster.create_static_topic(TOPIC, bad, ["a", "b"])
    assert err.value.field == "total_queues" and "65536" in str(err.value)
    assert not os.path.exists(mapping_path(cluster.configs["a"].store_path))


def test_query_and_commit_arguments_are_checked_naming_the_callers_value(cluster):
    cluster.create_static_topic(TOPIC, 1, ["a"])
    cluster.put_message(msg(1), 0)
    cluster.remap_static_topic(TOPIC, ["b"])
    cluster.close_broker("a")  # a generation read through the tier
    for bad in (-1, 0, 2.5):
        with pytest.raises(IllegalParam) as err:
            cluster.query_message(TOPIC, "k-1", max_count=bad)
        assert err.value.context["max_count"] == bad
    for bad in (-1, 2 ** 63, 2 ** 70, 1.5):  # consumerOffset.json holds a Java long
        with pytest.raises(IllegalParam) as err:
            cluster.commit_consumer_offset("g", TOPIC, 0, bad)
        assert err.value.context["offset"] == bad
    cluster.commit_consumer_offset("g", TOPIC, 0, 2 ** 63 - 1)
    assert cluster.query_consumer_offset("g", TOPIC, 0) == 2 ** 63 - 1


def test_a_renamed_broker_is_an_identity_mismatch_not_a_copied_mapping(configs):
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 2, ["a", "c"])
    renamed = [c.replace(broker="c2") if c.broker == "c" else c for c in configs]
    with pytest.raises(TieredStoreError) as err:
        Cluster.open(renamed)
    assert err.value.code is ErrorCode.IDENTITY_MISMATCH
    assert (err.value.context["field"], err.value.context["recorded"], err.value.context["configured"]) == (
        "broker", "'c'", "'c2'")


def test_a_stale_undecided_generation_that_took_no_message_gives_way(configs, monkeypatch):
    """A remap towards c cut short after its first step (c's file: gen 1 on c, logic offset
    -1), then run again towards b while c was away: when c came back every command on the
    topic failed with MAPPING, and none resolved it. c's item never took a message: the
    decided one stands. (One that did take messages still refuses: it is not dropped.)"""
    from tiered_core.static_topic import mapping_file

    real_put = mapping_file.TopicQueueMappingStore.put

    def crash_after_first(self, detail):
        real_put(self, detail)
        raise KeyboardInterrupt

    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 2, ["a", "b"])
        sent = [cluster.put_message(msg(i), 0).queue_offset for i in range(3)]
        monkeypatch.setattr(mapping_file.TopicQueueMappingStore, "put", crash_after_first)
        with pytest.raises(KeyboardInterrupt):
            cluster.remap_static_topic(TOPIC, ["c", "b"])
        monkeypatch.setattr(mapping_file.TopicQueueMappingStore, "put", real_put)
    with Cluster.open([c for c in configs if c.broker != "c"]) as cluster:
        cluster.remap_static_topic(TOPIC, ["b"])
        assert cluster.put_message(msg(3), 0).queue_offset == 3
    with Cluster.open(configs) as cluster:
        status = cluster.static_topic_status(TOPIC)
        assert [q["leader"]["bname"] for q in status["queues"]] == ["b", "b"]
        assert cluster.put_message(msg(4), 0).queue_offset == 4
        assert cluster.put_message(msg(5), 1).queue_offset == 0
        got = cluster.get_message("g", TOPIC, 0, 0, 16).messages
        got += cluster.get_message("g", TOPIC, 0, len(got), 16).messages
        assert [m.body for m in got][:3] == [b"m-%d" % i for i in sent]
        # one that took messages (or whose broker is not open) is never dropped
        from tiered_core.static_topic.topic_view import merge_items
        items = {b: d.hostedQueues[0] for b, d in cluster._details(TOPIC).items() if 0 in d.hostedQueues}
        with pytest.raises(MappingError):
            merge_items(TOPIC, 0, list(items.items()), unused=lambda item: False)
