"""The streaming sink (``writeStream.format("tiered")``): exactly once per micro-batch.

The commit path is driven directly (as Spark's driver calls it) for replays and crashes
between its steps (a subprocess SIGKILLed by a wrapper around one of the sink's step
functions, ``append_queue``, ``index_batch``, ``record_batch``, between the upload and the
metadata transaction), and through real Spark local-mode queries for the whole contract.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from spark_helpers import write_config
from stream_helpers import queue_bodies, queue_messages

from tiered_core.config import StoreConfig
from tiered_core.errors import IllegalOffset, IllegalParam, InvalidOption, StateConflict
from tiered_core.spark.config_source import ConfigSource
from tiered_core.spark import sink
from tiered_core.spark.sink import (
    Ledger, SinkCommitMessage, SinkOptions, check_sink_schema, commit_batch, parse_sink_options,
    read_ledger, row_message,
)

SINK = "test-sink"
QUERY = "query-1"


@pytest.fixture
def target(tmp_path):
    return write_config(tmp_path / "b.toml", tmp_path / "b", cl_max=8 << 10, cq_max=1000)


def options(config: str) -> SinkOptions:
    return SinkOptions(ConfigSource.from_file(config), SINK, lock_timeout=5)


def batch(batch_id: int, rows_by_partition: list[list[dict]], query_id: str = QUERY) -> list[SinkCommitMessage]:
    return [SinkCommitMessage(p, query_id, batch_id, [row_message(r) for r in rows])
            for p, rows in enumerate(rows_by_partition)]


def rows(topic: str, queue_id: int, start: int, count: int, **extra) -> list[dict]:
    return [{"topic": topic, "queue_id": queue_id, "body": f"{topic}/{queue_id}/{i}".encode(), "keys": [f"k{i}"],
             "tags": "t", "properties": {"p": str(i)}, **extra} for i in range(start, start + count)]


def bodies(config: str) -> dict:
    return {k: [body for _, body in v] for k, v in queue_bodies(config).items()}


def expected(*specs: tuple[str, int, int, int]) -> dict:
    out: dict = {}
    for topic, queue_id, start, count in specs:
        out.setdefault((topic, queue_id), []).extend(f"{topic}/{queue_id}/{i}".encode()
                                                      for i in range(start, start + count))
    return out


def key_hits(config: str, topic: str, key: str) -> list[tuple[int, int, bytes]]:
    """``query_message`` on the target store: (queue id, queue offset, body) of each hit."""
    from tiered_core import TieredMessageStore

    with TieredMessageStore.open(StoreConfig.load(config)) as store:
        found = store.query_message(topic, key, max_count=8).messages
    return sorted((m.queue_id, m.queue_offset, bytes(m.body)) for m in found)


def test_a_replayed_batch_writes_nothing_twice(target):
    first = batch(0, [rows("orders", 0, 0, 30) + rows("audit", 1, 0, 5), rows("orders", 0, 30, 20)])
    done = commit_batch(options(target), 0, first)
    assert (done.appended, done.skipped, done.queues, done.replay) == (55, 0, 2, False)
    assert bodies(target) == expected(("orders", 0, 0, 50), ("audit", 1, 0, 5))

    again = commit_batch(options(target), 0, first)  # Spark replays batch 0 after a crash
    assert (again.appended, again.replay) == (0, True)
    assert bodies(target) == expected(("orders", 0, 0, 50), ("audit", 1, 0, 5))

    commit_batch(options(target), 1, batch(1, [rows("orders", 0, 50, 10)]))
    assert bodies(target) == expected(("orders", 0, 0, 60), ("audit", 1, 0, 5))
    assert read_ledger(target, SINK) == Ledger(1, QUERY, None, appended=65, skipped=0)  # totals: replay not counted
    # queue offsets are assigned contiguously from 0
    assert [o for o, _ in queue_bodies(target)[("orders", 0)]] == list(range(60))
    # ...and every message is found by its key, once (the replay indexed nothing twice that shows)
    assert key_hits(target, "orders", "k55") == [(0, 55, b"orders/0/55")]
    assert key_hits(target, "orders", "k3") == [(0, 3, b"orders/0/3")]
    assert key_hits(target, "audit", "k3") == [(1, 3, b"audit/1/3")]
    assert key_hits(target, "audit", "k7") == []  # orders/0 has a k7: the lookup is per topic


def test_the_ledger_lives_in_a_json_metadata_store_too(tmp_path):
    target = write_config(tmp_path / "b.toml", tmp_path / "b", cl_max=8 << 10, cq_max=1000)
    with open(target) as f:
        text = f.read()
    with open(target, "w") as f:
        f.write(text.replace("[tiered]\n", "[tiered]\nmetadata = \"json\"\n", 1))
    assert StoreConfig.load(target).metadata == "json"
    first = batch(0, [rows("orders", 0, 0, 70)])
    assert commit_batch(options(target), 0, first).appended == 70
    assert commit_batch(options(target), 0, first).replay
    assert read_ledger(target, SINK) == Ledger(0, QUERY, None, appended=70)
    assert bodies(target) == expected(("orders", 0, 0, 70))


def test_a_batch_is_invisible_until_its_metadata_transaction(target, monkeypatch):
    commit_batch(options(target), 0, batch(0, [rows("orders", 0, 0, 10)]))
    seen = []
    record = sink.record_batch

    def look(*args, **kwargs):  # everything uploaded and indexed, nothing recorded yet
        seen.append(bodies(target))
        return record(*args, **kwargs)

    monkeypatch.setattr(sink, "record_batch", look)
    commit_batch(options(target), 1, batch(1, [rows("orders", 0, 10, 40), rows("audit", 0, 0, 7)]))
    assert seen == [expected(("orders", 0, 0, 10))]
    assert bodies(target) == expected(("orders", 0, 0, 50), ("audit", 0, 0, 7))


def crash_parts() -> list[list[dict]]:
    """Batch 1 of the crash tests: two partitions, orders/0 continued (2500) and audit/0 new (300)."""
    return [rows("orders", 0, 130, 1500) + rows("audit", 0, 0, 300), rows("orders", 0, 1630, 1000)]


_CRASHING_COMMIT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from test_stream_sink import batch, crash_parts, options
    from tiered_core.spark import appender, sink

    point, nth = {point!r}, {nth!r}
    calls = []

    def crash(name):
        if name == point:
            calls.append(name)
            if len(calls) == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    def before(step, name):  # killed before the step runs
        def run(*args, **kwargs):
            crash(name)
            return step(*args, **kwargs)
        return run

    def after(step, name):  # killed after the step returned
        def run(*args, **kwargs):
            out = step(*args, **kwargs)
            crash(name)
            return out
        return run

    # The commit's steps, wrapped where commit_batch finds them (the sink module's names).
    sink.record_batch = before(sink.record_batch, "before_metadata")  # uploaded and indexed
    sink.index_batch = before(sink.index_batch, "uploaded_all")  # uploaded, no key indexed
    sink.append_queue = after(sink.append_queue, "uploaded")  # after each queue's upload
    appender.QueueAppender.commit = after(appender.QueueAppender.commit, "append-commit")  # inside a queue
    sink.commit_batch(options({target!r}), 1, batch(1, crash_parts()))
    print("not killed")
""")


