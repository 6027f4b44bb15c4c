"""`tiered metadata rebuild`: delete the metadata, rebuild it from the driver's listing, and find
every queue's offsets, every segment and every message again."""

from __future__ import annotations

import contextlib
import json
import os
import struct

import pytest

from tiered_core import StoreConfig
from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.message import Message, decode_message, encode_message
from tiered_core.codec.naming import cluster_dir, index_path
from tiered_core.flat import FlatFileStore, FlatMessageFile
from tiered_core.ops.rebuild import rebuild_metadata
from tiered_core.flat.ownership import PrefixOwnership, load_store_id
from tiered_core.common import NO_TIMESTAMP, AppendResult, FileSegmentType, SegmentStatus, now_ms
from tiered_core.spi.access import ConsumeQueueRequest

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")

# Queue -> (first queue offset, number of messages). Small segments make every queue roll.
QUEUES = {("TopicA", 0): (0, 60), ("TopicA", 1): (0, 45), ("TopicB", 0): (100, 30),
          ("orders", 3): (0, 7), ("orders", 4): (0, 0)}


def posix_store_config(tmp_path) -> tuple:
    """``(config file, StoreConfig)`` of a posix store below ``tmp_path`` that tiers at once."""
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    return conf, StoreConfig.load(str(conf), environ={})


def write_config(tmp_path, metadata: str = "sqlite") -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "store"\nmetadata = "{metadata}"\n'
                    f'commit_log_max_size = 1500\nconsume_queue_max_size = {8 * CQ_UNIT_SIZE}\n'
                    '[tiered.options]\nfsync = false\n')
    return str(path)


def put(flat: FlatMessageFile, queue_offset: int, store_ts: int) -> None:
    body = f"{flat.topic}/{flat.queue_id}/{queue_offset}".encode() * 3
    raw = encode_message(Message(topic=flat.topic, body=body, keys=[f"k{queue_offset}"], tags="tag"),
                         queue_id=flat.queue_id, queue_offset=queue_offset, store_timestamp=store_ts)
    offset = flat.commit_log.append_offset
    assert flat.append_commit_log(raw) is AppendResult.SUCCESS
    assert flat.append_consume_queue(
        ConsumeQueueRequest(queue_offset, offset, len(raw), 0, store_ts)) is AppendResult.SUCCESS


def populate(cfg: StoreConfig) -> None:
    driver, metadata = cfg.open_driver(), cfg.open_metadata()
    # the prefix is claimed as a store claims it before writing (a prefix with data and no owner
    # record is not rebuilt: whose data it is cannot be told)
    os.makedirs(cfg.store_path, exist_ok=True)
    PrefixOwnership(driver, cfg.cluster, cfg.broker, load_store_id(cfg.store_path), cfg.store_path).claim()
    store = FlatFileStore(driver, metadata, cfg.flat_config())
    store.load()
    ts = 1_700_000_000_000
    for (topic, qid), (first, count) in QUEUES.items():
        flat = store.compute_if_absent(topic, qid)
        flat.init_offset(first)
        for q in range(first, first + count):
            ts += 7
            put(flat, q, ts)
            if q % 9 == 0:
                assert flat.commit()
        assert flat.commit()
    # TopicA/1 loses its oldest segments to expiry: its min offset is no longer 0.
    flat = store.get("TopicA", 1)
    cutoff = flat.commit_log.segments[1].max_timestamp + 1
    flat.destroy_expired_file(cutoff)
    assert flat.consume_queue_min_offset() > 0
    store.shutdown()
    metadata.close()
    driver.close()


def snapshot(cfg: StoreConfig) -> dict:
    """Every queue's offsets, every segment's metadata and every message, as the store serves them."""
    driver, metadata = cfg.open_driver(), cfg.open_metadata()
    store = FlatFileStore(driver, metadata, cfg.flat_config())
    assert store.load()
    out: dict = {"queues": {}, "messages": {}, "segments": {}}
    for flat in store:
        lo, hi = flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()
        q = metadata.get_queue(flat.topic, flat.queue_id)
        # (served min, served max, first stored unit, recorded max). The recorded min_offset is
        # kept apart: the flat layer refreshes it only at commits, so expiry leaves it stale.
        out["queues"][(flat.topic, flat.queue_id)] = (lo, hi, flat.consume_queue.min_queue_offset, q.max_offset)
        out.setdefault("recorded_min", {})[(flat.topic, flat.queue_id)] = q.min_offset
        for offset in range(lo, hi):
            out["messages"][(flat.topic, flat.queue_id, offset)] = flat.get_message(offset)
    for seg in metadata.iterate_file_segments():
        out["segments"][seg.key] = (seg.size, seg.status, seg.begin_timestamp, seg.end_timestamp)
    out["topics"] = {t.topic: (t.topic_id, t.reserve_time) for t in metadata.iterate_topics()}
    store.shutdown()
    metadata.close()
    driver.close()
    return out


