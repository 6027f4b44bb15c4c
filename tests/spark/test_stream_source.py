"""The ``tiered`` streaming source against real stores (flat API, SQLite metadata, posix
backend) and Spark in local mode; the Arrow read path against the MessageExt one."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows
from sample_store import SampleSpec, write_sample
from spark_helpers import api_rows, messages_to_batch, row_tuple, write_config
from stream_helpers import run_available_now_into

from tiered_core.codec.consume_queue import decode_cq_unit
from tiered_core.codec.message import Message, MessageVersion, encode_message
from tiered_core.common import FileSegmentType
from tiered_core.config import StoreConfig
from tiered_core.errors import ConfigError, IllegalOffset, InvalidOption
from tiered_core.flat import FlatFileStore
from tiered_core.flat.batch_check import check_batch
from tiered_core.spark.source.arrow_rows import batch_to_arrow
from tiered_core.spark.source.stream_offsets import fair_split, queue_views
from tiered_core.spark.source.options import parse_stream_options
from tiered_core.spark.source.schema import arrow_schema
from tiered_core.spark.source.stream import TieredStreamReader


CQ_MAX = 2000  # 100 consume-queue units per segment
SPEC = SampleSpec(topics=("orders", "payments"), queues=2, messages=250, body_size=48)


def store_time(i: int, spec: SampleSpec = SPEC) -> int:
    return spec.start_ms + i * spec.step_ms


def new_store(tmp_path, name: str = "store", spec: SampleSpec | None = SPEC) -> str:
    root = tmp_path / name
    root.mkdir()
    config_path = write_config(root / "tiered.toml", root / "data", cq_max=CQ_MAX)
    if spec is not None:
        write_sample(StoreConfig.load(config_path), spec)
    return config_path


def stream(spark, config_path: str, **options):
    reader = spark.readStream.format("tiered").option("config", config_path)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class Collector:
    """A foreachBatch sink keeping each micro-batch's (topic, queue_id, queue_offset) rows."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int, int]]] = []

    def __call__(self, df, batch_id: int) -> None:
        rows = df.select("topic", "queue_id", "queue_offset").collect()
        self.batches.append(sorted((r.topic, r.queue_id, r.queue_offset) for r in rows))

    @property
    def rows(self) -> list[tuple[str, int, int]]:
        return sorted(row for batch in self.batches for row in batch)


def run_available_now(spark, config_path: str, checkpoint, **options) -> Collector:
    return run_available_now_into(stream(spark, config_path, **options), Collector(), checkpoint)


def expected_rows(spec: SampleSpec, topics=None, first: dict | None = None) -> list[tuple[str, int, int]]:
    first = first or {}
    return sorted((t, q, i) for t in spec.topics if topics is None or t in topics for q in range(spec.queues)
                  for i in range(first.get((t, q), 0), spec.messages))


# -- the Arrow read path ----------------------------------------------------------------------


def test_columnar_builder_equals_messages_to_batch():
    messages = [
        Message(topic="orders", body=b"plain", keys=["k1", "k2"], tags="TagA", properties={"a": "1", "b": "two"}),
        Message(topic="orders", body=b""),  # empty body, no keys, tags or properties
        Message(topic="orders", body="héllo wörld ✓".encode(), keys=["ключ"], tags="标签",
                properties={"名": "値", "emoji": "🙂"}),
        Message(topic="orders", body=bytes(range(256)) * 4, keys="spaced keys here", born_host=("::1", 9)),
    ]
    buf = bytearray()
    units = []
    for i, msg in enumerate(messages):
        raw = encode_message(msg, queue_id=3, queue_offset=10 + i, store_timestamp=1_700_000_000_000 + i,
                             physical_offset=5000 + len(buf),
                             version=MessageVersion.V2 if i % 2 else MessageVersion.V1)
        units.append((5000 + len(buf), len(raw), 0))
        buf += raw
    batch = check_batch(units, bytes(buf), 5000, topic="orders", queue_id=3, queue_offset=10)
    assert batch.error is None and len(batch) == len(messages)
    schema = arrow_schema()
    columnar = batch_to_arrow(batch, schema)
    reference = messages_to_batch(batch.messages(), schema)
    assert columnar.schema == reference.schema
    assert columnar.equals(reference)
    # the first three have IPv4 hosts (the header fields read by Arrow kernels); the fourth an
    # IPv6 born host (another header size: one unpack per message)
    assert batch_to_arrow(batch, schema, stop=3).equals(messages_to_batch(batch.messages(0, 3), schema))
    assert batch.message(3).sys_flag & 0x10 and not any(batch.message(i).sys_flag & 0x30 for i in range(3))
    assert columnar.column("keys").to_pylist()[3] == ["spaced", "keys", "here"]
    assert columnar.column("tags").to_pylist()[2] == "标签"
    # the time filter and the slice keep exactly the rows asked for
    kept = batch_to_arrow(batch, schema, lambda ts: ts % 2 == 0, start=1)
    assert kept.equals(messages_to_batch([batch.message(2)], schema))