@pytest.mark.parametrize("point, nth, landed", [
    ("before_metadata", 1, {("audit", 0): 300, ("orders", 0): 2500}),  # everything uploaded and indexed
    ("uploaded_all", 1, {("audit", 0): 300, ("orders", 0): 2500}),  # everything uploaded, no key indexed
    ("uploaded", 1, {("audit", 0): 300, ("orders", 0): 0}),  # the first queue (audit) uploaded
    ("append-commit", 2, {("audit", 0): 300, ("orders", 0): 2000}),  # half-way through orders/0
])
def test_sigkill_between_upload_and_metadata_then_replay_stores_each_message_once(target, point, nth, landed):
    # 130 messages: the last consume-queue segment (50 units each) is recorded 30 units full,
    # so the crashed attempt fills it, rolls, and the replay must adopt both.
    commit_batch(options(target), 0, batch(0, [rows("orders", 0, 0, 130)]))
    parts = crash_parts()
    code = _CRASHING_COMMIT.format(tests=os.path.dirname(__file__), point=point, nth=nth, target=target)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr

    # Nothing of batch 1 is readable, yet its bytes lie in the backend beyond the metadata.
    assert bodies(target) == expected(("orders", 0, 0, 130))
    ledger = read_ledger(target, SINK)
    assert (ledger.committed, ledger.pending["batch"]) == (0, 1)
    config = StoreConfig.load(target)
    driver = config.open_driver()
    try:
        stored = sum(size for _, size in driver.list(""))
    finally:
        driver.close()
    metadata = config.open_metadata()
    try:
        recorded = sum(m.size for m in metadata.iterate_file_segments())
    finally:
        metadata.close()
    assert stored > recorded

    # Spark replays batch 1 with the same rows: what landed is adopted, the rest appended.
    replay = commit_batch(options(target), 1, batch(1, parts))
    assert replay.skipped == sum(landed.values())
    assert replay.appended == 2800 - replay.skipped
    assert bodies(target) == expected(("orders", 0, 0, 2630), ("audit", 0, 0, 300))
    # totals: what the interrupted attempt uploaded counts as appended by batch 1, not as skipped
    assert read_ledger(target, SINK) == Ledger(1, QUERY, None, appended=130 + 2800, skipped=0)
    timestamps = {m.store_timestamp for m in _messages(target, "audit", 0)}
    assert timestamps == {ledger.pending["timestamp"]}  # the pending time, also for the adopted messages
    # Keys of adopted and of appended messages are found, each message once.
    for topic, i in (("audit", 0), ("audit", 299), ("orders", 129), ("orders", 130), ("orders", 2129),
                     ("orders", 2130), ("orders", 2629)):
        assert key_hits(target, topic, f"k{i}") == [(0, i, f"{topic}/0/{i}".encode())], (topic, i)