def without_empty(snap: dict) -> dict:
    """The snapshot minus segments without bytes and queues without any segment holding bytes."""
    segments = {k: v for k, v in snap["segments"].items() if v[0] > 0}
    paths = {path for (_type, path, _base) in segments}
    queues = {k: v for k, v in snap["queues"].items() if f"broker-a/{k[0]}/{k[1]}" in paths}
    return {**snap, "segments": segments, "queues": queues}


def assert_segments_restored(after: dict, expected: dict) -> None:
    """Sizes, status and begin/end store times of every segment, with one exception: the first
    consume-queue segment of TopicA/1 starts with units whose messages expired, so its begin is
    the store time of the first message still stored."""
    lo, _hi, first_unit, _max = expected["queues"][("TopicA", 1)]
    key = (int(FileSegmentType.CONSUME_QUEUE), "broker-a/TopicA/1", CQ_UNIT_SIZE * first_unit)
    (size, status, begin, end), rebuilt = expected["segments"][key], after["segments"][key]
    first_stored = decode_message(after["messages"][("TopicA", 1, lo)]).store_timestamp
    assert rebuilt == (size, status, first_stored, end) and begin < first_stored
    assert {k: v for k, v in after["segments"].items() if k != key} == \
        {k: v for k, v in expected["segments"].items() if k != key}


def delete_metadata(cfg: StoreConfig) -> None:
    path = cfg.effective_metadata_path()
    for suffix in ("", "-wal", "-shm", ".bak"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


@pytest.mark.parametrize("metadata", ["sqlite", "json"])
def test_delete_the_metadata_and_rebuild_restores_every_queue_segment_and_message(tmp_path, capsys, metadata):
    conf = write_config(tmp_path, metadata)
    cfg = StoreConfig.load(conf, environ={})
    populate(cfg)
    before = snapshot(cfg)
    # The fixture is what the test claims: rolled and sealed segments, an expired head, an empty queue.
    statuses = [s[1] for s in before["segments"].values()]
    assert statuses.count(SegmentStatus.SEALED) >= 10 and SegmentStatus.NEW in statuses
    assert before["queues"][("TopicA", 1)][0] > 0 and before["queues"][("TopicB", 0)][0] == 100
    assert len(before["messages"]) > 100

    # A queue that never committed a byte has no object in the backend: nothing to rebuild (and
    # nothing lost). Every other queue and every segment holding bytes must come back.
    expected = without_empty(before)
    assert ("orders", 4) in before["queues"] and ("orders", 4) not in expected["queues"]

    delete_metadata(cfg)
    assert main(["metadata", "rebuild", "--config", conf, "--progress-every", "10"]) == 0
    out = capsys.readouterr().out
    n_segments = len(expected["segments"])
    assert f"{n_segments} file segment(s)" in out and f"{len(expected['queues'])} queue(s)" in out
    assert f"{n_segments}/{n_segments} segments" in out  # progress lines
    # The units of TopicA/1's expired head are named (the listing cannot tell expiry from a
    # lost commit-log object), and no other queue's.
    lo, _hi, first_unit, _max = expected["queues"][("TopicA", 1)]
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: TopicA/1: queue offsets {first_unit}..{lo - 1} have consume-queue units but no message "
                     f"in the tier (the first message of its commit log is at queue offset {lo}): expired, or a "
                     "commit-log object was lost (restore it from a copy of the bucket, then `tiered metadata rebuild "
                     f"--force`); reads begin at offset {lo}"], out

    after = snapshot(cfg)
    assert after["queues"] == expected["queues"]
    # The rebuilt min_offset is the first stored unit (of TopicA/1 too, whose head expired).
    assert after["recorded_min"] == {k: v[2] for k, v in expected["queues"].items()}
    assert_segments_restored(after, expected)
    assert after["messages"] == expected["messages"]
    # Topic ids are assigned in sorted order (uppercase sorts first).
    assert after["topics"] == {"TopicA": (0, -1), "TopicB": (1, -1), "orders": (2, -1)}


def test_rebuilt_store_accepts_new_messages(tmp_path):
    cfg = StoreConfig.load(write_config(tmp_path), environ={})
    populate(cfg)
    delete_metadata(cfg)
    with cfg.open_driver() as driver, cfg.open_metadata() as metadata:
        rebuild_metadata(driver, metadata, cluster=cfg.cluster, broker=cfg.broker)
        flat = FlatMessageFile(driver, metadata, "TopicA", 0, cfg.flat_config())
        start = flat.consume_queue_commit_offset()
        assert start == 60
        for q in range(start, start + 20):
            put(flat, q, 1_800_000_000_000 + q)
        assert flat.commit()
        flat.shutdown()
        again = FlatMessageFile(driver, metadata, "TopicA", 0, cfg.flat_config())
        assert again.consume_queue_commit_offset() == start + 20
        assert [decode_message(again.get_message(q)).queue_offset for q in (0, start, start + 19)] == \
            [0, start, start + 19]
        again.shutdown()