def test_properties_are_parsed_like_parse_properties_even_when_odd():
    from tiered_core.codec.message import parse_properties
    from tiered_core.spark.source.arrow_rows import properties_columns

    schema = arrow_schema()
    for texts in (
        ["", "a\x01b", "\x01x\x02k\x01\x02z\x01v\x01w\x02KEYS\x01 a  b \x02", "TAGS\x01t\x02", "q", "ü\x01ö\x02"],
        ["a\x011\x02b\x012\x02a\x013\x02", "KEYS\x01x\x02KEYS\x01y z\x02TAGS\x01p\x02TAGS\x01q"],  # repeated names
    ):
        props, keys, tags = properties_columns(texts, schema)
        parsed = [parse_properties(t) for t in texts]
        assert props.to_pylist() == [list(p.items()) for p in parsed]
        assert keys.to_pylist() == [[k for k in (p.get("KEYS") or "").split(" ") if k] for p in parsed]
        assert tags.to_pylist() == [p.get("TAGS") for p in parsed]


# -- fair sharing ------------------------------------------------------------------------------


def test_fair_split_is_max_min_fair_and_deterministic():
    need = {("a", 0): 1000, ("a", 1): 1000, ("b", 0): 100, ("b", 1): 50, ("c", 0): 0}
    assert fair_split(need, 500) == {("a", 0): 175, ("a", 1): 175, ("b", 0): 100, ("b", 1): 50, ("c", 0): 0}
    assert fair_split(need, 10_000) == need
    split = fair_split({("a", q): 1000 for q in range(3)}, 500)
    assert sum(split.values()) == 500 and max(split.values()) - min(split.values()) <= 1
    assert fair_split({("a", q): 1000 for q in range(3)}, 500) == split
    assert fair_split({("a", 0): 5, ("a", 1): 5}, 0) == {("a", 0): 1, ("a", 1): 0}  # the stream still moves


# -- starting positions ---------------------------------------------------------------------


def test_earliest_reads_every_committed_message_like_the_flat_api(spark, tmp_path):
    store = new_store(tmp_path)
    sink = run_available_now(spark, store, tmp_path / "ck", startingOffsets="earliest")
    expected = sorted((r[0], r[1], r[2]) for r in api_rows(store))
    assert len(expected) == len(SPEC.topics) * SPEC.queues * SPEC.messages
    assert sink.rows == expected
    # the columns hold what the flat API serves, not just the offsets
    full = (stream(spark, store, topics="payments").writeStream.format("memory").queryName("stream_full")
            .option("checkpointLocation", str(tmp_path / "ck-full")).trigger(availableNow=True).start())
    full.awaitTermination(300)
    got = sorted(row_tuple(r.asDict()) for r in spark.sql(
        "SELECT topic, queue_id, queue_offset, commitlog_offset, unix_millis(store_timestamp) AS store_timestamp, "
        "unix_millis(born_timestamp) AS born_timestamp, keys, tags, properties, body FROM stream_full").collect())
    assert got == sorted(r for r in api_rows(store) if r[0] == "payments")


