"""IndexStoreService over the posix driver and SQLite metadata: rolling, upload, recovery,
queries across files, expiry, concurrency."""

from __future__ import annotations

import os
import random
import shutil
import struct
import threading
import time

import pytest

from tiered_core.codec.naming import index_path
from tiered_core.config import StoreConfig
from tiered_core.errors import DriverError, IllegalParam, SegmentClosed
from tiered_core.index import IndexConfig, IndexFileStatus, IndexStoreFile, IndexStoreService
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.plugins import open_driver
from tiered_core.segment import FileSegment
from tiered_core.common import AppendResult, FileSegmentType, SegmentStatus

T = "TopicTest"
T0 = 1_700_000_000_000
U, S, L = IndexFileStatus.UPLOAD, IndexFileStatus.SEALED, IndexFileStatus.UNSEALED


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Env:
    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.store_path = str(tmp_path / "store")
        self.driver = open_driver("posix", root=str(tmp_path / "root"))
        self.metadata = SqliteMetadataStore(str(tmp_path / "meta.db"))
        self.clock = Clock(T0)
        self.services: list[IndexStoreService] = []

    def service(self, **cfg) -> IndexStoreService:
        cfg.setdefault("max_hash_slots", 5)
        cfg.setdefault("max_items", 20)
        svc = IndexStoreService(self.driver, self.metadata, self.store_path, broker="broker-a",
                                config=IndexConfig(**cfg), clock=self.clock)
        self.services.append(svc)
        return svc

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path, "tiered_index_file")

    def local_names(self) -> list[str]:
        return sorted(n for n in os.listdir(self.index_dir) if n.isdigit())

    def segment_metas(self):
        return list(self.metadata.iterate_file_segments(FileSegmentType.INDEX, "broker-a/rmq_sys_INDEX/0"))

    def close(self) -> None:
        for svc in self.services:
            svc.shutdown()
        self.metadata.close()
        self.driver.close()


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.close()


def put_n(svc: IndexStoreService, n: int, start: int = 0, *, key=lambda i: f"key{i}", step_ms: int = 1000):
    """Message i: key ``key(i)``, queue i % 4, offset i * 100, stored at T0 + i * step_ms (the
    clock follows, so a file rolled by message i begins at its store time)."""
    for i in range(start, start + n):
        if isinstance(svc._clock, Clock):
            svc._clock.now = T0 + i * step_ms
        result = svc.put_key(T, 1, i % 4, {key(i)}, i * 100, 100, T0 + i * step_ms)
        assert result is AppendResult.SUCCESS


def lookup(svc: IndexStoreService, key: str, max_count: int = 32, begin: int = 0, end: int = T0 * 2):
    return [(e.queue_id, e.offset, e.store_timestamp) for e in svc.query(T, key, max_count, begin, end)]


def all_lookups(svc, n):
    return {i: lookup(svc, f"key{i}") for i in range(n)}


# -- writing ----------------------------------------------------------------------------


def test_put_rolls_a_new_file_when_full(env):
    svc = env.service()
    put_n(svc, 50)
    files = svc.files()
    assert [f.item_count for f in files] == [19, 19, 12]
    assert svc.statuses() == [S, S, L]
    assert len(env.local_names()) == 3
    for i in range(50):
        assert lookup(svc, f"key{i}") == [(i % 4, i * 100, T0 + i * 1000)]
    assert svc.put_key(T, 1, 0, set(), 0, 1, T0) is AppendResult.SUCCESS  # nothing to index


def test_put_reports_failure_never_success(env, monkeypatch):
    svc = env.service(max_items=4)
    with pytest.raises(IllegalParam):
        svc.put_key(T, 1, 0, ["a", "b", "c", "d"], 0, 1, T0)  # can never fit a file
    with pytest.raises(IllegalParam):
        svc.put_key("", 1, 0, ["a"], 0, 1, T0)
    # Fault injection: every file claims to be full -> FILE_FULL after the retries (#10859).
    # (put_key writes through the batch path, IndexStoreFile.put_keys.)
    monkeypatch.setattr(IndexStoreFile, "put_keys", lambda self, *a, **k: (AppendResult.FILE_FULL, 0))
    assert svc.put_key(T, 1, 0, ["a"], 0, 1, T0) is AppendResult.FILE_FULL
    monkeypatch.undo()

    def refuse(*a, **k):
        raise DriverError("disk says no", retryable=False, path="x")

    svc.roll_file().seal()
    monkeypatch.setattr(IndexStoreFile, "create", refuse)
    assert svc.put_key(T, 1, 0, ["a"], 0, 1, T0) is AppendResult.UNKNOWN_ERROR


