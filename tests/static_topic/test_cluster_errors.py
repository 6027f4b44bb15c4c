"""Bad input to a static-topic cluster gets a typed error naming it; nothing stored is harmed."""

from __future__ import annotations

import os
import shutil

import pytest

from tiered_core import Message
from tiered_core.errors import ConfigError, ErrorCode, Fenced, IllegalParam, MappingError, StateConflict
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