def test_latest_reads_only_what_is_committed_after_the_start(spark, tmp_path):
    store = new_store(tmp_path)
    sink = Collector()
    query = (stream(spark, store, startingOffsets="latest", topics="orders").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        query.processAllAvailable()
        assert sink.rows == []
        write_sample(StoreConfig.load(store), SampleSpec(topics=("orders", "payments"), queues=2, messages=30,
                                                         body_size=48))
        query.processAllAvailable()
    finally:
        query.stop()
    assert sink.rows == sorted(("orders", q, i) for q in range(2) for i in range(250, 280))


def test_json_offsets_start_each_named_queue_there_and_others_at_the_earliest(spark, tmp_path):
    store = new_store(tmp_path)
    offsets = json.dumps({"orders": {"0": 200, "1": -1}, "payments": {"1": -2}})
    sink = run_available_now(spark, store, tmp_path / "ck", startingOffsets=offsets)
    assert sink.rows == expected_rows(SPEC, first={("orders", 0): 200, ("orders", 1): SPEC.messages})


def test_starting_timestamp_starts_each_queue_at_its_first_message_stored_at_or_after_it(spark, tmp_path):
    store = new_store(tmp_path)
    sink = run_available_now(spark, store, tmp_path / "ck", startingTimestamp=str(store_time(150) - 1),
                             topics="orders")
    assert sink.rows == expected_rows(SPEC, topics=("orders",), first={("orders", 0): 150, ("orders", 1): 150})
    # a time after the last message: nothing yet; before the first: everything
    assert run_available_now(spark, store, tmp_path / "ck2", startingTimestamp=str(store_time(10_000))).rows == []
    assert len(run_available_now(spark, store, tmp_path / "ck3", startingTimestamp="2000-01-01T00:00:00Z").rows) \
        == len(SPEC.topics) * SPEC.queues * SPEC.messages


# -- limits -----------------------------------------------------------------------------------


def uneven_store(tmp_path) -> str:
    store = new_store(tmp_path, spec=None)
    config = StoreConfig.load(store)
    write_sample(config, SampleSpec(topics=("big",), queues=2, messages=1000, body_size=16))
    write_sample(config, SampleSpec(topics=("small",), queues=1, messages=100, body_size=16))
    write_sample(config, SampleSpec(topics=("tiny",), queues=1, messages=50, body_size=16))
    return store


def test_max_messages_per_trigger_gives_fair_micro_batches_of_at_most_500(spark, tmp_path):
    store = uneven_store(tmp_path)
    sink = run_available_now(spark, store, tmp_path / "ck", maxMessagesPerTrigger="500")
    sizes = [len(b) for b in sink.batches if b]
    assert all(n <= 500 for n in sizes) and sum(sizes) == 2150
    assert sizes == [500, 500, 500, 500, 150]

    def per_queue(batch):
        out: dict = {}
        for topic, queue_id, _ in batch:
            out[(topic, queue_id)] = out.get((topic, queue_id), 0) + 1
        return out

    # the small queues are drained in the first micro-batch; the big ones share the rest evenly
    assert per_queue(sink.batches[0]) == {("big", 0): 175, ("big", 1): 175, ("small", 0): 100, ("tiny", 0): 50}
    assert per_queue(sink.batches[1]) == {("big", 0): 250, ("big", 1): 250}
    assert sink.rows == sorted([("big", q, i) for q in range(2) for i in range(1000)]
                               + [("small", 0, i) for i in range(100)] + [("tiny", 0, i) for i in range(50)])


def test_max_bytes_per_trigger_bounds_micro_batches_through_spark(spark, tmp_path):
    store = new_store(tmp_path)
    source, opts = parse_stream_options({"config": store, "topics": "orders"})
    size = TieredStreamReader(source, opts).plan_views()[("orders", 0)].average_message_size()
    sink = run_available_now(spark, store, tmp_path / "ck", topics="orders", maxBytesPerTrigger=str(100 * size))
    sizes = [len(b) for b in sink.batches if b]
    assert len(sizes) >= 5 and all(n <= 100 for n in sizes), sizes
    assert sink.rows == expected_rows(SPEC, topics=("orders",))


def test_read_limits_from_the_engine_override_the_options(tmp_path):
    store = uneven_store(tmp_path)
    source, opts = parse_stream_options({"config": store, "maxMessagesPerTrigger": "500",
                                         "maxBytesPerTrigger": "1000000"})
    reader = TieredStreamReader(source, opts)
    assert reader.getDefaultReadLimit() == ReadMaxRows(500)
    start = reader.initialOffset()
    assert start == {"big": {"0": 0, "1": 0}, "small": {"0": 0}, "tiny": {"0": 0}}
    everything = {"big": {"0": 1000, "1": 1000}, "small": {"0": 100}, "tiny": {"0": 50}}
    assert reader.latestOffset(start, ReadAllAvailable()) == everything
    assert reader.latestOffset(start, ReadMaxRows(4)) == {"big": {"0": 1, "1": 1}, "small": {"0": 1},
                                                          "tiny": {"0": 1}}
    only_bytes = TieredStreamReader(*parse_stream_options({"config": store, "maxBytesPerTrigger": "10"}))
    assert only_bytes.getDefaultReadLimit() == ReadMaxBytes(10)
    one = only_bytes.latestOffset(start, ReadMaxBytes(10))  # smaller than any message: one message moves
    assert sum(int(o) for qs in one.values() for o in qs.values()) == 1
    # a byte budget of ~40 messages' worth reads about that many, shared over the four queues
    size = reader.plan_views()[("big", 0)].average_message_size()
    capped = reader.latestOffset(start, ReadMaxBytes(40 * size))
    moved = sum(int(o) for qs in capped.values() for o in qs.values())
    assert 36 <= moved <= 40 and all(int(o) >= 9 for qs in capped.values() for o in qs.values())


def test_subscribe_pattern_picks_up_new_topics_and_queues_while_running(spark, tmp_path):
    store = new_store(tmp_path)
    sink = Collector()
    query = (stream(spark, store, subscribePattern="ord.*").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        query.processAllAvailable()
        assert sink.rows == expected_rows(SPEC, topics=("orders",))
        write_sample(StoreConfig.load(store), SampleSpec(topics=("orders_eu", "other"), queues=3, messages=20))
        query.processAllAvailable()
    finally:
        query.stop()
    assert sink.rows == sorted(expected_rows(SPEC, topics=("orders",))
                               + [("orders_eu", q, i) for q in range(3) for i in range(20)])


# -- expired data -------------------------------------------------------------------------------


@contextlib.contextmanager
def open_flat(store: str, topic: str, queue_id: int):
    """(flat file, metadata) of one queue of ``store``, opened through the flat API."""
    config = StoreConfig.load(store)
    driver, metadata = config.open_driver(), config.open_metadata()
    try:
        flat_store = FlatFileStore(driver, metadata, config.flat_config())
        assert flat_store.load()
        yield flat_store.get(topic, queue_id), metadata
        flat_store.shutdown()
    finally:
        metadata.close()
        driver.close()


def expired_store(tmp_path) -> str:
    """The sample store with orders/0's messages before offset 100 expired from the tier."""
    store = new_store(tmp_path)
    with open_flat(store, "orders", 0) as (flat, _metadata):
        flat.destroy_expired_file(store_time(100))
        assert flat.consume_queue_min_offset() == 100
    return store


def test_an_expired_start_fails_naming_topic_queue_and_both_offsets(spark, tmp_path):
    store = expired_store(tmp_path)
    offsets = json.dumps({"orders": {"0": 40}})
    with pytest.raises(Exception) as info:
        run_available_now(spark, store, tmp_path / "ck", startingOffsets=offsets)
    text = str(info.value)
    assert "ILLEGAL_OFFSET" in text and "topic 'orders' queue 0" in text
    assert "next offset 40" in text and "min offset 100" in text and "failOnDataLoss" in text
    # the typed error itself, where the source runs
    reader = TieredStreamReader(*parse_stream_options({"config": store, "startingOffsets": offsets}))
    with pytest.raises(IllegalOffset) as err:
        reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert (err.value.topic, err.value.queue_id, err.value.offset, err.value.min_offset) == ("orders", 0, 40, 100)


def test_fail_on_data_loss_false_skips_ahead_and_logs(spark, tmp_path, caplog):
    store = expired_store(tmp_path)
    offsets = json.dumps({"orders": {"0": 40}})
    sink = run_available_now(spark, store, tmp_path / "ck", startingOffsets=offsets, failOnDataLoss="false")
    assert sink.rows == expected_rows(SPEC, first={("orders", 0): 100})
    reader = TieredStreamReader(*parse_stream_options({"config": store, "startingOffsets": offsets,
                                                       "failOnDataLoss": "false"}))
    with caplog.at_level(logging.WARNING, logger="tiered_core.spark.source.stream"):
        end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert end["orders"]["0"] == SPEC.messages
    assert any(r.levelno == logging.WARNING and "'orders' queue 0" in r.getMessage()
               and "skipping offsets 40..99" in r.getMessage() for r in caplog.records)


def test_messages_whose_commit_log_expired_under_live_units_are_data_loss_too(spark, tmp_path):
    store = new_store(tmp_path)
    config = StoreConfig.load(store)
    with open_flat(store, "orders", 1) as (flat, metadata):
        assert flat.commit_log.destroy_expired(store_time(100)) > 0  # the commit log only (RocketMQ #8076)
        cl_min = flat.commit_log_min_offset()
        first_kept = next(i for i in range(SPEC.messages)
                          if decode_cq_unit(flat.get_consume_queue(i), 0)[0] >= cl_min)
        assert 0 < first_kept <= 100
        assert any(m.base_offset == 0 for m in metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE))
                   if m.path.endswith("/orders/1"))  # the units of the expired messages are still there
    # earliest is the first message the tier can still serve
    expected = expected_rows(SPEC, topics=("orders",), first={("orders", 1): first_kept})
    assert run_available_now(spark, store, tmp_path / "ck", topics="orders").rows == expected
    # a start before it is data loss
    offsets = json.dumps({"orders": {"1": 0}})
    with pytest.raises(Exception) as info:
        run_available_now(spark, store, tmp_path / "ck2", topics="orders", startingOffsets=offsets)
    text = str(info.value)
    assert "topic 'orders' queue 1" in text and f"min offset {first_kept}" in text and "next offset 0" in text
    sink = run_available_now(spark, store, tmp_path / "ck3", topics="orders", startingOffsets=offsets,
                             failOnDataLoss="false")
    assert sink.rows == expected
    # units planned before the commit log expired under them are caught where they are read
    source, opts = parse_stream_options({"config": store, "topics": "orders"})
    reader = TieredStreamReader(source, opts)
    metadata = config.open_metadata()
    try:
        view = queue_views(config, metadata, opts.wants_topic)[("orders", 1)]  # before the readable-min check
    finally:
        metadata.close()
    with pytest.raises(IllegalOffset, match=f"messages 0..{first_kept - 1} are no longer"):
        for part in view.partitions(0, SPEC.messages):
            list(reader.read(part))


