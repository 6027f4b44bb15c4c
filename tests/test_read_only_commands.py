"""Read-only commands never write to the tier, the metadata or the local store directory (issue 18, finding 2).

``tiered get``, ``tiered stat``, ``tiered static-topic status`` and ``verify`` open their
stores with ``TieredMessageStore.open(config, read_only=True)``. The stores here are in
states a writable open repairs -- an owner record gone from the tier, consume-queue bytes
the metadata does not record yet (a crash between the upload and the metadata update), a
metadata database from before store properties -- so each of those commands used to write
(an owner record, a segment row, a table); now snapshots (bytes and modification times) of
the tier root and the metadata file, and the absence of SQLite's ``-wal``/``-shm``, are the
same before and after each command.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from snapshots import changes, snapshot
from store_workload import Workload, dispatch_until_tiered, small_config
from tiered_core import Message
from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.config import StoreConfig
from tiered_core.errors import MetadataError, StateConflict, UnknownObjects
from tiered_core.flat.ownership import OWNER_DIR, ReadOnlyDriver
from tiered_core.metadata import SqliteMetadataStore, open_metadata_read_only, open_metadata_store
from tiered_core.static_topic import Cluster

FAR_FUTURE_MS = 1 << 50
EXAMPLE_CLUSTER = Path(__file__).resolve().parents[1] / "examples" / "cluster.toml"


def metadata_files(config: StoreConfig) -> list[str]:
    path = config.effective_metadata_path()
    return [path, path + "-wal", path + "-shm"]


def make_repairable(config: StoreConfig, root: Path) -> None:
    """Put the store in states a writable open repairs (see the module doc)."""
    for owner in root.rglob(OWNER_DIR):
        shutil.rmtree(owner)
    path = config.effective_metadata_path()
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT path, base_offset, size FROM file_segments WHERE type = ? AND status != ? "
                           "ORDER BY size DESC LIMIT 1",
                           (int(FileSegmentType.CONSUME_QUEUE), int(SegmentStatus.SEALED))).fetchone()
        assert row is not None and row[2] >= 2 * CQ_UNIT_SIZE, row
        conn.execute("UPDATE file_segments SET size = ? WHERE type = ? AND path = ? AND base_offset = ?",
                     (row[2] - CQ_UNIT_SIZE, int(FileSegmentType.CONSUME_QUEUE), row[0], row[1]))
        conn.execute("DROP TABLE store_properties")
        conn.commit()
    finally:
        conn.close()


@pytest.fixture
def store(tmp_path):
    """A posix store with two queues, partly in the tier only, made repairable."""
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tier")}, local_commit_log_file_size=64 << 10)
    workload = Workload(topics=("orders",), queues=2)
    with TieredMessageStore.open(config) as s:
        workload.put(s, 600)
        dispatch_until_tiered(s, workload)
        s.delete_expired_local(FAR_FUTURE_MS)
        s.index.roll_file()
        s.index.compact_and_upload()
    make_repairable(config, tmp_path / "tier")
    conf = tmp_path / "tiered.toml"
    conf.write_text(config.to_toml())
    return config, str(conf), workload


def watched(config: StoreConfig, tmp_path: Path) -> dict:
    """The tier, the metadata and the local store directory (closed cleanly: a reader
    rewrote its checkpoint and re-allocated its index file's header page before)."""
    return snapshot(tmp_path / "tier", *metadata_files(config), config.store_path)


@pytest.mark.parametrize("argv", [
    ["get", "--topic", "orders", "--offset", "0", "--json"],
    ["get", "--topic", "orders", "--queue", "1", "--offset", "250", "--count", "5", "--json"],
    ["get", "--topic", "orders", "--key", "orders-0-3", "--json"],
    ["stat", "--json"],
])
def test_get_and_stat_write_nothing_to_the_tier_or_the_metadata(store, tmp_path, capsys, argv):
    config, conf, _ = store
    before = watched(config, tmp_path)
    assert main([argv[0], "--config", conf, *argv[1:]]) == 0
    out = json.loads(capsys.readouterr().out)
    assert changes(before, watched(config, tmp_path)) == {}
    if argv[0] == "get":
        assert out["status"] == "FOUND" and out["messages"]
    else:
        assert {(r["topic"], r["queue_id"]) for r in out} == {("orders", 0), ("orders", 1)}


def test_a_read_only_store_reads_the_tier_and_refuses_every_write(store, tmp_path):
    config, _, workload = store
    before = watched(config, tmp_path)
    with TieredMessageStore.open(config, read_only=True) as s:
        assert isinstance(s.driver, ReadOnlyDriver) and s.ownership.record is None
        got = s.get_message("g", "orders", 0, 0, 4)
        assert got.status is GetMessageStatus.FOUND and got.tier is StoreTier.TIERED
        assert [m.body for m in got.messages] == [x.body for x in workload.sent[("orders", 0)][:4]]
        for write in (lambda: s.put_message(Message(topic="orders", body=b"x"), 0), lambda: s.dispatch(),
                      lambda: s.delete_expired_local(), lambda: s.delete_expired_tiered()):
            with pytest.raises(StateConflict, match="read-only"):
                write()
        with pytest.raises(StateConflict, match="read-only"):
            s.driver.write("x", 0, b"y")
    assert changes(before, watched(config, tmp_path)) == {}
    with pytest.raises(Exception, match="read-only"):
        TieredMessageStore.open(config, read_only=True, background=True)


def test_read_only_still_refuses_objects_the_metadata_does_not_list(store, tmp_path, capsys):
    config, conf, _ = store
    for path in metadata_files(config):
        Path(path).unlink(missing_ok=True)
    before = watched(config, tmp_path)
    with pytest.raises(UnknownObjects):
        TieredMessageStore.open(config, read_only=True)
    assert main(["get", "--config", conf, "--topic", "orders", "--json"]) == 5
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "UNKNOWN_OBJECTS"
    assert changes(before, watched(config, tmp_path)) == {}  # no metadata file created


def test_static_topic_status_and_verify_write_nothing(tmp_path, capsys):
    shutil.copy(EXAMPLE_CLUSTER, tmp_path / "cluster.toml")
    f = str(tmp_path / "cluster.toml")
    with Cluster.load(f) as cluster:
        cluster.create_static_topic("st", 4, ["broker-a", "broker-b"])
        for i in range(200):
            assert cluster.put_message(Message(topic="st", body=b"m%d" % i), i % 4).ok
        cluster.dispatch(force=True)
        configs = list(cluster.configs.values())
    root = tmp_path / "cluster-data" / "tiered"
    for config in configs:
        path = config.effective_metadata_path()
        conn = sqlite3.connect(path)
        conn.execute("DROP TABLE store_properties")
        conn.commit()
        conn.close()
    for owner in root.rglob(OWNER_DIR):
        shutil.rmtree(owner)
    paths = [root] + [p for c in configs for p in metadata_files(c)]
    before = snapshot(*paths)
    assert main(["static-topic", "status", "--cluster", f, "--topic", "st", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert sum(q["maxOffset"] for q in status["queues"]) == 200
    assert main(["static-topic", "verify", "--cluster", f, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert changes(before, snapshot(*paths)) == {}


# -- the metadata stores' read-only opening ------------------------------------------------------

@pytest.mark.parametrize("name, filename", [("sqlite", "meta.db"), ("json", "tieredStoreMetadata.json")])
def test_metadata_opened_read_only_is_a_private_copy(tmp_path, name, filename):
    path = str(tmp_path / "meta" / filename)
    empty = open_metadata_read_only(name, path)  # no file: an empty store, nothing created
    assert list(empty.iterate_topics()) == [] and empty.read_only
    empty.add_topic("ghost")
    empty.close()
    assert not (tmp_path / "meta").exists()

    store = open_metadata_store(name, path)
    store.add_topic("a")
    store.close()
    before = snapshot(tmp_path)
    copy = open_metadata_read_only(name, path)
    assert [t.topic for t in copy.iterate_topics()] == ["a"]
    with copy.transaction():
        copy.add_topic("b")
        copy.set_property("k", "v")
    assert sorted(t.topic for t in copy.iterate_topics()) == ["a", "b"] and copy.get_property("k") == "v"
    with pytest.raises(MetadataError, match="read-only"):
        copy.destroy()
    copy.close()
    assert changes(before, snapshot(tmp_path)) == {}
    reopened = open_metadata_store(name, path)
    assert [t.topic for t in reopened.iterate_topics()] == ["a"]
    reopened.close()


def test_sqlite_read_only_sees_a_live_writers_wal_and_writes_nothing(tmp_path):
    path = str(tmp_path / "meta.db")
    writer = SqliteMetadataStore(path)
    try:
        writer.add_topic("committed")  # in the -wal: no checkpoint yet
        # the -shm is SQLite's shared-memory index, where every reader takes a read mark:
        # the database and its -wal are what must not change
        before = snapshot(path, path + "-wal")
        copy = SqliteMetadataStore.open_read_only(path)
        assert [t.topic for t in copy.iterate_topics()] == ["committed"]
        copy.close()
        assert changes(before, snapshot(path, path + "-wal")) == {}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.db", "meta.db-shm", "meta.db-wal"]
    finally:
        writer.close()
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(MetadataError, match="not a tiered-store metadata store"):
        SqliteMetadataStore.open_read_only(str(foreign))
    (tmp_path / "garbage.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(MetadataError):
        SqliteMetadataStore.open_read_only(str(tmp_path / "garbage.db"))


_CRASHING_WRITER = """
import os, sys
from tiered_core import Message, StoreConfig, TieredMessageStore
config = StoreConfig.load(sys.argv[1])
store = TieredMessageStore.open(config)
for i in range(40):
    store.put_message(Message(topic="orders", body=b"m-%d" % i, keys=["k-%d" % i]), i % 2)
store.local.reput()  # (the background reput may lag on a loaded machine: the queues' files exist now)
store.local.flush()
for i in range(40, 60):  # put after the last checkpoint: replayed at the next open
    store.put_message(Message(topic="orders", body=b"m-%d" % i, keys=["k-%d" % i]), i % 2)
os._exit(0)  # a crash: nothing closed, no checkpoint of the last puts
"""


def test_a_directory_a_crash_left_is_recovered_in_memory_by_read_only_commands(tmp_path, capsys):
    """A read-only command on a local directory a crash left cut its torn tail and replayed
    its queues and keys on disk (the README said so). Now that recovery is done in memory:
    get, get --key and stat serve every message, the directory stays byte for byte and
    time for time as the crash left it, and the next writable open recovers it on disk."""
    import subprocess
    import sys

    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tier")})
    conf = tmp_path / "tiered.toml"
    conf.write_text(config.to_toml())
    subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(conf)], check=True, timeout=120)
    store_path = Path(config.store_path)
    last = sorted((store_path / "commitlog").iterdir())[-1]
    with open(last, "ab") as f:
        f.write(b"\x00\x00\x01\x00torn-tail" * 7)  # a torn last write
    shutil.rmtree(store_path / "consumequeue" / "orders" / "0")  # a queue lost since the checkpoint
    before = snapshot(store_path, tmp_path / "tier", *metadata_files(config))

    for queue in (0, 1):
        assert main(["get", "--config", str(conf), "--topic", "orders", "--queue", str(queue), "--count", "100",
                     "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert [m["body"] for m in out["messages"]] == [f"m-{i}" for i in range(queue, 60, 2)], queue
    assert main(["get", "--config", str(conf), "--topic", "orders", "--key", "k-57", "--json"]) == 0
    assert [m["body"] for m in json.loads(capsys.readouterr().out)["messages"]] == ["m-57"]
    assert main(["stat", "--config", str(conf), "--json"]) == 0
    capsys.readouterr()
    assert changes(before, snapshot(store_path, tmp_path / "tier", *metadata_files(config))) == {}

    with TieredMessageStore.open(config) as s:  # the writable open recovers on disk
        assert s.local.recovery.truncated_bytes == len(b"\x00\x00\x01\x00torn-tail" * 7)
        for queue in (0, 1):
            got = s.get_message("g", "orders", queue, 0, 100)
            assert [m.body for m in got.messages] == [b"m-%d" % i for i in range(queue, 60, 2)]
            assert s.put_message(Message(topic="orders", body=b"next"), queue).queue_offset == 30
    assert (store_path / "consumequeue" / "orders" / "0").is_dir()


def test_a_read_only_command_on_a_store_taken_over_names_the_owner(tmp_path, capsys):
    """An operator drill (round 3): ``tiered get``/``stat`` with the config of a store another
    store took over said UNKNOWN_OBJECTS and advised a metadata rebuild, which advised a
    take-over, which would have fenced the live owner. They now say the prefix's owner, and
    that this store was taken over; nothing is written."""
    from tiered_core.errors import PrefixOwned

    a = small_config(tmp_path / "a", "posix", {"root": str(tmp_path / "tier")})
    b = small_config(tmp_path / "b", "posix", {"root": str(tmp_path / "tier")})
    with TieredMessageStore.open(a) as store:
        store.put_message(Message(topic="t", body=b"a0"), 0)
        store.dispatch(force=True)
    with TieredMessageStore.open(b, take_over=True) as store:
        store.put_message(Message(topic="t", body=b"b1"), 0)
        store.dispatch(force=True)
    conf = tmp_path / "a.toml"
    conf.write_text(a.to_toml())
    before = snapshot(tmp_path / "tier", a.store_path)
    for argv in (["get", "--topic", "t"], ["stat"]):
        assert main([argv[0], "--config", str(conf), *argv[1:], "--json"]) == 5
        err = json.loads(capsys.readouterr().out)["error"]
        assert err["code"] == "PREFIX_OWNED" and "was taken over" in err["message"], err
        assert b.store_path in err["message"] and "metadata rebuild" not in err["message"]
    with pytest.raises(PrefixOwned):
        TieredMessageStore.open(a, read_only=True)
    assert changes(before, snapshot(tmp_path / "tier", a.store_path)) == {}


def test_get_past_the_end_names_the_queues_whole_range(store, capsys):
    """An operator drill (round 3): ``tiered get`` past a queue's end said "queue offsets
    2726..2736" (the local copy's range) while the tier serves from 0."""
    config, conf, _ = store
    with TieredMessageStore.open(config, read_only=True) as s:
        lo, hi = s.get_min_offset_in_queue("orders", 0), s.get_max_offset_in_queue("orders", 0)
        assert s.local.get_min_offset_in_queue("orders", 0) > lo  # partly in the tier only
    assert main(["get", "--config", conf, "--topic", "orders", "--offset", str(hi + 5), "--json"]) == 3
    err = json.loads(capsys.readouterr().out)["error"]
    assert (err["min_offset"], err["max_offset"]) == (lo, hi) and f"queue offsets {lo}..{hi}" in err["message"]