def _messages(config_path: str, topic: str, queue_id: int):
    return queue_messages(config_path, topic, queue_id)[(topic, queue_id)]


def test_mirrored_offsets_are_kept_and_a_gap_is_refused(target):
    parts = [rows("orders", 1, 0, 10, queue_offset=None)]
    for i, r in enumerate(parts[0]):
        r["queue_offset"], r["store_timestamp"] = 40 + i, 1_700_000_000_000 + i
    commit_batch(options(target), 0, batch(0, [parts[0][5:], parts[0][:5]]))  # partitions out of offset order
    got = queue_bodies(target)[("orders", 1)]
    assert got == [(40 + i, f"orders/1/{i}".encode()) for i in range(10)]
    assert [m.store_timestamp for m in _messages(target, "orders", 1)] == [1_700_000_000_000 + i for i in range(10)]

    gap = rows("orders", 1, 10, 1)
    gap[0]["queue_offset"] = 52
    with pytest.raises(IllegalOffset, match="orders/1"):
        commit_batch(options(target), 1, batch(1, [gap]))
    assert read_ledger(target, SINK).committed == 0
    assert len(queue_bodies(target)[("orders", 1)]) == 10

    # Rows B already holds at their offsets are skipped, and the ledger's totals say so.
    again = rows("orders", 1, 0, 11)
    for i, r in enumerate(again):
        r["queue_offset"], r["store_timestamp"] = 40 + i, 1_700_000_000_000 + i
    done = commit_batch(options(target), 1, batch(1, [again]))
    assert (done.appended, done.skipped) == (1, 10)
    ledger = read_ledger(target, SINK)
    assert (ledger.committed, ledger.appended, ledger.skipped) == (1, 11, 10)


def test_a_ledger_of_another_query_is_refused(target):
    commit_batch(options(target), 0, batch(0, [rows("orders", 0, 0, 3)]))
    with pytest.raises(StateConflict, match="new sinkId"):
        commit_batch(options(target), 0, batch(0, [rows("orders", 0, 0, 3)], query_id="query-2"))
    assert bodies(target) == expected(("orders", 0, 0, 3))


def test_bad_rows_and_options_are_named():
    with pytest.raises(IllegalParam, match="column 'topic'"):
        row_message({"topic": "no spaces", "queue_id": 0, "body": b""})
    with pytest.raises(IllegalParam, match="column 'queue_id'"):
        row_message({"topic": "t", "queue_id": -1, "body": b""})
    with pytest.raises(InvalidOption, match="sinkId") as err:
        parse_sink_options({"config_text": "[tiered]\n"})
    assert err.value.option == "sinkId"
    with pytest.raises(InvalidOption, match="'colour'"):
        parse_sink_options({"config_text": "[tiered]\n", "sinkId": "s", "colour": "red"})