# -- committed offsets only ------------------------------------------------------------------------


def test_the_source_never_reads_units_past_the_metadata_committed_offset(spark, tmp_path):
    store = new_store(tmp_path)
    config = StoreConfig.load(store)
    cq = int(FileSegmentType.CONSUME_QUEUE)
    metadata = config.open_metadata()
    committed = {(m.path, m.base_offset): m for m in metadata.iterate_file_segments(cq)}
    metadata.close()
    # 40 more messages reach the backend (commit log and consume queue); then the consume
    # queue's metadata is put back as it was: a writer that crashed after writing the units
    # to the backend but before recording them in the metadata.
    write_sample(config, SampleSpec(topics=("orders",), queues=1, messages=40, body_size=48))
    metadata = config.open_metadata()
    try:
        for m in list(metadata.iterate_file_segments(cq)):
            old = committed.get((m.path, m.base_offset))
            if old is None:
                metadata.delete_file_segment(cq, m.path, m.base_offset)
            elif old.size != m.size:
                metadata.update_file_segment(old)
    finally:
        metadata.close()
    # guard: the units are on the backend, and the batch reader (open end) does read them
    batch_rows = spark.read.format("tiered").option("config", store).option("topics", "orders").load()
    assert batch_rows.where("queue_id = 0").count() == SPEC.messages + 40
    sink = run_available_now(spark, store, tmp_path / "ck", topics="orders")
    assert sink.rows == expected_rows(SPEC, topics=("orders",))


