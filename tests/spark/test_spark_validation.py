"""The ``tiered`` data source validates like the fetcher (issue 9, scenario 3): a tiered message
whose topic byte was flipped is never returned as a row; the job fails naming it."""

from __future__ import annotations

import os

import pytest
from spark_helpers import write_config

from tiered_core.codec.consume_queue import decode_cq_unit
from tiered_core.codec.message import Message, encode_message
from tiered_core.config import StoreConfig
from tiered_core.flat import FlatFileStore
from tiered_core.spark import read
from tiered_core.spi.access import ConsumeQueueRequest

TOPIC = "orders"
MESSAGES = 60
BAD = 23  # queue offset of the damaged message in queue 0


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-validation")
    config_path = write_config(root / "tiered.toml", root / "data")
    config = StoreConfig.load(config_path)
    driver, metadata = config.open_driver(), config.open_metadata()
    store = FlatFileStore(driver, metadata, config.flat_config())
    try:
        assert store.load()
        for qid in (0, 1):
            flat = store.compute_if_absent(TOPIC, qid)
            flat.init_offset(0)
            for q in range(MESSAGES):
                raw = encode_message(Message(topic=TOPIC, body=b"m%d" % q, keys=[f"k{q}"]), queue_id=qid,
                                     queue_offset=q, store_timestamp=1_700_000_000_000 + q)
                offset = flat.commit_log.append_offset
                flat.append_commit_log(raw)
                flat.append_consume_queue(ConsumeQueueRequest(q, offset, len(raw), 0, 1_700_000_000_000 + q))
            assert flat.commit()
        flat = store.get(TOPIC, 0)
        unit = decode_cq_unit(flat.get_consume_queue(BAD))
        seg = next(s for s in reversed(flat.commit_log.segments) if s.base_offset <= unit.commitlog_offset)
        path = os.path.join(config.effective_driver_options()["root"], seg.path)
        topic_at = unit.size - 2 - len(f"KEYS\x01k{BAD}\x02") - len(TOPIC)  # first topic character
        os.chmod(path, 0o644)
        with open(path, "r+b") as fh:
            fh.seek(unit.commitlog_offset - seg.base_offset + topic_at)
            assert fh.read(1) == b"o"
            fh.seek(-1, os.SEEK_CUR)
            fh.write(b"n")  # "orders" -> "nrders": a valid message of another topic
    finally:
        store.shutdown()
        metadata.close()
        driver.close()
    return config_path


def test_spark_never_returns_the_forged_row(spark, damaged_store):
    # The intact queue reads completely.
    rows = read(spark, damaged_store, topics=TOPIC, queues="1").select("queue_offset", "topic").collect()
    assert sorted(r.queue_offset for r in rows) == list(range(MESSAGES))
    # The damaged one fails, naming the message, instead of returning a row of topic "nrders".
    with pytest.raises(Exception) as info:
        read(spark, damaged_store, topics=TOPIC, queues="0").select("queue_offset", "topic").collect()
    text = str(info.value)
    assert "CORRUPT_DATA" in text and f"queue offset {BAD}" in text and "'nrders'" in text


@pytest.mark.parametrize("argv,option", [
    (["spark", "migrate", "--config", "a.toml", "--to-config", "b.toml", "--chunk-size", "0"], "--chunk-size"),
    (["spark", "import", "--config", "a.toml", "--from", "x", "--partitions", "0"], "--partitions"),
])
def test_counts_are_checked_before_spark_starts(argv, option, capsys):
    """An operator drill: ``--chunk-size 0`` started Spark, failed in a task naming ``length``
    and said to run again; ``--partitions 0`` was taken silently. Both are usage errors now,
    and the job functions refuse them with INVALID_OPTION before they touch Spark."""
    from tiered_core.cli import main
    from tiered_core.errors import InvalidOption
    from tiered_core.spark.jobs.import_ import import_parquet
    from tiered_core.spark.jobs.migrate import migrate

    assert main(argv) == 2
    assert f"argument {option}: must be" in capsys.readouterr().err
    with pytest.raises(InvalidOption, match="chunk size"):
        migrate(None, "a.toml", "b.toml", chunk=0)
    with pytest.raises(InvalidOption, match="partitions"):
        import_parquet(None, "a.toml", "x", partitions=0)