def test_refuses_a_store_that_is_not_empty_unless_forced(tmp_path, capsys):
    conf = write_config(tmp_path)
    cfg = StoreConfig.load(conf, environ={})
    populate(cfg)
    with cfg.open_metadata() as metadata:
        topic = metadata.get_topic("orders")
        topic.reserve_time = 5
        metadata.update_topic(topic)
        metadata.add_topic("gone")  # no segment of it is listed
    before = snapshot(cfg)
    assert main(["metadata", "rebuild", "--config", conf]) == 5  # ExitCode.BACKEND: METADATA refusal
    assert "--force" in capsys.readouterr().err
    assert snapshot(cfg) == before  # untouched
    assert main(["metadata", "rebuild", "--config", conf, "--force"]) == 0
    after = snapshot(cfg)
    expected = without_empty(before)
    assert after["queues"] == expected["queues"] and after["messages"] == expected["messages"]
    assert after["recorded_min"] == {k: v[2] for k, v in expected["queues"].items()}
    assert_segments_restored(after, expected)
    # Topics still listed keep their entries (ids, reserve time); the unlisted one is removed.
    assert after["topics"] == {k: v for k, v in before["topics"].items() if k != "gone"}
    assert after["topics"]["orders"][1] == 5


def test_without_timestamps_segments_get_the_rebuild_time(tmp_path):
    cfg = StoreConfig.load(write_config(tmp_path), environ={})
    populate(cfg)
    delete_metadata(cfg)
    t0 = now_ms()
    with cfg.open_driver() as driver, cfg.open_metadata() as metadata:
        stats = rebuild_metadata(driver, metadata, cluster=cfg.cluster, broker=cfg.broker, timestamps=False)
        assert stats.timestamps_read == 0
        for seg in metadata.iterate_file_segments():
            if seg.size:
                assert t0 <= seg.begin_timestamp <= seg.end_timestamp <= now_ms()
            else:
                assert seg.begin_timestamp == seg.end_timestamp == NO_TIMESTAMP


def test_torn_tail_strays_and_index_segments(tmp_path):
    cfg = StoreConfig.load(write_config(tmp_path), environ={})
    with cfg.open_driver() as driver, cfg.open_metadata() as metadata:
        flat = FlatMessageFile(driver, metadata, "TopicT", 0, cfg.flat_config())
        flat.init_offset(0)
        for q in range(5):
            put(flat, q, 1000 + q)
        assert flat.commit()
        cq_last = flat.consume_queue.segments[-1]
        flat.shutdown()
        driver.write(cq_last.path, cq_last.commit_position, b"\x01" * 7)  # a crash tore a sixth unit
        base = f"{cluster_dir(cfg.cluster)}/{cfg.broker}"
        driver.write(f"{base}/notes.txt", 0, b"not a segment")
        driver.write(f"{base}/TopicT/0/COMMIT_LOG/00000000000000000000", 0, b"bad name")  # no md5 prefix
        header = struct.pack(">iqqii", 0xBCC50285 - (1 << 32), 5000, 6000, 0, 0)
        driver.write(index_path(cfg.cluster, cfg.broker, 0), 0, header)
        driver.write(f"{cluster_dir('OtherCluster')}/{cfg.broker}/TopicT/0/notes", 0, b"elsewhere")
    delete_metadata(cfg)
    with cfg.open_driver() as driver, cfg.open_metadata() as metadata:
        stats = rebuild_metadata(driver, metadata, cluster=cfg.cluster, broker=cfg.broker)
        assert stats.strays == 2 and len(stats.stray_examples) == 2
        queue = metadata.get_queue("TopicT", 0)
        assert (queue.min_offset, queue.max_offset) == (0, 5)  # the torn unit is not counted
        assert [t.topic for t in metadata.iterate_topics()] == ["TopicT"]  # no topic for the index
        (index,) = metadata.iterate_file_segments(int(FileSegmentType.INDEX))
        assert (index.path, index.begin_timestamp, index.end_timestamp) == (f"{cfg.broker}/rmq_sys_INDEX/0",
                                                                           5000, 6000)
        (cl,) = metadata.iterate_file_segments(int(FileSegmentType.COMMIT_LOG))
        (cq,) = metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE))
        assert (cl.begin_timestamp, cl.end_timestamp, cq.begin_timestamp, cq.end_timestamp) == (1000, 1004, 1000, 1004)
        assert cq.size == 5 * CQ_UNIT_SIZE + 7
        flat = FlatMessageFile(driver, metadata, "TopicT", 0, cfg.flat_config())
        assert flat.consume_queue_commit_offset() == 5
        put(flat, 5, 1005)
        assert flat.commit()
        assert [decode_message(flat.get_message(q)).queue_offset for q in range(6)] == list(range(6))
        flat.shutdown()