# -- compaction and upload -------------------------------------------------------------


def test_compact_and_upload_sealed_files(env):
    svc = env.service()
    put_n(svc, 50)
    before = all_lookups(svc, 50)
    ranges = [(f.min_timestamp, f.end_timestamp) for f in svc.files()[:2]]
    assert svc.compact_and_upload() == 2
    assert svc.statuses() == [U, U, L]
    assert svc.compact_and_upload() == 0  # the newest file is never uploaded
    assert len(env.local_names()) == 1
    metas = env.segment_metas()
    size = 28 + 5 * 8 + 19 * 28
    assert [(m.base_offset, m.size, m.status) for m in metas] == [
        (0, size, SegmentStatus.SEALED), (size, size, SegmentStatus.SEALED)]
    assert [(m.begin_timestamp, m.end_timestamp) for m in metas] == ranges
    for m in metas:
        path = index_path("DefaultCluster", "broker-a", m.base_offset)
        assert env.driver.size(path) == size and env.driver.is_sealed(path)
    # The uploaded keys now come from the segments only: their local files are gone.
    assert all_lookups(svc, 50) == before
    assert os.listdir(os.path.join(env.index_dir, "compacting")) == []


def test_uploaded_segment_answers_after_local_file_is_deleted(env):
    svc = env.service()
    put_n(svc, 25)
    first = svc.files()[0]
    local_path = first.path
    before = all_lookups(svc, 19)
    assert svc.compact_and_upload() == 1
    assert not os.path.exists(local_path)
    uploaded = svc.files()[0]
    assert uploaded.status is U
    reads = []
    real_read = uploaded._read
    uploaded._read = lambda p, n: reads.append((p, n)) or real_read(p, n)
    assert all_lookups(svc, 19) == before
    # After the header, each lookup costs two ranged reads: the slot, then its items.
    assert len(reads) == 2 * 19 and all(n == 8 for p, n in reads[0::2])


def test_failed_upload_leaves_no_segment_and_is_retried(env, monkeypatch):
    svc = env.service()
    put_n(svc, 25)
    before = all_lookups(svc, 25)

    def broken_seal(self):
        raise DriverError("backend down", retryable=True, path=self.path)

    monkeypatch.setattr(FileSegment, "seal", broken_seal)
    assert svc.compact_and_upload() == 0
    assert env.segment_metas() == []
    assert list(env.driver.list("")) == []
    assert svc.statuses() == [S, L]
    monkeypatch.undo()
    assert svc.compact_and_upload() == 1
    assert [m.base_offset for m in env.segment_metas()] == [0]
    assert all_lookups(svc, 25) == before


# -- recovery ---------------------------------------------------------------------------


def test_restart_finds_local_and_uploaded_files(env):
    svc = env.service()
    put_n(svc, 50)
    svc.compact_and_upload()
    before = all_lookups(svc, 50)
    svc.shutdown()
    # Another slot count in the configuration: existing files keep their own layout.
    again = env.service(max_hash_slots=7)
    assert again.statuses() == [U, U, L]
    assert all_lookups(again, 50) == before
    put_n(again, 1, start=50)
    assert again.files()[-1].item_count == 13  # the current file goes on taking keys
    assert again.files()[-1].slot_count == 5
    put_n(again, 10, start=51)  # rolls: the new file uses the new layout
    assert again.files()[-1].slot_count == 7
    assert again.compact_and_upload() == 1
    new_keys = {i: [(i % 4, i * 100, T0 + i * 1000)] for i in range(50, 61)}
    assert all_lookups(again, 61) == {**before, **new_keys}


def test_restart_drops_local_copy_of_an_uploaded_file(env):
    svc = env.service()
    put_n(svc, 25)
    first = svc.files()[0]
    saved = env.tmp_path / "saved"
    first.flush()
    shutil.copy(first.path, saved)
    name = os.path.basename(first.path)
    svc.compact_and_upload()
    svc.shutdown()
    shutil.copy(saved, os.path.join(env.index_dir, name))  # crash before the local delete
    again = env.service()
    assert again.statuses() == [U, L]
    assert name not in env.local_names()
    assert lookup(again, "key3") == [(3, 300, T0 + 3000)]


