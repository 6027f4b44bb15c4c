"""The ``tiered`` streaming source reads a static topic by logic queue (issue 13): a real
3-broker cluster (stores, mapping files, posix tier), one broker closed and its store_path
deleted, Spark in local mode."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from stream_helpers import run_available_now_into
from test_spark_static_topic import write_cluster_toml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "static_topic"))

from static_topic_helpers import broker_configs  # noqa: E402

from tiered_core import Message  # noqa: E402
from tiered_core.common import now_ms  # noqa: E402
from tiered_core.errors import IllegalOffset, InvalidOption  # noqa: E402
from tiered_core.flat import FlatFileStore  # noqa: E402
from tiered_core.spark import register  # noqa: E402
from tiered_core.spark.source.options import parse_static_stream_options  # noqa: E402
from tiered_core.spark.source.static_stream import StaticTopicStreamReader, logic_queue_view  # noqa: E402
from tiered_core.static_topic import Cluster, LogicQueueMappingItem  # noqa: E402

TOPIC = "orders"
QUEUES = 4


def put(cluster, acked, first: int, count: int) -> None:
    for i in range(first, first + count):
        r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i), i % QUEUES)
        acked[i % QUEUES].append((r.queue_offset, b"m-%d" % i))
    cluster.dispatch(force=True)


def two_generations(tmp_path) -> tuple[Path, dict[int, list[tuple[int, bytes]]]]:
    """Logic queues 0 and 2 move from broker a to b; a is closed (drained) and its store_path
    deleted; 400 messages before the remap, 400 after. Returns the cluster file and what was acked."""
    cluster_file = write_cluster_toml(tmp_path)
    acked: dict[int, list[tuple[int, bytes]]] = {q: [] for q in range(QUEUES)}
    with Cluster.open(broker_configs(tmp_path)) as cluster:
        cluster.create_static_topic(TOPIC, QUEUES, ["a", "b"])
        put(cluster, acked, 0, 400)
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        put(cluster, acked, 400, 400)
        cluster.close_broker("a")  # drains: everything of a is in the tier
    shutil.rmtree(tmp_path / "a")
    return cluster_file, acked


def stream(spark, cluster_file: Path, **options):
    register(spark)
    reader = spark.readStream.format("tiered").option("cluster", str(cluster_file)).option("static_topic", TOPIC)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class Batches:
    """A foreachBatch sink keeping each micro-batch's (queue_id, queue_offset, body) rows by batch id
    (a batch Spark replays after a restart replaces its first delivery)."""

    def __init__(self) -> None:
        self.by_id: dict[int, list[tuple[int, int, bytes]]] = {}

    def __call__(self, df, batch_id: int) -> None:
        self.by_id[batch_id] = [(r.queue_id, r.queue_offset, bytes(r.body))
                                for r in df.select("queue_id", "queue_offset", "body").collect()]

    def per_queue(self) -> dict[int, list[tuple[int, bytes]]]:
        """Rows per logic queue in arrival order (batch id, then logic offset)."""
        out: dict[int, list[tuple[int, bytes]]] = {q: [] for q in range(QUEUES)}
        for batch_id in sorted(self.by_id):
            for q, offset, body in sorted(self.by_id[batch_id]):
                out[q].append((offset, body))
        return out


def run_available_now(spark, cluster_file, checkpoint, sink=None, **options) -> Batches:
    return run_available_now_into(stream(spark, cluster_file, **options),
                                  sink if sink is not None else Batches(), checkpoint)


def start_query(spark, cluster_file, checkpoint, sink: Batches, **options):
    """The stream running into ``sink`` with Spark's default trigger (stop it)."""
    return (stream(spark, cluster_file, **options).writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint)).start())


def test_max_messages_per_trigger_reads_both_generations_once_in_fair_micro_batches(spark, tmp_path):
    cluster_file, acked = two_generations(tmp_path)
    sink = run_available_now(spark, cluster_file, tmp_path / "ck", maxMessagesPerTrigger="120")
    got = sink.per_queue()
    assert got == acked  # every message once, in logic-offset order per logic queue
    for q in range(QUEUES):  # logic offsets contiguous across the generation boundary
        assert [o for o, _ in got[q]] == list(range(200))
    sizes = [len(rows) for _, rows in sorted(sink.by_id.items())]
    assert max(sizes) <= 120 and sum(sizes) == 800 and len(sizes) >= 7
    first = next(rows for _, rows in sorted(sink.by_id.items()) if rows)
    assert {q for q, _, _ in first} == set(range(QUEUES))  # the budget is shared by every logic queue
    assert max(sum(1 for r in first if r[0] == q) for q in range(QUEUES)) == 30


