"""The static-topic mapping model and its per-broker file (seed 002): shape, validation, atomicity."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tiered_core.errors import ErrorCode, MappingError
from tiered_core.static_topic.mapping import LogicQueueMappingItem as Item
from tiered_core.static_topic.mapping import TopicQueueMappingDetail
from tiered_core.static_topic.mapping_file import TopicQueueMappingStore, mapping_path


def detail(bname: str = "a", **kw) -> TopicQueueMappingDetail:
    hosted = kw.pop("hostedQueues", {0: [Item(0, 0, "a", 0, 0, 100), Item(1, 0, "b", 100, 0)]})
    return TopicQueueMappingDetail(topic="t", totalQueues=kw.pop("totalQueues", 4), bname=bname,
                                   epoch=kw.pop("epoch", 7), hostedQueues=hosted, **kw)


def test_round_trip_uses_rocketmq_field_names(tmp_path):
    store = TopicQueueMappingStore(str(tmp_path), "a")
    store.put(detail())
    doc = json.loads(open(mapping_path(str(tmp_path))).read())
    assert set(doc) == {"topicQueueMappingInfoMap", "dataVersion"}
    d = doc["topicQueueMappingInfoMap"]["t"]
    assert set(d) == {"topic", "scope", "totalQueues", "bname", "epoch", "dirty", "currIdMap", "hostedQueues"}
    assert set(d["hostedQueues"]["0"][0]) == {"gen", "queueId", "bname", "logicOffset", "startOffset",
                                              "endOffset", "timeOfStart", "timeOfEnd"}
    assert d["scope"] == "__global__"
    assert doc["dataVersion"]["counter"] == 1
    again = TopicQueueMappingStore(str(tmp_path), "a").get("t")
    assert again.hostedQueues == detail().hostedQueues
    assert not os.path.exists(mapping_path(str(tmp_path)) + ".tmp")


def test_fastjson_bare_integer_keys_are_read(tmp_path):
    os.makedirs(tmp_path / "config")
    text = ('{"topicQueueMappingInfoMap":{"t":{"bname":"a","epoch":1,"totalQueues":2,"topic":"t",'
            '"hostedQueues":{1:[{"bname":"a","gen":0,"queueId":0,"logicOffset":0}]}}},'
            '"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1}}')
    (tmp_path / "config" / "topicQueueMapping.json").write_text(text)
    d = TopicQueueMappingStore(str(tmp_path), "a").get("t")
    assert d.hostedQueues[1][0].queueId == 0 and d.leader(1).bname == "a"


def test_file_copied_from_another_broker_is_refused(tmp_path):
    TopicQueueMappingStore(str(tmp_path / "a"), "a").put(detail())
    os.makedirs(tmp_path / "b" / "config")
    shutil.copy(mapping_path(str(tmp_path / "a")), mapping_path(str(tmp_path / "b")))
    with pytest.raises(MappingError) as err:
        TopicQueueMappingStore(str(tmp_path / "b"), "b")
    assert err.value.code is ErrorCode.MAPPING
    assert (err.value.topic, err.value.field, err.value.broker) == ("t", "bname", "a")
    assert "'a'" in str(err.value) and "'b'" in str(err.value)


@pytest.mark.parametrize("hosted,field,queue", [
    ({5: [Item(0, 0, "a", 0)]}, "hostedQueues", 5),                                   # out of range
    ({0: [Item(1, 0, "a", 0, 0, 10), Item(1, 1, "a", 10)]}, "gen", 0),                # gen not increasing
    ({0: [Item(0, 0, "a", 0, 0, 10), Item(1, 0, "a", 10)]}, "queueId", 0),            # physical queue reused
    ({0: [Item(0, 0, "a", -1, 0, 10), Item(1, 1, "a", 10)]}, "logicOffset", 0),       # -1 not on the newest
    ({0: [Item(0, 0, "a", 0, 0, 10), Item(1, 1, "a", 5)]}, "logicOffset", 0),         # overlapping ranges
    ({0: [Item(0, 0, "a", 0, 0, -1), Item(1, 1, "a", 5)]}, "endOffset", 0),           # open item not newest
])
def test_invalid_items_name_topic_queue_and_field(tmp_path, hosted, field, queue):
    store = TopicQueueMappingStore(str(tmp_path), "a")
    with pytest.raises(MappingError) as err:
        store.put(detail(hostedQueues=hosted))
    assert (err.value.topic, err.value.queue, err.value.field) == ("t", queue, field)
    assert store.get("t") is None and not os.path.exists(mapping_path(str(tmp_path)))


def test_undecided_item_has_no_offsets():
    item = Item(1, 0, "b", -1)
    with pytest.raises(MappingError) as err:
        item.to_logic(3)
    assert err.value.field == "logicOffset"