# -- bad options ----------------------------------------------------------------------------------


BAD_OPTIONS = {
    "subscribePattern": {"subscribePattern": "ord(ers"},
    "topics": {"topics": "bad/topic"},
    "maxMessagesPerTrigger": {"maxMessagesPerTrigger": "0"},
    "maxBytesPerTrigger": {"maxBytesPerTrigger": "-5"},
    "startingOffsets": {"startingOffsets": "{not json"},
    "startingTimestamp": {"startingTimestamp": "yesterday"},
    "failOnDataLoss": {"failOnDataLoss": "maybe"},
    "colour": {"colour": "red"},
    "static_topic": {"static_topic": "orders"},
}
MORE_BAD_OPTIONS = [
    ("maxMessagesPerTrigger", {"maxMessagesPerTrigger": "12.5"}),
    ("maxMessagesPerTrigger", {"maxMessagesPerTrigger": "-1"}),
    ("maxBytesPerTrigger", {"maxBytesPerTrigger": "lots"}),
    ("maxBytesPerTrigger", {"maxBytesPerTrigger": "0"}),
    ("subscribePattern", {"topics": "orders", "subscribePattern": "ord.*"}),
    ("startingOffsets", {"startingOffsets": json.dumps({"orders": {"0": "x"}})}),
    ("startingOffsets", {"startingOffsets": json.dumps({"orders": {"zero": 1}})}),
    ("startingOffsets", {"startingOffsets": json.dumps(["orders"])}),
    ("startingTimestamp", {"startingOffsets": "earliest", "startingTimestamp": "0"}),
]