def test_a_restart_from_the_checkpoint_continues_where_it_stopped(spark, tmp_path):
    cluster_file, acked = two_generations(tmp_path)
    sink = Batches()
    query = start_query(spark, cluster_file, tmp_path / "ck", sink, maxMessagesPerTrigger="100")
    try:
        deadline = 300
        while len([b for b in sink.by_id.values() if b]) < 2 and deadline > 0:
            query.awaitTermination(0.5)
            deadline -= 0.5
            assert query.exception() is None, str(query.exception())
    finally:
        query.stop()
    read_before = sum(len(rows) for rows in sink.by_id.values())
    assert read_before >= 200
    with Cluster.open(broker_configs(tmp_path, names=("b", "c"))) as cluster:  # a is gone
        put(cluster, acked, 800, 200)
    run_available_now(spark, cluster_file, tmp_path / "ck", sink, maxMessagesPerTrigger="100")
    got = sink.per_queue()
    assert got == acked
    for q in range(QUEUES):
        assert [o for o, _ in got[q]] == list(range(250))


def test_starting_offsets_latest_reads_only_what_is_tiered_after_the_start(spark, tmp_path):
    cluster_file, acked = two_generations(tmp_path)
    sink = Batches()
    query = start_query(spark, cluster_file, tmp_path / "ck", sink, startingOffsets="latest")
    try:
        query.processAllAvailable()
        assert sum(len(rows) for rows in sink.by_id.values()) == 0
        new = {q: [] for q in range(QUEUES)}
        with Cluster.open(broker_configs(tmp_path, names=("b", "c"))) as cluster:
            put(cluster, new, 800, 40)
        query.processAllAvailable()
    finally:
        query.stop()
    assert sink.per_queue() == new
    assert all([o for o, _ in new[q]] == list(range(200, 210)) for q in range(QUEUES))


def test_json_starting_offsets_start_each_logic_queue_there(spark, tmp_path):
    cluster_file, acked = two_generations(tmp_path)
    # queue 0 inside its first generation (broker a, gone), 1 in its only one, 2 at the end, 3 earliest
    offsets = json.dumps({TOPIC: {"0": 50, "1": 150, "2": -1, "3": -2}})
    sink = run_available_now(spark, cluster_file, tmp_path / "ck", startingOffsets=offsets)
    first = {0: 50, 1: 150, 2: 200, 3: 0}
    assert sink.per_queue() == {q: [r for r in acked[q] if r[0] >= first[q]] for q in range(QUEUES)}


def test_bad_logic_queue_ids_and_unsupported_options_are_invalid_options_naming_the_option(spark, tmp_path):
    cluster_file, _ = two_generations(tmp_path)
    base = {"cluster": str(cluster_file), "static_topic": TOPIC}
    for offsets in ({TOPIC: {"4": 0}}, {"other": {"0": 0}}):
        with pytest.raises(InvalidOption) as info:
            StaticTopicStreamReader(*parse_static_stream_options({**base, "startingOffsets": json.dumps(offsets)}))
        assert info.value.context["option"] == "startingOffsets" and "'startingOffsets'" in str(info.value)
    for option, value in (("startingTimestamp", "0"), ("maxBytesPerTrigger", "100"), ("topics", TOPIC),
                          ("subscribePattern", ".*"), ("config", "tiered.toml"), ("queues", "1")):
        with pytest.raises(InvalidOption) as info:
            parse_static_stream_options({**base, option: value})
        assert info.value.context["option"] == option and repr(option) in str(info.value)
    with pytest.raises(Exception) as info:  # through Spark: refused at load(), before any query starts
        stream(spark, cluster_file, startingOffsets=json.dumps({TOPIC: {"7": 0}}))
    assert "option 'startingOffsets'" in str(info.value) and "INVALID_OPTION" in str(info.value)


def test_a_partly_tiered_generation_of_a_gone_broker_is_skipped_not_lost(spark, tmp_path, caplog):
    """The documented generation-boundary skip (README "Static topics"): offsets 10..14 never
    left broker a's local store; the stream moves on to the next generation, no data loss."""
    cluster_file = write_cluster_toml(tmp_path)
    with Cluster.open(broker_configs(tmp_path)) as cluster:
        cluster.create_static_topic(TOPIC, 1, ["a"])
        for i in range(15):
            if i == 10:
                cluster.dispatch(force=True)  # the tier holds a's offsets 0..9 only
            cluster.put_message(Message(topic=TOPIC, body=b"a-%d" % i), 0)
        cluster.remap_static_topic(TOPIC, ["b"])
        for i in range(5):
            assert cluster.put_message(Message(topic=TOPIC, body=b"b-%d" % i), 0).queue_offset == 15 + i
        cluster.close_broker("a", drain=False)
        cluster.dispatch(force=True)  # b's messages; a's offsets 10..14 stay in its local store
    shutil.rmtree(tmp_path / "a")
    sink = run_available_now(spark, cluster_file, tmp_path / "ck", maxMessagesPerTrigger="4")
    assert sink.per_queue()[0] == [(i, b"a-%d" % i) for i in range(10)] + [(15 + i, b"b-%d" % i) for i in range(5)]
    # the same planning in this process (Spark runs it in a Python worker): a logged skip, not an error
    reader = StaticTopicStreamReader(*parse_static_stream_options({"cluster": str(cluster_file),
                                                                   "static_topic": TOPIC}))
    with caplog.at_level(logging.WARNING, logger="tiered_core.spark.source.static_stream"):
        assert reader.latestOffset({TOPIC: {"0": 10}}, ReadAllAvailable()) == {TOPIC: {"0": 20}}
        parts = reader.partitions({TOPIC: {"0": 10}}, {TOPIC: {"0": 20}})
    assert [(p.bname, p.start, p.end, p.delta) for p in parts] == [("b", 0, 5, 15)]
    assert any("offsets 10..14 skipped at a generation boundary" in r.getMessage() for r in caplog.records)