def test_rebuild_of_an_empty_backend(tmp_path, capsys):
    conf = write_config(tmp_path)
    (tmp_path / "store").mkdir()  # a store directory (its metadata lost), nothing tiered yet
    assert main(["metadata", "rebuild", "--config", conf]) == 0
    assert "rebuilt 0 topic(s), 0 queue(s), 0 file segment(s)" in capsys.readouterr().out


def test_a_rebuild_with_no_store_directory_and_no_tiered_data_creates_nothing(tmp_path, capsys):
    """A typo in store_path (drill): the rebuild created an empty store there and exited 0, and
    later commands answered as if that store were the one meant. Now: NOT_FOUND (exit 3), with
    both places named, and nothing created."""
    conf = write_config(tmp_path)
    assert main(["metadata", "rebuild", "--force", "--config", conf, "--json"]) == ExitCode.NOT_FOUND
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "NOT_FOUND" and "nothing to rebuild" in error["message"], error
    assert not (tmp_path / "store").exists()



def _index_service(cfg: StoreConfig, driver, metadata):
    """The store's key-index service, with files small enough that a few dozen keys roll them."""
    from tiered_core.index.service import IndexConfig, IndexStoreService

    return IndexStoreService(driver, metadata, cfg.store_path, cluster=cfg.cluster, broker=cfg.broker,
                             config=IndexConfig(max_hash_slots=64, max_items=500))


@contextlib.contextmanager
def claimed_store_with_key_index(tmp_path):
    """``(config file, StoreConfig, driver, metadata, key-index service)`` of a posix store below
    ``tmp_path`` whose prefix is claimed as a store claims it; the service is shut down on exit."""
    conf = write_config(tmp_path)
    cfg = StoreConfig.load(conf, environ={})
    with cfg.open_driver() as driver, cfg.open_metadata() as metadata:
        os.makedirs(cfg.store_path, exist_ok=True)
        PrefixOwnership(driver, cfg.cluster, cfg.broker, load_store_id(cfg.store_path), cfg.store_path).claim()
        index = _index_service(cfg, driver, metadata)
        try:
            yield conf, cfg, driver, metadata, index
        finally:
            index.shutdown()


def put_committed(flat: FlatMessageFile, queue_offset: int, store_ts: int) -> tuple[int, int]:
    """:func:`put` and commit; returns the message's ``(commit-log offset, size)``."""
    offset = flat.commit_log.append_offset
    put(flat, queue_offset, store_ts)
    assert flat.commit()
    return offset, len(flat.get_message(queue_offset))


def index_key(index, flat: FlatMessageFile, queue_offset: int, offset: int, size: int, store_ts: int) -> None:
    """Index key ``k{queue_offset}`` of ``flat``'s queue at commit-log ``offset`` (``size`` bytes)."""
    assert index.put_key(flat.topic, flat.topic_metadata.topic_id, flat.queue_id, [f"k{queue_offset}"], offset,
                         size, store_ts) is AppendResult.SUCCESS


def test_topic_ids_are_recovered_from_the_uploaded_key_index(tmp_path, capsys):
    """Topics created in non-sorted order keep their ids, so tiered key lookups (which filter by
    topic id) still find their messages after a rebuild."""
    order = ["zeta", "alpha", "mid", "unindexed"]  # ids 0, 1, 2, 3
    probes: dict[str, tuple[int, int, int]] = {}
    with claimed_store_with_key_index(tmp_path) as (conf, cfg, driver, metadata, index):
        ts = now_ms() - 60_000
        for topic in order:
            flat = FlatMessageFile(driver, metadata, topic, 1, cfg.flat_config())
            flat.init_offset(0)
            for q in range(12):
                ts += 100
                offset, size = put_committed(flat, q, ts)
                if topic != "unindexed":
                    index_key(index, flat, q, offset, size, ts)
                    probes[topic] = (q, offset, size)
            flat.shutdown()
        index.roll_file()
        assert index.compact_and_upload() >= 1
        original = {t.topic: t.topic_id for t in metadata.iterate_topics()}
    assert original == {t: i for i, t in enumerate(order)}

    delete_metadata(cfg)
    assert main(["metadata", "rebuild", "--config", conf]) == 0
    out = capsys.readouterr().out
    assert "3 recovered from the key index, 1 new" in out and "warning: 1 topic(s)" in out
    with cfg.open_driver() as driver, cfg.open_metadata() as metadata:
        rebuilt = {t.topic: t.topic_id for t in metadata.iterate_topics()}
        assert {t: rebuilt[t] for t in order[:3]} == {t: original[t] for t in order[:3]}
        assert rebuilt["unindexed"] not in {original[t] for t in order[:3]}
        index = _index_service(cfg, driver, metadata)
        try:
            for topic in order[:3]:
                q, offset, size = probes[topic]
                entries = index.query(topic, f"k{q}", 10, 0, now_ms(), topic_id=rebuilt[topic])
                assert [(e.queue_id, e.offset, e.size) for e in entries] == [(1, offset, size)], topic
        finally:
            index.shutdown()