@pytest.mark.parametrize("option,options", list(BAD_OPTIONS.items()) + MORE_BAD_OPTIONS)
def test_bad_options_are_typed_errors_naming_the_option(option, options, tmp_path):
    store = new_store(tmp_path, spec=None)
    with pytest.raises(InvalidOption) as info:
        parse_stream_options({"config": store, **options})
    assert info.value.context["option"] == option
    assert repr(option) in str(info.value) and info.value.code.value == "INVALID_OPTION"


def test_json_offsets_of_unknown_topics_or_queues_are_refused_before_the_query_starts(tmp_path):
    store = new_store(tmp_path)
    cases = [({"orders": {"7": 0}}, {}), ({"nosuchtopic": {"0": 0}}, {}),
             ({"payments": {"0": 0}}, {"topics": "orders"})]
    for offsets, extra in cases:
        with pytest.raises(InvalidOption) as info:
            TieredStreamReader(*parse_stream_options({"config": store, "startingOffsets": json.dumps(offsets),
                                                      **extra}))
        assert info.value.context["option"] == "startingOffsets" and "'startingOffsets'" in str(info.value)
    memory = write_config(tmp_path / "memory.toml", tmp_path / "memory", driver="memory", options={})
    with pytest.raises(ConfigError, match="inside one process"):
        TieredStreamReader(*parse_stream_options({"config": memory}))


def test_bad_options_fail_the_query_before_it_starts_naming_the_option(spark, tmp_path):
    store = new_store(tmp_path)
    cases = dict(BAD_OPTIONS)
    del cases["static_topic"]  # a static-topic stream: tests/spark/test_stream_static_topic.py
    cases["startingOffsets"] = {"startingOffsets": json.dumps({"orders": {"9": 0}})}
    for option, options in cases.items():
        with pytest.raises(Exception) as info:
            stream(spark, store, **options)  # load() checks the options
            pytest.fail(f"load() accepted bad option {option!r}")
        text = str(info.value)
        assert f"option {option!r}" in text and "INVALID_OPTION" in text, text
    # a stream that only uses options it shares with the batch source still loads and runs
    assert run_available_now(spark, store, tmp_path / "ck-ok", topics="orders").rows == \
        expected_rows(SPEC, topics=("orders",))