def test_restart_removes_a_half_uploaded_segment(env):
    svc = env.service()
    put_n(svc, 25)
    before = all_lookups(svc, 25)
    svc.shutdown()
    # A crash in the middle of an upload: a segment with some bytes, never sealed.
    flat_seg = env.services[0].flat_file.roll(0)
    flat_seg.append(b"\xbc\xc5\x02\x85" + b"\x00" * 60)
    assert flat_seg.commit()
    env.services[0].flat_file.flush_metadata(flat_seg)
    again = env.service()
    assert env.segment_metas() == []
    assert not env.driver.exists(flat_seg.path)
    assert again.statuses() == [S, L]
    assert again.compact_and_upload() == 1
    assert all_lookups(again, 25) == before


@pytest.mark.parametrize("landed", [None, 36, 300, 599])
def test_restart_removes_a_cut_short_upload_a_take_over_sealed(env, landed):
    """The process dies between two chunks of an upload, then a take-over seals the last
    segment of every file (the index's too): that segment is a prefix of the compacted file,
    sealed. It is removed like an unsealed half upload; a whole one is kept."""
    svc = env.service()
    put_n(svc, 25)  # two files: 19 sealed items, 6 in the current one
    before = all_lookups(svc, 25)
    first = svc.files()[0]
    whole = first.compacted_bytes()
    svc.shutdown()
    assert len(whole) == 28 + 5 * 8 + 19 * 28
    seg = env.services[0].flat_file.roll(0)
    seg.append(whole if landed is None else whole[:landed])
    assert seg.commit()
    env.services[0].flat_file.flush_metadata(seg)
    env.driver.seal(seg.path)  # the take-over's seal_tails
    again = env.service()
    if landed is None:  # the upload was whole: kept, and the local copy dropped
        assert [(m.size, m.status) for m in env.segment_metas()] == [(len(whole), SegmentStatus.SEALED)]
        assert again.statuses() == [U, L]
    else:
        assert env.segment_metas() == []
        assert not env.driver.exists(seg.path)
        assert again.statuses() == [S, L]
        assert again.compact_and_upload() == 1
        assert env.driver.read(seg.path, 0, len(whole)) == whole
    assert all_lookups(again, 25) == before


@pytest.mark.parametrize("damage", ["20 bytes", "slot 0"])
def test_restart_keeps_a_sealed_segment_it_cannot_prove_cut_short(env, damage):
    """Removal needs proof: a beginning whose slot table chains up to a longer file. Twenty
    bytes prove nothing, and a whole file whose slot 0 points too far is damage (its slot 1
    does not start where slot 0 would end): both stay, for verify to report and repair."""
    svc = env.service()
    put_n(svc, 25)
    whole = svc.files()[0].compacted_bytes()
    svc.shutdown()
    if damage == "20 bytes":
        data = whole[:20]
    else:
        data = bytearray(whole)
        struct.pack_into(">i", data, 28, struct.unpack_from(">i", whole, 28)[0] + 8 * 28)
        data = bytes(data)
    seg = env.services[0].flat_file.roll(0)
    seg.append(data)
    assert seg.commit()
    env.services[0].flat_file.flush_metadata(seg)
    env.driver.seal(seg.path)
    env.service()
    assert env.driver.read(seg.path, 0, len(data)) == data
    assert [m.size for m in env.segment_metas()] == [len(data)]


def test_restart_with_the_last_uploaded_object_gone_still_opens(env):
    """The check for a cut-short upload reads the last segment's head; an object deleted
    behind the store's back is the listing's finding (tiered verify), not a reason to refuse
    the open."""
    svc = env.service()
    put_n(svc, 25)
    assert svc.compact_and_upload() == 1
    [meta] = env.segment_metas()
    svc.shutdown()
    env.driver.delete(env.services[0].flat_file.segment_path(meta.base_offset))
    again = env.service()
    assert again.statuses() == [U, L]  # kept: queries name the missing object (NotFound)


def test_a_read_only_open_leaves_a_cut_short_upload_out(env):
    svc = env.service()
    put_n(svc, 25)
    before = all_lookups(svc, 25)
    whole = svc.files()[0].compacted_bytes()
    svc.shutdown()
    seg = env.services[0].flat_file.roll(0)
    seg.append(whole[:300])
    assert seg.commit()
    env.services[0].flat_file.flush_metadata(seg)
    env.driver.seal(seg.path)
    reader = IndexStoreService(env.driver, env.metadata, env.store_path, broker="broker-a",
                               config=IndexConfig(max_hash_slots=5, max_items=20), clock=env.clock, read_only=True)
    env.services.append(reader)
    assert reader.statuses() == [S, L]  # the local files; the segment is not a whole compacted file
    assert all_lookups(reader, 25) == before
    assert env.driver.size(seg.path) == 300  # a read-only open writes nothing