def test_a_foreign_object_under_a_segment_name_is_not_adopted_and_the_advice_names_repair(tmp_path, capsys):
    """An operator drill: ``metadata rebuild --force`` adopted a foreign object named like a
    commit-log segment (no consume queue, no message in it); the store then appended to it and
    every read of that queue failed. And the open's UNKNOWN_OBJECTS advice named only the
    rebuild, which skips objects that are not segments, so it refused again and again. Now
    neither is adopted, and the advice names ``tiered repair --apply``, which moves both to
    the quarantine."""
    from tiered_core import Message, TieredMessageStore
    from tiered_core.errors import UnknownObjects

    conf, cfg = posix_store_config(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        store.put_message(Message(topic="t1", body=b"a"), 0)
        store.dispatch(force=True)
    broker = tmp_path / "tier" / cluster_dir(cfg.cluster) / cfg.broker
    (broker / "NOTES.txt").write_text("hi")
    foreign = broker / "t9" / "0" / "COMMIT_LOG" / "cfcd208400000000000000000000"
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"FOREIGN DATA " * 8)
    with pytest.raises(UnknownObjects) as info:
        TieredMessageStore.open(cfg)
    assert f"tiered repair --config {conf} --apply" in str(info.value)

    assert main(["metadata", "rebuild", "--config", str(conf), "--force"]) == 0
    out = capsys.readouterr().out
    assert "did not adopt 1 segment-named object(s)" in out and f"tiered repair --config {conf} --apply" in out
    with cfg.open_metadata() as metadata:
        assert metadata.get_queue("t9", 0) is None and metadata.get_queue("t1", 0) is not None
    assert foreign.read_bytes() == b"FOREIGN DATA " * 8

    assert main(["repair", "--config", str(conf), "--apply"]) == 0
    capsys.readouterr()
    with TieredMessageStore.open(cfg) as store:
        assert store.put_message(Message(topic="t1", body=b"b"), 0).queue_offset == 1
    quarantined = {p.name for p in (broker / ".quarantine").rglob("*") if p.is_file()}
    assert {"NOTES.txt", "cfcd208400000000000000000000"} <= quarantined


