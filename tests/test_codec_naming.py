"""Segment file names and paths (RocketMQ PosixFileSegment layout)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_core.codec import (
    INDEX_TOPIC,
    SegmentPathInfo,
    cluster_dir,
    file_name_to_offset,
    index_path,
    index_queue_path,
    md5_prefix,
    offset_to_file_name,
    parse_segment_path,
    queue_path,
    segment_dir,
    segment_path,
    validate_topic,
)
from tiered_core.errors import IllegalParam
from tiered_core.common import FileSegmentType


def test_digest_file_name_vectors():
    assert offset_to_file_name(0) == "cfcd208400000000000000000000"
    assert offset_to_file_name(4294937144) == "b10da56800000000004294937144"
    assert file_name_to_offset("cfcd208400000000000000000000") == 0
    assert file_name_to_offset("b10da56800000000004294937144") == 4294937144


def test_digest_hash_and_path_vectors():
    assert md5_prefix("TieredStorageDailyTest") == "161c08ff"
    assert queue_path("BrokerName", "topicName", 2) == "BrokerName/topicName/2"
    assert index_queue_path("brokerName") == "brokerName/rmq_sys_INDEX/0"


def test_segment_and_index_paths():
    h = hashlib.md5(b"DefaultCluster").hexdigest()[:8]
    c = f"{h}_DefaultCluster"
    assert cluster_dir("DefaultCluster") == c
    cl = segment_path("DefaultCluster", "broker-a", "TopicTest", 3, FileSegmentType.COMMIT_LOG, 0)
    assert cl == f"{c}/broker-a/TopicTest/3/COMMIT_LOG/cfcd208400000000000000000000"
    cq = segment_path("DefaultCluster", "broker-a", "TopicTest", 3, "CONSUME_QUEUE", 4294937144)
    assert cq == f"{c}/broker-a/TopicTest/3/CONSUME_QUEUE/b10da56800000000004294937144"
    assert index_path("DefaultCluster", "broker-a", 0) == \
        f"{c}/broker-a/rmq_sys_INDEX/0/INDEX/cfcd208400000000000000000000"
    assert segment_dir("DefaultCluster", "broker-a", "T", 0, 1) == f"{c}/broker-a/T/0/CONSUME_QUEUE"


def test_file_name_strictness():
    # RocketMQ reads only the last 20 characters; strict mode checks the hash too.
    assert file_name_to_offset("whatever00000000000000000042") == 42
    with pytest.raises(IllegalParam):
        file_name_to_offset("whatever00000000000000000042", strict=True)
    assert file_name_to_offset(offset_to_file_name(42), strict=True) == 42


@pytest.mark.parametrize("name", ["", "123", "cfcd20840000000000000000000x", 42,
                                  "x" * 8 + "99999999999999999999"])
def test_bad_file_names(name):
    with pytest.raises(IllegalParam):
        file_name_to_offset(name)


@pytest.mark.parametrize("offset", [-1, 2**63, 1.0, True, "0"])
def test_bad_offsets(offset):
    with pytest.raises(IllegalParam):
        offset_to_file_name(offset)


@pytest.mark.parametrize("topic", ["TopicTest", "%RETRY%group_1", "%DLQ%g", "a|b", "a-b_c",
                                   "x" * 127, INDEX_TOPIC])
def test_valid_topics(topic):
    assert validate_topic(topic) == topic


@pytest.mark.parametrize("topic", ["", "x" * 128, "../etc", "a/b", "a b", "a.b", "主题", "a\x00",
                                   None, "..", "a\\b"])
def test_invalid_topics_name_the_topic(topic):
    with pytest.raises(IllegalParam) as ei:
        validate_topic(topic)
    assert ei.value.topic == topic


@pytest.mark.parametrize("cluster,broker", [("", "b"), ("..", "b"), ("a/b", "b"), ("c", "."),
                                            ("c", "x/y"), ("c", "a\\b"), ("c", "a\nb"), ("c", "")])
def test_cluster_and_broker_names_cannot_escape(cluster, broker):
    with pytest.raises(IllegalParam):
        segment_path(cluster, broker, "T", 0, "COMMIT_LOG", 0)


@pytest.mark.parametrize("queue_id,file_type", [(-1, "COMMIT_LOG"), (2**31, "COMMIT_LOG"),
                                                (True, "COMMIT_LOG"), (0, "commit_log"),
                                                (0, 7), (0, "INDEXX")])
def test_bad_queue_ids_and_types(queue_id, file_type):
    with pytest.raises(IllegalParam):
        segment_path("c", "b", "T", queue_id, file_type, 0)


def test_parse_segment_path_inverts_segment_path():
    path = segment_path("my_cluster_1", "broker-a", "%RETRY%g", 17,
                        FileSegmentType.CONSUME_QUEUE, 2000)
    assert parse_segment_path(path) == SegmentPathInfo(
        "my_cluster_1", "broker-a", "%RETRY%g", 17, FileSegmentType.CONSUME_QUEUE, 2000)
    info = parse_segment_path(index_path("c", "b", 5))
    assert (info.topic, info.queue_id, info.file_type, info.base_offset) == \
        (INDEX_TOPIC, 0, FileSegmentType.INDEX, 5)


_good = segment_path("c", "b", "T", 1, "COMMIT_LOG", 100)


@pytest.mark.parametrize("path", [
    "",
    "tieredStoreMetadata.json",
    _good + "/extra",
    "root/" + _good,
    _good.replace("COMMIT_LOG", "OTHER"),
    _good.replace("/1/", "/01/"),
    _good.replace("/1/", "/-1/"),
    _good.replace("/T/", "/T.x/"),
    _good[:-28] + "00000000" + _good[-20:],  # wrong hash in the file name
    "00000000_c" + _good[10:],  # wrong cluster hash
    _good.split("/", 1)[0][:9] + "/" + _good.split("/", 1)[1],  # empty cluster
    _good + ".tmp",
])
def test_non_segment_paths_are_rejected(path):
    with pytest.raises(IllegalParam) as ei:
        parse_segment_path(path)
    assert ei.value.path == path


# Lone surrogates have no UTF-8 form: a name holding one is refused (see test_fuzz).
_names = st.text(st.characters(min_codepoint=0x20, blacklist_characters="/\\", blacklist_categories=("Cs",)),
                 min_size=1,
                 max_size=20).filter(lambda s: s not in (".", ".."))
_topics = st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True)


@given(_names, _names, _topics, st.integers(0, 2**31 - 1), st.sampled_from(list(FileSegmentType)),
       st.integers(0, 2**63 - 1))
def test_path_round_trip_property(cluster, broker, topic, queue_id, file_type, base):
    path = segment_path(cluster, broker, topic, queue_id, file_type, base)
    assert not path.startswith("/") and ".." not in path.split("/")
    assert parse_segment_path(path) == (cluster, broker, topic, queue_id, file_type, base)