def test_corrupt_local_file_is_set_aside(env):
    svc = env.service()
    put_n(svc, 3)
    svc.shutdown()
    junk = os.path.join(env.index_dir, "123")
    with open(junk, "wb") as fh:
        fh.write(b"not an index file" * 10)
    again = env.service()
    assert os.path.exists(junk + ".corrupt") and not os.path.exists(junk)
    assert lookup(again, "key1") == [(1, 100, T0 + 1000)]


# -- queries across files ------------------------------------------------------------------


def test_window_starting_inside_an_older_file_finds_its_keys(env):
    """RocketMQ #9233/#10268: files are chosen by overlap, not by their begin lying in the window."""
    svc = env.service()
    svc.put_key(T, 1, 0, {"early"}, 500, 10, T0 + 5000)  # file A begins at T0
    put_n(svc, 18, start=10)  # fills A (T0 + 10 s .. T0 + 27 s)
    put_n(svc, 5, start=100)  # file B begins at T0 + 100 s
    assert [f.begin_timestamp for f in svc.files()] == [T0, T0 + 100_000]
    for _ in range(2):  # local, then uploaded
        assert lookup(svc, "early", begin=T0 + 3000, end=T0 + 120_000) == [(0, 500, T0 + 5000)]
        assert lookup(svc, "early", begin=T0 + 5000, end=T0 + 5000) == [(0, 500, T0 + 5000)]
        assert lookup(svc, "early", begin=T0 + 28_000, end=T0 + 120_000) == []
        assert lookup(svc, "key10", begin=T0 + 10_000, end=T0 + 10_000) == [(2, 1000, T0 + 10_000)]
        assert svc.compact_and_upload() in (0, 1)
    assert svc.statuses() == [U, L]


def test_results_are_newest_first_deduplicated_and_exactly_max_count(env):
    svc = env.service()
    for f in range(3):
        svc.put_key(T, 1, 0, {"1"}, f * 1000, 10, T0 + f * 20_000)
        put_n(svc, 18, start=f * 100, key=lambda i: f"other{i}")
    assert len(svc.files()) == 3
    for max_count, want in [(1, 1), (3, 3), (5, 3)]:
        got = svc.query(T, "1", max_count, 0, T0 * 2)
        assert len(got) == want
        assert [e.offset for e in got] == [2000, 1000, 0][:want]
    # The same message indexed twice (re-dispatched after a crash) is returned once.
    svc.put_key(T, 1, 0, {"1"}, 1000, 10, T0 + 20_000)
    assert [e.offset for e in svc.query(T, "1", 10, 0, T0 * 2)] == [2000, 1000, 0]
    svc.compact_and_upload()
    assert [e.offset for e in svc.query(T, "1", 10, 0, T0 * 2)] == [2000, 1000, 0]
    assert svc.query(T, "1", 0, 0, T0 * 2) == []
    assert svc.query(T, "1", 5, T0 * 2, 0) == []
    with pytest.raises(IllegalParam):
        svc.query(T, "1", -1, 0, T0)


def test_topic_id_filter_drops_colliding_topics(env):
    svc = env.service()
    svc.put_key("Aa", 1, 0, {"k"}, 10, 5, T0)
    svc.put_key("BB", 2, 0, {"k"}, 20, 5, T0)  # "Aa#k" and "BB#k" share a Java hash
    assert sorted(e.offset for e in svc.query("Aa", "k", 5, 0, T0)) == [10, 20]
    assert [e.offset for e in svc.query("Aa", "k", 5, 0, T0, topic_id=1)] == [10]


# -- expiry -------------------------------------------------------------------------------


def test_expired_uploaded_files_are_deleted(env):
    svc = env.service()
    put_n(svc, 40)
    assert svc.compact_and_upload() == 2
    first_end = svc.files()[0].end_timestamp
    assert svc.destroy_expired(first_end) == 0
    assert len(env.segment_metas()) == 2 and len(svc.files()) == 3
    assert svc.destroy_expired(first_end + 1) == 1
    metas = env.segment_metas()
    assert [m.base_offset for m in metas] == [28 + 5 * 8 + 19 * 28]
    assert not env.driver.exists(index_path("DefaultCluster", "broker-a", 0))
    assert len(svc.files()) == 2 and len(svc.flat_file.segments) == 1
    assert lookup(svc, "key0") == [] and lookup(svc, "key20") == [(0, 2000, T0 + 20_000)]
    svc.shutdown()
    again = env.service(reserved_hours=1)
    assert again.statuses() == [U, L]
    # Default expiry: reserved_hours before the clock. Everything uploaded goes; offsets go on.
    env.clock.now = again.files()[0].end_timestamp + 3_600_000 + 1
    assert again.destroy_expired() == 1
    assert env.segment_metas() == [] and again.statuses() == [L]
    put_n(again, 20, start=40)
    assert again.compact_and_upload() == 1
    assert [m.base_offset for m in env.segment_metas()] == [2 * (28 + 5 * 8 + 19 * 28)]
    assert lookup(again, "key41") == [(1, 4100, T0 + 41_000)]


