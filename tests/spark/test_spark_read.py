"""The ``tiered`` data source and the export job, against a store written through the flat API."""

from __future__ import annotations

import math

import pytest
from sample_store import SampleSpec, write_sample
from spark_helpers import api_rows, message_row, parquet_rows, write_config

from tiered_core.codec.message import Message, decode_message, encode_message
from tiered_core.config import StoreConfig
from tiered_core.errors import ConfigError, InvalidOption, InvalidPath
from tiered_core.flat import FlatFileStore
from tiered_core.spark import count_partitions, plan_read, read
from tiered_core.spark.jobs import export
from tiered_core.spark.source.options import parse_read_options, parse_time

SPEC = SampleSpec(topics=("orders", "payments"), queues=2, messages=250, body_size=48)
CQ_MAX = 2000  # 100 consume-queue units per segment
UNITS = CQ_MAX // 20


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The sample store, plus commit-log bytes no consume-queue unit points at (a crash leftover)."""
    root = tmp_path_factory.mktemp("read-store")
    config_path = write_config(root / "tiered.toml", root / "data", cq_max=CQ_MAX)
    config = StoreConfig.load(config_path)
    assert write_sample(config, SPEC) == len(SPEC.topics) * SPEC.queues * SPEC.messages
    driver, metadata = config.open_driver(), config.open_metadata()
    flat_store = FlatFileStore(driver, metadata, config.flat_config())
    assert flat_store.load()
    flat = flat_store.compute_if_absent("orders", 0)
    orphan = encode_message(Message(topic="orders", body=b"orphan"), queue_id=0, queue_offset=SPEC.messages,
                            store_timestamp=SPEC.start_ms)
    flat.append_commit_log(orphan)
    assert flat.commit_commit_log()  # the crash comes before the consume queue's commit
    flat_store.shutdown()
    metadata.close()
    driver.close()
    return config_path


def store_time(i: int) -> int:
    return SPEC.start_ms + i * SPEC.step_ms


def segments_overlapping(start: int | None = None, end: int | None = None) -> int:
    """Consume-queue segments of one queue holding a message stored in [start, end]."""
    count = 0
    for k in range(math.ceil(SPEC.messages / UNITS)):
        first, last = store_time(k * UNITS), store_time(min((k + 1) * UNITS, SPEC.messages) - 1)
        if (start is None or last >= start) and (end is None or first <= end):
            count += 1
    return count


def test_export_equals_what_the_flat_api_reads(spark, store, tmp_path):
    expected = sorted(api_rows(store), key=lambda t: (t[0], t[1], t[2]))
    assert len(expected) == len(SPEC.topics) * SPEC.queues * SPEC.messages
    assert all(row[-1] != b"orphan" for row in expected)

    result = export(spark, store, tmp_path / "out")

    assert parquet_rows(result.path) == expected
    assert result.rows == len(expected)
    assert result.topics == len(SPEC.topics)
    assert result.partitions == count_partitions(store)
    with pytest.raises(InvalidPath, match="exists"):
        export(spark, store, tmp_path / "out")


def test_the_orphan_commit_log_bytes_are_really_there(store):
    # Guards the test above: the leftover message is in the commit log, after the last unit.
    config = StoreConfig.load(store)
    driver, metadata = config.open_driver(), config.open_metadata()
    try:
        flat = FlatFileStore(driver, metadata, config.flat_config()).compute_if_absent("orders", 0)
        last = decode_message(flat.get_message(SPEC.messages - 1))
        tail = flat.get_commit_log(last.commitlog_offset + last.store_size, 1 << 16)
        assert decode_message(tail).body == b"orphan"
    finally:
        metadata.close()
        driver.close()


def test_pruning_plans_only_the_partitions_asked_for(store):
    per_queue = segments_overlapping()
    assert per_queue == 3
    assert count_partitions(store) == len(SPEC.topics) * SPEC.queues * per_queue
    assert count_partitions(store, topics="orders") == SPEC.queues * per_queue
    assert count_partitions(store, topics="orders,payments", queues="1") == len(SPEC.topics) * per_queue
    assert count_partitions(store, topics="nosuchtopic") == 0
    start, end = store_time(150), store_time(180)
    assert count_partitions(store, topics="orders", queues="0", start_time=start) == segments_overlapping(start)
    assert count_partitions(store, topics="orders", queues="0", end_time=end) == segments_overlapping(None, end)
    assert count_partitions(store, queues="0", start_time=start, end_time=end) == (
        len(SPEC.topics) * segments_overlapping(start, end))
    # Large segments are split: at most max_units_per_partition units each.
    parts = plan_read(store, topics="orders", queues="0", max_units_per_partition=40)
    assert [p.units for p in parts] == [40, 40, 20] * 2 + [40, 10]
    assert sum(p.units for p in parts) == SPEC.messages


def test_spark_reads_exactly_the_rows_asked_for(spark, store):
    start, end = store_time(150), store_time(180)
    df = read(spark, store, topics=["orders"], queues="1", start_time=start,
              end_time="2023-11-14T22:16:20Z")  # store_time(180) as ISO 8601
    assert parse_time("end_time", "2023-11-14T22:16:20Z") == end
    assert df.rdd.getNumPartitions() == count_partitions(store, topics="orders", queues="1",
                                                        start_time=start, end_time=end)
    rows = df.selectExpr("topic", "queue_id", "queue_offset", "unix_millis(store_timestamp) AS ts").collect()
    assert sorted(r.queue_offset for r in rows) == [i for i in range(SPEC.messages) if start <= store_time(i) <= end]
    assert {(r.topic, r.queue_id) for r in rows} == {("orders", 1)}
    assert all(start <= r.ts <= end for r in rows)


def test_spark_format_option_works_and_empty_reads_are_empty(spark, store):
    df = spark.read.format("tiered").option("config", store).option("topics", "payments").load()
    assert df.columns == ["topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp",
                          "born_timestamp", "keys", "tags", "properties", "body"]
    first = df.where("queue_id = 0 AND queue_offset = 7").collect()
    assert len(first) == 1 and first[0].keys == ["k0-7", "id7"] and first[0].properties["n"] == "7"
    assert read(spark, store, topics="nosuchtopic").count() == 0
    # The config may also be given as text (for a planner that cannot see the file).
    inline = (spark.read.format("tiered").option("config_text", StoreConfig.load(store).to_toml())
              .option("topics", "payments").load())
    assert inline.count() == SPEC.queues * SPEC.messages


def test_bad_options_are_errors_naming_the_option(spark, store, tmp_path):
    cases = {
        "queues": {"queues": "1,x"},
        "topics": {"topics": "bad/topic"},
        "start_time": {"start_time": "yesterday"},
        "end_time": {"start_time": "200", "end_time": "100"},
        "max_units_per_partition": {"max_units_per_partition": "0"},
        "colour": {"colour": "red"},
    }
    for option, options in cases.items():
        with pytest.raises(InvalidOption) as info:
            parse_read_options(options)
        assert info.value.context["option"] == option
        assert repr(option) in str(info.value)
    with pytest.raises(InvalidOption, match="'config'"):
        count_partitions(None)
    with pytest.raises(ConfigError, match="does not exist"):
        count_partitions(tmp_path / "missing.toml")
    memory = write_config(tmp_path / "memory.toml", tmp_path / "memory", driver="memory", options={})
    with pytest.raises(ConfigError, match="inside one process"):
        count_partitions(memory)
    # Through Spark the message still names the option.
    with pytest.raises(Exception, match="option 'queues'"):
        spark.read.format("tiered").option("config", store).option("queues", "x").load().collect()


def test_rows_decode_like_the_api(store):
    # message_row (used for every comparison) keeps each field the API returns.
    config = StoreConfig.load(store)
    driver, metadata = config.open_driver(), config.open_metadata()
    try:
        flat = FlatFileStore(driver, metadata, config.flat_config()).compute_if_absent("payments", 1)
        row = message_row(decode_message(flat.get_message(3)))
    finally:
        metadata.close()
        driver.close()
    assert row[:3] == ("payments", 1, 3) and row[4] == store_time(3) and row[6] == ("k1-3", "id3")