def test_sink_schema_checks_name_the_column():
    from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

    good = [StructField("topic", StringType()), StructField("queue_id", IntegerType()),
            StructField("body", BinaryType())]
    assert check_sink_schema(StructType(good)) == ("topic", "queue_id", "body")
    with pytest.raises(InvalidOption, match="column 'colour'") as err:
        check_sink_schema(StructType(good + [StructField("colour", StringType())]))
    assert err.value.column == "colour"
    with pytest.raises(InvalidOption, match="needs column 'body'"):
        check_sink_schema(StructType(good[:2]))
    with pytest.raises(InvalidOption, match="column 'queue_id' .* type string"):
        check_sink_schema(StructType([good[0], StructField("queue_id", StringType()), good[2]]))


# -- through Spark --------------------------------------------------------------------------


def _write_parquet(path, rows_: list[dict]) -> None:
    """Write ``path``; its mtime is set from the leading number of its name.

    Spark's file source takes files oldest first, and two files written in the same
    millisecond tie in an order of the listing's choosing, so a test that expects
    ``0.parquet`` before ``1.parquet`` would fail now and then without distinct mtimes.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"topic": [r["topic"] for r in rows_], "queue_id": pa.array([r["queue_id"] for r in rows_],
                                                                                 pa.int32()),
                      "body": [r["body"] for r in rows_], "tags": [r["tags"] for r in rows_]})
    pq.write_table(table, path)
    stamp = 1_700_000_000 + 60 * int(path.name.split(".")[0])
    os.utime(path, (stamp, stamp))


def _query(spark, source_dir, target, checkpoint, schema="topic string, queue_id int, body binary, tags string"):
    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source_dir))
            .writeStream.format("tiered").option("config", target).option("checkpointLocation", str(checkpoint))
            .start())


def _run_until_idle(query) -> None:
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_a_streaming_query_writes_each_row_once_and_resumes_from_its_checkpoint(spark, tmp_path, target):
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    source.mkdir()
    _write_parquet(source / "0.parquet", rows("orders", 0, 0, 40) + rows("audit", 1, 0, 4))
    _write_parquet(source / "1.parquet", rows("orders", 0, 40, 10))
    _run_until_idle(_query(spark, source, target, checkpoint))
    assert bodies(target) == expected(("orders", 0, 0, 50), ("audit", 1, 0, 4))
    sink_id = "checkpoint:" + str(checkpoint)
    ledger = read_ledger(target, sink_id)
    assert (ledger.committed, ledger.pending) == (1, None)  # two files, one per trigger

    # A restart from the checkpoint writes only what is new.
    _write_parquet(source / "2.parquet", rows("orders", 0, 50, 5))
    _run_until_idle(_query(spark, source, target, checkpoint))
    assert bodies(target) == expected(("orders", 0, 0, 55), ("audit", 1, 0, 4))
    assert read_ledger(target, sink_id).committed == 2


def test_a_failed_task_aborts_the_batch_and_leaves_nothing_readable(spark, tmp_path, target):
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    source.mkdir()
    bad = rows("orders", 0, 0, 20)
    bad[13]["topic"] = "bad topic!"  # refused inside the write task
    _write_parquet(source / "0.parquet", bad)
    query = _query(spark, source, target, checkpoint)
    with pytest.raises(Exception, match="column 'topic'"):
        query.processAllAvailable()
    query.stop()
    assert bodies(target) == {}
    assert read_ledger(target, "checkpoint:" + str(checkpoint)) == Ledger()


def test_an_unknown_column_stops_the_query_naming_it(spark, tmp_path, target):
    source = tmp_path / "in"
    source.mkdir()
    _write_parquet(source / "0.parquet", rows("orders", 0, 0, 2))
    query = (spark.readStream.schema("topic string, queue_id int, body binary, tags string").parquet(str(source))
             .withColumnRenamed("tags", "colour")
             .writeStream.format("tiered").option("config", target)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    with pytest.raises(Exception, match="does not know column 'colour'"):
        query.processAllAvailable()
    query.stop()
    assert bodies(target) == {}


# -- the pipeline's command line: bad input fails before Spark starts ------------------------


def test_stream_cli_refuses_bad_configs_and_options_before_spark(tmp_path, target, capsys, monkeypatch):
    from tiered_core.cli import main

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark must not start")

    monkeypatch.setattr("tiered_core.spark.get_session", no_spark)
    source = write_config(tmp_path / "a.toml", tmp_path / "a")
    checkpoint = str(tmp_path / "ckpt")

    def run(*argv: str) -> dict:
        code = main(["spark", "stream", *argv, "--checkpoint", checkpoint, "--json"])
        out = capsys.readouterr().out
        assert code != 0
        return __import__("json").loads(out)["error"]

    missing = run("--config", str(tmp_path / "nope.toml"), "--to-config", target)
    assert missing["code"] == "CONFIG" and "nope.toml" in missing["message"]
    (tmp_path / "bad.toml").write_text("[tiered]\ndriver = 'posix'\ncommit_log_max_size = -5\n")
    bad = run("--config", source, "--to-config", str(tmp_path / "bad.toml"))
    assert bad["code"] == "CONFIG" and "commit_log_max_size" in bad["message"]
    same = run("--config", source, "--to-config", source)
    assert same["code"] == "CONFIG" and "is the source store" in same["message"]
    topics = run("--config", source, "--to-config", target, "--topics", "no spaces allowed")
    assert topics["code"] == "INVALID_OPTION" and "topics" in topics["message"]
    limit = run("--config", source, "--to-config", target, "--max-messages-per-trigger", "0")
    assert limit["code"] == "INVALID_OPTION" and "max-messages-per-trigger" in limit["message"]


def test_an_unreadable_ledger_stops_the_commit(target):
    from tiered_core.errors import MetadataError

    metadata = StoreConfig.load(target).open_metadata()
    try:
        metadata.set_property(Ledger.key(SINK), "{not json")
    finally:
        metadata.close()
    with pytest.raises(MetadataError, match="ledger .* is unreadable"):
        commit_batch(options(target), 0, batch(0, [rows("orders", 0, 0, 3)]))
    assert bodies(target) == {}


def test_keys_the_sink_indexed_are_found_by_a_read_only_lookup(target, capsys):
    """An operator drill: ``tiered get --key`` on a store only the sink wrote found nothing (its
    read-only open looked for the sink's local index file in a scratch directory). It reads
    the store's own index files now, and still writes nothing."""
    from snapshots import changes, snapshot
    from tiered_core import TieredMessageStore
    from tiered_core.cli import main

    commit_batch(options(target), 0, batch(0, [rows("orders", 0, 0, 30)]))
    store_path = StoreConfig.load(target).store_path
    before = snapshot(store_path)
    with TieredMessageStore.open(StoreConfig.load(target), read_only=True) as store:
        hits = store.query_message("orders", "k17", max_count=8).messages
    assert [(m.queue_offset, bytes(m.body)) for m in hits] == [(17, b"orders/0/17")]
    assert main(["get", "--config", target, "--topic", "orders", "--key", "k17", "--json"]) == 0
    assert "orders/0/17" in capsys.readouterr().out
    assert changes(before, snapshot(store_path)) == {}


def test_a_checkpoint_that_mirrored_into_another_target_is_refused(tmp_path, target, capsys, monkeypatch):
    """A Spark drill: a mirror checkpoint reused with a new, empty target mirrored only the
    source's tail into it (exit 0), and the first pipeline then failed for good with advice
    to restart it. A checkpoint is checked against the target's ledger before Spark starts."""
    from tiered_core.cli import main
    from tiered_core.spark.jobs.mirror import check_checkpoint_target

    monkeypatch.setattr("tiered_core.spark.get_session", lambda *a, **k: pytest.fail("Spark must not start"))
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "commits").mkdir(parents=True)
    for batch_id in (0, 1):
        (checkpoint / "commits" / str(batch_id)).write_text("v1\n{}")
    fresh = write_config(tmp_path / "c.toml", tmp_path / "c")
    source = write_config(tmp_path / "a.toml", tmp_path / "a")
    code = main(["spark", "stream", "--config", source, "--to-config", fresh, "--checkpoint", str(checkpoint),
                 "--json"])
    error = __import__("json").loads(capsys.readouterr().out)["error"]
    assert code != 0 and error["code"] == "STATE_CONFLICT"
    assert "committed micro-batches up to 1" in error["message"] and "new --checkpoint" in error["message"]
    # the checkpoint's own target, whose ledger holds its batches, is accepted
    own = SinkOptions(ConfigSource.from_file(target),
                      parse_sink_options({"config": target, "checkpointLocation": str(checkpoint)}).sink_id, 5)
    commit_batch(own, 0, batch(0, [rows("orders", 0, 0, 2)]))
    commit_batch(own, 1, batch(1, [rows("orders", 0, 2, 2)]))
    check_checkpoint_target(target, checkpoint)
