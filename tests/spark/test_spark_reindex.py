"""The re-index job: a store whose messages reached the tier without their keys (written
through the flat API, as ``tiered spark import`` writes) gets its key index back."""

from __future__ import annotations

import json
import shutil

import pytest
from sample_store import SampleSpec, write_sample
from spark_helpers import write_config

from tiered_core import TieredMessageStore
from tiered_core.cli import main
from tiered_core.common import FileSegmentType
from tiered_core.config import StoreConfig
from tiered_core.errors import StateConflict
from tiered_core.index.service import INDEX_DIR_NAME
from tiered_core.spark.jobs import reindex
from tiered_core.index.batch_keys import batch_keys

SPEC = SampleSpec(topics=("orders", "audit"), queues=2, messages=180, body_size=64)
TOTAL = len(SPEC.topics) * SPEC.queues * SPEC.messages


@pytest.fixture
def store(tmp_path):
    config_path = write_config(tmp_path / "tiered.toml", tmp_path / "data", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(config_path), SPEC)
    return config_path


def hits(config: str, topic: str, key: str) -> list[tuple[int, int]]:
    """``query_message`` on the store, opened read-only (a writable open would repair the key index
    itself): (queue id, queue offset) of each hit."""
    with TieredMessageStore.open(StoreConfig.load(config), read_only=True) as opened:
        found = opened.query_message(topic, key, max_count=16).messages
    return sorted((m.queue_id, m.queue_offset) for m in found)


def index_segments(config: str) -> int:
    metadata = StoreConfig.load(config).open_metadata()
    try:
        return sum(1 for _ in metadata.iterate_file_segments(int(FileSegmentType.INDEX)))
    finally:
        metadata.close()


def test_reindex_makes_keys_findable_from_the_tier_and_a_rerun_finds_each_once(spark, store, capsys):
    assert hits(store, "orders", "k1-7") == []  # written without an index
    assert index_segments(store) == 0

    result = reindex(spark, store, progress=None)

    assert (result.messages, result.indexed, result.keys, result.queues) == (TOTAL, TOTAL, 2 * TOTAL, 4)
    assert result.uploaded == 1 and index_segments(store) == 1
    # The index is in the tier: found with the local index directory gone.
    shutil.rmtree(StoreConfig.load(store).store_path + "/" + INDEX_DIR_NAME)
    assert hits(store, "orders", "k1-7") == [(1, 7)]
    assert hits(store, "audit", "id150") == [(0, 150), (1, 150)]  # both queues carry id150

    # Again, through the CLI: everything is indexed twice, and still found once.
    assert main(["spark", "reindex", "--config", store, "--json"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (again["messages"], again["indexed"], again["uploaded"]) == (TOTAL, TOTAL, 1)
    assert hits(store, "orders", "k1-7") == [(1, 7)]
    assert hits(store, "audit", "id150") == [(0, 150), (1, 150)]


def test_reindex_by_topic_and_time_indexes_only_that(spark, store):
    start = SPEC.start_ms + 100 * SPEC.step_ms
    result = reindex(spark, store, topics="orders", start_time=str(start), progress=None)

    assert result.queues == 2
    assert result.indexed == 2 * (SPEC.messages - 100)
    assert hits(store, "orders", "k0-100") == [(0, 100)]
    assert hits(store, "orders", "k0-99") == []
    assert hits(store, "audit", "k0-150") == []


def test_reindex_refuses_a_running_store_and_writes_nothing(spark, store):
    # A running store holds its directory's lock (a writable open would also index the
    # keys itself, see access.key_repair: hold just the lock).
    from tiered_core.local.local_store import acquire_store_lock, release_store_lock

    fd = acquire_store_lock(StoreConfig.load(store).store_path)
    try:
        with pytest.raises(StateConflict, match="open in another process"):
            reindex(spark, store, progress=None)
    finally:
        release_store_lock(fd)
    assert index_segments(store) == 0
    assert hits(store, "orders", "k1-7") == []


def test_reindex_cli_names_a_bad_option_before_spark(store, capsys, monkeypatch):
    def no_spark(*args, **kwargs):
        raise AssertionError("Spark must not start")

    monkeypatch.setattr("tiered_core.spark.get_session", no_spark)
    assert main(["spark", "reindex", "--config", store, "--queues", "one", "--json"]) != 0
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "INVALID_OPTION" and "queues" in error["message"]


def test_batch_keys_are_the_keys_of_the_decoded_messages(tmp_path):
    """The header-and-properties-text extraction against ``message_index_keys`` of each
    decoded message: UNIQ_KEY first, KEYS entries, blanks and repeats dropped, none at all."""
    from tiered_core.codec.index_keys import message_index_keys
    from tiered_core.codec.message import Message
    from tiered_core.flat import FlatFileStore
    from tiered_core.spark.appender import QueueAppender
    from tiered_core.spark.config_source import ConfigSource
    from tiered_core.spark.source.batch import planned_partitions
    from tiered_core.spark.source.options import ReadOptions
    from tiered_core.spark.source.partition_reader import read_batches

    config_path = write_config(tmp_path / "tiered.toml", tmp_path / "data")
    config = StoreConfig.load(config_path)
    shapes = [dict(keys=["a", "b"]), dict(keys="x  y"), dict(keys=[]), dict(keys=["u", "u"]),
              dict(keys=["k"], properties={"UNIQ_KEY": "u1"}), dict(keys=[], properties={"UNIQ_KEY": "u2"}),
              dict(keys=["é"], properties={"KEYSX": "no", "p": "KEY"})]
    with config.open_driver() as driver:
        metadata = config.open_metadata()
        try:
            store = FlatFileStore(driver, metadata, config.flat_config())
            store.load()
            appender = QueueAppender(store.compute_if_absent("t", 0))
            for i, shape in enumerate(shapes * 20):
                appender.append(i, Message(topic="t", body=b"x", **shape), 1_700_000_000_000 + i)
            appender.finish()
            store.shutdown()
        finally:
            metadata.close()
    source = ConfigSource.from_file(config_path)
    seen = 0
    for part in planned_partitions(source, ReadOptions()):
        for batch in read_batches(source, part):
            topic, queue_id, count, keys, offsets, sizes, timestamps = batch_keys(batch, None)
            messages = batch.messages()
            want = [(list(message_index_keys(m)), unit[0], unit[1], m.store_timestamp)
                    for m, unit in zip(messages, batch.units) if message_index_keys(m)]
            assert (topic, queue_id, count) == ("t", 0, len(batch))
            assert list(zip(keys, offsets, sizes, timestamps)) == want
            late = batch_keys(batch, lambda ts: ts >= 1_700_000_000_070)
            assert late[6] == [ts for _k, _o, _s, ts in want if ts >= 1_700_000_000_070]
            seen += len(batch)
    assert seen == len(shapes) * 20