@pytest.mark.parametrize("planted", ["copy_of_the_last_segment", "random_bytes"])
def test_a_foreign_object_named_as_a_queues_next_segment_is_not_adopted(tmp_path, capsys, planted):
    """An operator drill (round 2): an object named as an existing queue's next commit-log
    segment -- a copy of its last one, or random bytes -- was adopted by ``metadata rebuild
    --force`` (silently for random bytes), and the next dispatch appended into it. A segment
    after a queue's first must begin with the message at its base offset."""
    import random

    from tiered_core import Message, TieredMessageStore
    from tiered_core.codec.naming import segment_path

    conf, cfg = posix_store_config(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        for i in range(3):
            store.put_message(Message(topic="t", body=f"m{i}".encode(), keys=[f"k{i}"]), 0)
        store.dispatch(force=True)
    first = tmp_path / "tier" / segment_path(cfg.cluster, cfg.broker, "t", 0, FileSegmentType.COMMIT_LOG, 0)
    size = first.stat().st_size
    nxt = tmp_path / "tier" / segment_path(cfg.cluster, cfg.broker, "t", 0, FileSegmentType.COMMIT_LOG, size)
    data = first.read_bytes() if planted == "copy_of_the_last_segment" else random.Random(7).randbytes(300)
    nxt.write_bytes(data)
    assert main(["metadata", "rebuild", "--config", str(conf), "--force"]) == 0
    assert "did not adopt 1 segment-named object(s)" in capsys.readouterr().out
    with cfg.open_metadata() as metadata:
        bases = [m.base_offset for m in metadata.iterate_file_segments(int(FileSegmentType.COMMIT_LOG))]
    assert bases == [0]
    assert nxt.read_bytes() == data


def test_a_rebuild_for_a_store_path_that_does_not_own_the_prefix_is_refused(tmp_path, capsys):
    """An operator drill (round 2): ``metadata rebuild`` with a config naming another
    store_path than the prefix's owner wrote that path a metadata database of the owner's
    segments, and ``tiered get`` with it then served the owner's messages. It is refused now,
    naming the owner and the take-over, and creates nothing."""
    from tiered_core import Message, TieredMessageStore

    tier = tmp_path / "tier"
    owner = tmp_path / "owner.toml"
    owner.write_text(f'[tiered]\nstore_path = "{tmp_path / "a"}"\n[tiered.options]\nroot = "{tier}"\n')
    with TieredMessageStore.open(StoreConfig.load(str(owner), environ={})) as store:
        store.put_message(Message(topic="t", body=b"x"), 0)
        store.dispatch(force=True)
    other = tmp_path / "other.toml"
    other.write_text(f'[tiered]\nstore_path = "{tmp_path / "b"}"\n[tiered.options]\nroot = "{tier}"\n')
    assert main(["metadata", "rebuild", "--config", str(other)]) == 5
    err = capsys.readouterr().err
    assert "PREFIX_OWNED" in err and f"tiered takeover --config {other} --create" in err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("planted", ["copy_of_the_last_segment", "random_bytes", "units_past_the_commit_log"])
def test_a_foreign_object_named_as_a_queues_next_consume_queue_segment_is_not_adopted(tmp_path, capsys, planted):
    """An operator drill (round 2) left this open: an object named as an existing queue's next
    consume-queue segment was adopted by ``metadata rebuild --force``, and reads of the queue
    then served what it named. Its first unit must name the message of its base queue offset."""
    import random

    from tiered_core import Message, TieredMessageStore
    from tiered_core.codec.consume_queue import encode_cq_unit
    from tiered_core.codec.naming import segment_path

    conf, cfg = posix_store_config(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        for i in range(3):
            store.put_message(Message(topic="t", body=f"m{i}".encode()), 0)
        store.dispatch(force=True)
    tier = tmp_path / "tier"
    first = tier / segment_path(cfg.cluster, cfg.broker, "t", 0, FileSegmentType.CONSUME_QUEUE, 0)
    size = first.stat().st_size
    assert size == 3 * 20
    nxt = tier / segment_path(cfg.cluster, cfg.broker, "t", 0, FileSegmentType.CONSUME_QUEUE, size)
    data = {"copy_of_the_last_segment": first.read_bytes(),
            "random_bytes": random.Random(7).randbytes(60),
            "units_past_the_commit_log": encode_cq_unit(10_000, 90) * 2}[planted]
    nxt.write_bytes(data)
    assert main(["metadata", "rebuild", "--config", str(conf), "--force"]) == 0
    assert "did not adopt 1 segment-named object(s)" in capsys.readouterr().out
    with cfg.open_metadata() as metadata:
        bases = [m.base_offset for m in metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE))]
        assert bases == [0]
        assert (metadata.get_queue("t", 0).min_offset, metadata.get_queue("t", 0).max_offset) == (0, 3)
    assert nxt.read_bytes() == data


def test_a_queues_real_next_consume_queue_segment_is_still_adopted(tmp_path, capsys):
    """The check of the next consume-queue segment adopts the store's own: a queue whose
    consume queue rolled into several segments is rebuilt whole, every message readable."""
    from tiered_core import Message, TieredMessageStore

    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ngroup_commit_interval_ms = 0\n'
                    f'consume_queue_max_size = 100\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    cfg = StoreConfig.load(str(conf), environ={})
    with TieredMessageStore.open(cfg) as store:
        for i in range(12):
            store.put_message(Message(topic="t", body=f"m{i}".encode()), 0)
            store.dispatch(force=True)
    with cfg.open_metadata() as metadata:
        before = sorted(m.base_offset for m in metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE)))
    assert len(before) > 1
    assert main(["metadata", "rebuild", "--config", str(conf), "--force"]) == 0
    assert "did not adopt" not in capsys.readouterr().out
    with cfg.open_metadata() as metadata:
        after = sorted(m.base_offset for m in metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE)))
    assert after == before
    with TieredMessageStore.open(cfg, read_only=True) as store:
        got = store.get_message("g", "t", 0, 0, 32)
        assert [m.body for m in got.messages] == [f"m{i}".encode() for i in range(12)]