# -- concurrency and the background thread ----------------------------------------------


def test_concurrent_puts_queries_and_uploads(env):
    svc = env.service(max_hash_slots=50, max_items=200, query_threads=3)
    n = 1200
    acked: list[int] = []
    errors: list[str] = []
    done = threading.Event()

    def writer():
        try:
            for i in range(n):
                r = svc.put_key(T, 1, i % 4, {f"key{i}", f"uniq{i}"}, i * 100, 100, T0 + i * 10)
                if r is not AppendResult.SUCCESS:
                    errors.append(f"put {i}: {r}")
                acked.append(i)
        finally:
            done.set()

    def reader():
        rng = random.Random(7)
        while not done.is_set():
            if not acked:
                continue
            i = acked[rng.randrange(len(acked))]
            got = svc.query(T, f"uniq{i}", 5, 0, T0 * 2)
            if [(e.queue_id, e.offset) for e in got] != [(i % 4, i * 100)]:
                errors.append(f"query {i}: {got}")

    def uploader():
        while not done.is_set():
            svc.compact_and_upload()

    threads = [threading.Thread(target=t) for t in (writer, reader, reader, uploader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    svc.compact_and_upload()
    assert sum(1 for s in svc.statuses() if s is U) >= 5
    for i in range(0, n, 7):
        (got,) = svc.query(T, f"key{i}", 5, 0, T0 * 2)
        ts = T0 + i * 10
        assert got.offset == i * 100 and ts - 999 <= got.store_timestamp <= ts  # whole seconds


def test_background_thread_uploads_sealed_files(env):
    svc = env.service(service_interval_s=0.05)
    svc.start()
    svc.start()  # idempotent
    put_n(svc, 50)
    deadline = time.monotonic() + 60
    while svc.statuses() != [U, U, L] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert svc.statuses() == [U, U, L]
    svc.shutdown()
    assert not svc._thread.is_alive()


def test_shutdown_refuses_further_work(env):
    svc = env.service()
    put_n(svc, 3)
    svc.shutdown()
    svc.shutdown()
    assert svc.put_key(T, 1, 0, {"k"}, 0, 1, T0) is AppendResult.FILE_CLOSED
    with pytest.raises(SegmentClosed):
        svc.query(T, "key1", 5, 0, T0 * 2)
    with pytest.raises(SegmentClosed):
        svc.start()


def test_config_is_validated():
    for bad in [dict(max_items=1), dict(max_hash_slots=0), dict(service_interval_s=0),
                dict(query_threads=True), dict(reserved_hours="72")]:
        with pytest.raises(IllegalParam):
            IndexConfig(**bad)


def test_from_store_config(tmp_path, env):
    cfg = StoreConfig(store_path=str(tmp_path / "s2"), broker="b1", cluster="c1", file_reserved_hours=5)
    svc = IndexStoreService.from_store_config(cfg, env.driver, env.metadata, max_hash_slots=5, max_items=20)
    env.services.append(svc)
    assert svc.config.reserved_hours == 5
    assert svc.flat_file.file_path == "b1/rmq_sys_INDEX/0"
    put_n(svc, 25)
    assert svc.compact_and_upload() == 1
    assert env.driver.exists(index_path("c1", "b1", 0))
    assert os.path.isdir(tmp_path / "s2" / "tiered_index_file")


def test_memory_driver_round_trip(tmp_path):
    driver = open_driver("memory", namespace=f"index-{tmp_path}")
    metadata = SqliteMetadataStore(str(tmp_path / "meta.db"))
    clock = Clock(T0)
    cfg = IndexConfig(max_hash_slots=5, max_items=20)
    svc = IndexStoreService(driver, metadata, str(tmp_path / "store"), config=cfg, clock=clock)
    put_n(svc, 45)
    before = all_lookups(svc, 45)
    assert svc.compact_and_upload() == 2
    svc.shutdown()
    again = IndexStoreService(driver, metadata, str(tmp_path / "store"), config=cfg, clock=clock)
    try:
        assert again.statuses() == [U, U, L]
        assert all_lookups(again, 45) == before
    finally:
        again.shutdown()
        metadata.close()