def test_logic_queue_view_tells_skipped_from_lost_offsets():
    """Pure planning over mapping items: gen 0 (gone broker a) tiered 0..7 of 0..9; a hole to
    12; gen 1 (b) expired below physical 3 (logic 15); gen 2 (c) the leader."""
    items = [LogicQueueMappingItem(0, 0, "a", 0, 0, 10), LogicQueueMappingItem(1, 0, "b", 12, 0, 20),
             LogicQueueMappingItem(2, 1, "c", 32, 5, -1)]
    bounds = {("a", 0): (0, 8), ("b", 0): (3, 20), ("c", 1): (5, 9)}
    view = logic_queue_view(TOPIC, 0, items, bounds, gone={"a"})
    assert [(s.lo, s.hi) for s in view.spans] == [(0, 8), (15, 32), (32, 36)]
    assert view.resolve(5) == (5, 0, 0)
    assert view.resolve(8) == (15, 4, 3)  # 8..11 a boundary skip (untiered tail, hole), 12..14 expired
    assert view.count(0, 36) == 8 + 17 + 4 and view.advance(6, 5) == 18
    assert [(p.bname, p.start, p.end, p.delta) for p in view.partitions(6, 34)] == [
        ("a", 6, 8, 0), ("b", 3, 20, 12), ("c", 5, 7, 27)]
    # the same gen 0 on a broker whose store_path exists: its tail will be tiered, later generations wait
    waiting = logic_queue_view(TOPIC, 0, items, bounds, gone=set())
    assert [(s.lo, s.hi) for s in waiting.spans] == [(0, 8)] and waiting.end_offset == 8


def test_offsets_expired_from_the_tier_are_data_loss_unless_fail_on_data_loss_is_false(tmp_path, caplog):
    """Logic queue 0 on broker b, small segments; the tier's segments older than the first 200
    messages are expired: a start at 0 is an IllegalOffset naming the logic queue and offsets."""
    cluster_file = write_cluster_toml(tmp_path)
    configs = broker_configs(tmp_path, consume_queue_max_size=2000, commit_log_max_size=16 << 10)
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 1, ["b"])
        for i in range(250):
            if i == 200:
                cluster.dispatch(force=True)
                time.sleep(0.05)
                cut = now_ms()
                time.sleep(0.05)
            cluster.put_message(Message(topic=TOPIC, body=b"x" * 100), 0)
        cluster.dispatch(force=True)
    b = configs[1]
    driver, metadata = b.open_driver(), b.open_metadata()
    try:
        flat_store = FlatFileStore(driver, metadata, b.flat_config())
        assert flat_store.load()
        flat = flat_store.get(TOPIC, 0)
        flat.destroy_expired_file(cut)
        expired = flat.consume_queue_min_offset()
        flat_store.shutdown()
    finally:
        metadata.close()
        driver.close()
    assert 0 < expired <= 200
    base = {"cluster": str(cluster_file), "static_topic": TOPIC, "startingOffsets": json.dumps({TOPIC: {"0": 0}})}
    reader = StaticTopicStreamReader(*parse_static_stream_options(base))
    with pytest.raises(IllegalOffset) as err:
        reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert (err.value.context["queue_id"], err.value.context["offset"], err.value.context["end_offset"]) == (
        0, 0, expired)
    assert "logic queue 0" in str(err.value) and "failOnDataLoss" in str(err.value)
    reader = StaticTopicStreamReader(*parse_static_stream_options({**base, "failOnDataLoss": "false"}))
    with caplog.at_level(logging.WARNING, logger="tiered_core.spark.source.static_stream"):
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        rows = sum(batch.num_rows for part in reader.partitions(start, end) for batch in reader.read(part))
    assert end == {TOPIC: {"0": 250}} and rows == 250 - expired
    assert any(f"skipping offsets 0..{expired - 1}" in r.getMessage() for r in caplog.records)