@pytest.mark.parametrize("file_type", [FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE])
def test_an_empty_object_named_past_a_queues_end_is_not_adopted(tmp_path, capsys, file_type):
    """An operator drill (round 3): an empty object named as a consume-queue segment far past
    the queue's end was adopted by ``metadata rebuild --force``; the next put got offset 4999,
    and every read from the old end failed on the gap for good. An empty segment is adopted
    only where the store would have rolled it (the previous one's end)."""
    from tiered_core import Message, TieredMessageStore
    from tiered_core.codec.naming import segment_path

    conf, cfg = posix_store_config(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        for i in range(3):
            store.put_message(Message(topic="t", body=f"m{i}".encode()), 0)
        store.dispatch(force=True)
    far = tmp_path / "tier" / segment_path(cfg.cluster, cfg.broker, "t", 0, file_type, 99980)
    far.write_bytes(b"")
    assert main(["metadata", "rebuild", "--config", str(conf), "--force"]) == 0
    assert "did not adopt 1 segment-named object(s)" in capsys.readouterr().out
    with TieredMessageStore.open(cfg) as store:
        assert store.put_message(Message(topic="t", body=b"next"), 0).queue_offset == 3
        assert store.dispatch(force=True).errors == []
    with TieredMessageStore.open(cfg.replace(storage_level="FORCE"), read_only=True) as store:
        assert [m.body for m in store.get_message("g", "t", 0, 0, 10).messages] == [b"m0", b"m1", b"m2", b"next"]
    assert far.exists() and far.stat().st_size == 0


def test_a_short_consume_queue_object_without_a_commit_log_is_not_adopted(tmp_path, capsys):
    """An operator drill (round 3): an 18-byte foreign object named as another queue's first
    consume-queue segment was adopted by ``metadata rebuild --force`` (and by ``takeover
    --create``); the next put cut it away as a torn unit, deleting it. A consume queue without
    a commit log that holds not even one unit is not adopted, and nothing deletes it."""
    from tiered_core import Message, TieredMessageStore
    from tiered_core.codec.naming import segment_path
    from tiered_core.errors import UnknownObjects

    conf, cfg = posix_store_config(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        store.put_message(Message(topic="t", body=b"m"), 0)
        store.dispatch(force=True)
    foreign = tmp_path / "tier" / segment_path(cfg.cluster, cfg.broker, "otherapp", 0,
                                                FileSegmentType.CONSUME_QUEUE, 0)
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"not ours, 18 bytes")
    assert main(["metadata", "rebuild", "--config", str(conf), "--force"]) == 0
    assert "did not adopt 1 segment-named object(s)" in capsys.readouterr().out
    with pytest.raises(UnknownObjects, match="tiered repair"):  # not ours: refused, as any unknown object
        TieredMessageStore.open(cfg)
    assert foreign.read_bytes() == b"not ours, 18 bytes"
    assert main(["repair", "--config", str(conf), "--apply"]) == 0
    capsys.readouterr()
    with TieredMessageStore.open(cfg) as store:
        assert store.put_message(Message(topic="t", body=b"n"), 0).queue_offset == 1
        assert store.dispatch(force=True).errors == []
    kept = [p for p in (tmp_path / "tier").rglob(".quarantine/*/**/cfcd208400000000000000000000")]
    assert [p.read_bytes() for p in kept] == [b"not ours, 18 bytes"]


@pytest.mark.parametrize("key, value", [("broker", "broker-b"), ("cluster", "OtherCluster")])
def test_a_rebuild_with_a_config_naming_another_identity_is_refused(tmp_path, capsys, key, value):
    """An operator drill (round 3): with the broker (or cluster) renamed in the config, every
    command said IDENTITY_MISMATCH but ``metadata rebuild --force``, which replaced the store's
    metadata with an empty listing of the other prefix. It is refused the same way, and the
    metadata is left as it was."""
    from tiered_core import Message, TieredMessageStore

    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\n[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    cfg = StoreConfig.load(str(conf), environ={})
    with TieredMessageStore.open(cfg) as store:
        store.put_message(Message(topic="t", body=b"x"), 0)
        store.dispatch(force=True)
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(conf.read_text().replace("[tiered]\n", f'[tiered]\n{key} = "{value}"\n'))
    db = cfg.effective_metadata_path()
    before = open(db, "rb").read()
    assert main(["metadata", "rebuild", "--config", str(renamed), "--force"]) == 2  # a config error
    err = capsys.readouterr().err
    assert "IDENTITY_MISMATCH" in err and value in err
    assert open(db, "rb").read() == before
    with cfg.open_metadata() as metadata:
        assert metadata.get_queue("t", 0) is not None


def test_a_take_over_after_a_lost_disk_names_the_offsets_a_lost_first_commit_log_object_held(tmp_path, capsys, caplog):
    """A lost disk, and the first commit-log object of a queue lost too: `takeover --create`
    rebuilds the metadata from what is listed, and the queue then begins after the lost
    messages. That used to go unsaid (verify is clean: expiry leaves the same state)."""
    import shutil

    conf = tmp_path / "tiered.toml"
    conf.write_text('[tiered]\nstore_path = "data"\ncommit_log_max_size = "2KiB"\ngroup_commit_count = 1\n'
                    '[tiered.options]\nroot = "tier"\nfsync = false\n')
    for i in range(30):
        assert main(["put", "--config", str(conf), "--topic", "t", "--body", f"message-{i:02d}-" + "x" * 100,
                     "--key", f"k{i:02d}", "--dispatch"]) == 0
    capsys.readouterr()
    logs = list((tmp_path / "tier").glob("*/broker-a/t/0/COMMIT_LOG/*"))
    assert len(logs) >= 3
    next(p for p in logs if p.name[8:] == "0" * 20).unlink()  # (md5 prefix, then the base offset)
    shutil.rmtree(tmp_path / "data")
    assert main(["takeover", "--config", str(conf), "--create"]) == 0
    note = [r.getMessage() for r in caplog.records if "have consume-queue units but no message" in r.getMessage()]
    assert len(note) == 1 and note[0].startswith("t/0: queue offsets 0..") and "commit-log object was lost" in note[0]
    first = int(note[0].rsplit("reads begin at offset ", 1)[1])
    assert first > 0
    assert main(["get", "--config", str(conf), "--topic", "t", "--offset", str(first), "--count", "1"]) == 0
    assert f"message-{first:02d}-" in capsys.readouterr().out
    # every answer names the same first offset, a read past the end's too (it said 0)
    assert main(["get", "--config", str(conf), "--topic", "t", "--offset", "0", "--count", "1"]) == 3
    assert f"OFFSET_TOO_SMALL (queue offsets {first}..30, next {first})" in capsys.readouterr().err
    assert main(["get", "--config", str(conf), "--topic", "t", "--offset", "30", "--count", "1"]) == 3
    assert f"OFFSET_OVERFLOW_ONE (queue offsets {first}..30, next 30)" in capsys.readouterr().err
    # a key of a lost message: not found, and the answer says which offsets hold no message
    assert main(["get", "--config", str(conf), "--topic", "t", "--key", "k00"]) == 3
    err = capsys.readouterr().err
    assert "no message of topic 't' has key 'k00'" in err and f"the tier holds no message at t/0 offsets 0..{first - 1}" \
        in err and "a commit-log object was lost" in err, err
    assert main(["get", "--config", str(conf), "--topic", "t", "--key", f"k{first:02d}"]) == 0
    assert f"message-{first:02d}-" in capsys.readouterr().out


def test_topic_ids_are_recovered_from_entries_at_an_unreferenced_copy_or_mid_life(tmp_path, capsys):
    """A soak run (a restored copy, then a lost disk and a take-over) ended with every key
    index entry of a topic named for another one: the only uploaded index file pointed at
    copies of the topic's messages that a dispatch had appended to the commit log and then
    died before its consume-queue units (its retry appended them again, and the units name
    those), so the probe, which wanted the very offset of the unit, recovered no id, and the
    new ids in sorted order gave the topic's old id to another topic. Now an entry at another
    copy of the probed message names the id too, and a topic whose first and last messages
    no uploaded file holds is probed at the messages the files span."""
    order = ["zeta", "mid", "alpha"]  # ids 0, 1, 2: sorted order would give other ids to all but mid
    with claimed_store_with_key_index(tmp_path) as (conf, cfg, driver, metadata, index):
        ts = now_ms() - 60_000
        flats = {topic: FlatMessageFile(driver, metadata, topic, 1, cfg.flat_config()) for topic in order}
        for flat in flats.values():
            flat.init_offset(0)
        # zeta: six messages appended, indexed, and never given units (the dispatch died) ...
        zeta = flats["zeta"]
        times = []
        for q in range(6):
            ts += 100
            times.append(ts)
            raw = encode_message(Message(topic="zeta", body=f"zeta/1/{q}".encode() * 3, keys=[f"k{q}"], tags="tag"),
                                 queue_id=1, queue_offset=q, store_timestamp=ts)
            offset = zeta.commit_log.append_offset
            assert zeta.append_commit_log(raw) is AppendResult.SUCCESS
            index_key(index, zeta, q, offset, len(raw), ts)
        assert zeta.commit()
        # ... then appended again by the retry, with units, and not indexed (its local index was lost).
        for q in range(6):
            put_committed(zeta, q, times[q])
        # alpha: indexed as usual.
        for q in range(4):
            ts += 100
            index_key(index, flats["alpha"], q, *put_committed(flats["alpha"], q, ts), ts)
        index.roll_file()
        # mid: twelve messages; only the middle four are in an uploaded index file (the first
        # ones' file expired, the last ones' is not uploaded yet).
        for q in range(12):
            ts += 100
            offset, size = put_committed(flats["mid"], q, ts)
            if 4 <= q < 8:
                index_key(index, flats["mid"], q, offset, size, ts)
        index.roll_file()
        assert index.compact_and_upload() >= 2
        for flat in flats.values():
            flat.shutdown()
        original = {t.topic: t.topic_id for t in metadata.iterate_topics()}
    assert original == {t: i for i, t in enumerate(order)}

    delete_metadata(cfg)
    assert main(["metadata", "rebuild", "--config", conf]) == 0
    out = capsys.readouterr().out
    with cfg.open_metadata() as metadata:
        assert {t.topic: t.topic_id for t in metadata.iterate_topics()} == original
    assert "topic ids: 3 recovered from the key index, 0 new" in out, out
    # ...so every entry of the key index still names a message carrying its key.
    assert main(["verify", "--deep", "--config", conf, "--json"]) == 0, capsys.readouterr().out
