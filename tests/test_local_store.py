"""LocalMessageStore: puts and reads across rolls, reput and listeners, key and time
lookups, flush modes, retention, large messages, concurrent puts, bad input."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tiered_core.codec import Message, index_key_hash, tags_hash_code
from tiered_core.errors import ConfigError, CorruptData, IllegalOffset, IllegalParam, SegmentClosed, StateConflict
from tiered_core.local import (
    BoundaryType,
    DispatchRequest,
    FlushMode,
    LocalMessageStore,
    LocalStoreConfig,
)

SMALL = dict(
    commit_log_file_size=64 * 1024,
    consume_queue_units_per_file=50,
    index_hash_slots=64,
    index_max_items=100,
    max_message_size=32 * 1024,
    background_services=False,
)


class Clock:
    """A settable store clock (ms)."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _store(path, clock=None, **overrides) -> LocalMessageStore:
    return LocalMessageStore(str(path), LocalStoreConfig(**{**SMALL, **overrides}), clock=clock)


def _msg(topic: str, i: int, size: int = 700, **kw) -> Message:
    body = (f"{topic}-{i}:".encode() * (size // 8 + 1))[:size]
    return Message(topic=topic, body=body, keys=kw.pop("keys", [f"key-{i}"]), tags=kw.pop("tags", f"tag{i % 2}"),
                   **kw)


def test_put_and_get_across_file_rolls(tmp_path):
    store = _store(tmp_path)
    sent: dict[tuple[str, int], list[Message]] = {}
    results = []
    for i in range(300):
        topic = "orders" if i % 2 else "payments"
        q = i % 3
        m = _msg(topic, i, size=200 + (i * 37) % 1500, properties={"trace": f"t{i}"})
        r = store.put_message(topic, q, m)
        assert r.queue_offset == len(sent.setdefault((topic, q), []))
        sent[(topic, q)].append(m)
        results.append(r)
    offsets = [r.commitlog_offset for r in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == 300
    assert len(os.listdir(tmp_path / "commitlog")) > 3
    assert store.reput() == 300
    assert store.list_queues() == sorted(sent)
    for (topic, q), msgs in sent.items():
        assert store.get_min_offset_in_queue(topic, q) == 0
        assert store.get_max_offset_in_queue(topic, q) == len(msgs)
        got = store.get_messages(topic, q, 0, max_count=1000)
        assert [m.queue_offset for m in got] == list(range(len(msgs)))
        for m, g in zip(msgs, got):
            assert (g.topic, g.queue_id, g.body, g.keys, g.tags) == (topic, q, m.body, m.keys, m.tags)
            assert g.properties["trace"] == m.properties["trace"]
            assert g.born_timestamp == m.born_timestamp
    # reading from the middle, bounded by count and bytes
    got = store.get_messages("orders", 1, 5, max_count=3)
    assert [m.queue_offset for m in got] == [5, 6, 7]
    got = store.get_messages("orders", 1, 5, max_count=50, max_bytes=1)
    assert [m.queue_offset for m in got] == [5]
    n = store.get_max_offset_in_queue("orders", 1)
    assert store.get_messages("orders", 1, n) == []
    with pytest.raises(IllegalOffset):
        store.get_messages("orders", 1, n + 1)
    assert store.get_messages("nothing", 0, 0) == []
    # raw bytes by physical offset
    r = results[10]
    raw = store.get_message_bytes(r.commitlog_offset)
    assert store.get_message_by_commitlog_offset(r.commitlog_offset).queue_offset == r.queue_offset
    assert len(raw) == store.get_consume_queue_units("payments", 1, r.queue_offset)[0].size
    store.close()


def test_reput_feeds_listeners_in_commit_log_order(tmp_path):
    store = _store(tmp_path)
    seen: list[DispatchRequest] = []
    store.add_dispatch_listener(seen.append)
    store.add_dispatch_listener(lambda req: 1 / 0)  # a failing listener does not stop others
    r1 = store.put_message("orders", 2, _msg("orders", 1, keys=["a", "b"], tags="paid",
                                             properties={"UNIQ_KEY": "U1"}))
    r2 = store.put_message("orders", 0, _msg("orders", 2, keys=[], tags=None))
    assert seen == []  # nothing until the reput runs
    assert store.reput() == 2
    assert store.reput() == 0
    assert store.reput_offset == store.get_commit_log_max_offset()
    a, b = seen
    assert (a.topic, a.queue_id, a.queue_offset, a.commitlog_offset) == ("orders", 2, 0, r1.commitlog_offset)
    assert a.store_timestamp == r1.store_timestamp
    assert a.size == r2.commitlog_offset - r1.commitlog_offset
    assert a.tags_code == tags_hash_code("paid") and a.tags == "paid"
    assert a.keys == ("a", "b") and a.uniq_key == "U1"
    assert (b.queue_id, b.keys, b.uniq_key, b.tags_code) == (0, (), None, 0)
    store.close()


def test_background_reput_and_flush(tmp_path):
    store = _store(tmp_path, background_services=True, flush_interval_ms=10)
    done = threading.Event()
    count = [0]

    def listener(req: DispatchRequest) -> None:
        count[0] += 1
        if count[0] == 50:
            done.set()

    store.add_dispatch_listener(listener)
    for i in range(50):
        store.put_message("orders", 0, _msg("orders", i))
    assert done.wait(30), "the reput thread did not dispatch 50 messages"
    end = store.get_commit_log_max_offset()
    for _ in range(3000):  # the flush thread, not this test, moves the commit point
        if store.commit_point() >= end:
            break
        time.sleep(0.01)
    assert store.commit_point() == end
    store.close()
    with pytest.raises(SegmentClosed):
        store.put_message("orders", 0, _msg("orders", 0))


def test_sync_flush_makes_each_put_durable_before_it_returns(tmp_path):
    store = _store(tmp_path, flush_mode="sync")
    assert store.config.flush_mode is FlushMode.SYNC
    for i in range(20):
        r = store.put_message("orders", 0, _msg("orders", i))
        end = r.commitlog_offset + store.get_message_bytes(r.commitlog_offset).__len__()
        assert store.flushed_offset >= end
        assert store.commit_point() >= end
    store.close()


def test_async_flush_holds_the_commit_point_until_a_flush(tmp_path):
    store = _store(tmp_path)  # ASYNC, no background flusher in this test
    before = store.commit_point()
    r = store.put_message("orders", 0, _msg("orders", 1))
    assert store.commit_point() == before <= r.commitlog_offset
    store.flush()
    assert store.commit_point() == store.get_commit_log_max_offset() > r.commitlog_offset
    store.close()


def test_five_mib_message_is_stored_and_read_back(tmp_path):
    cfg = dict(commit_log_file_size=6 << 20, max_message_size=(6 << 20) - 8)
    store = _store(tmp_path, **cfg)
    body = os.urandom(5 << 20)
    store.put_message("big", 0, Message(topic="big", body=b"small", keys=["s"]))
    store.put_message("big", 0, Message(topic="big", body=body, keys=["huge"]))
    r = store.put_message("big", 0, Message(topic="big", body=body[::-1], keys=["huge2"]))
    assert r.commitlog_offset == 6 << 20  # it did not fit the rest of the first file
    store.reput()
    got = store.get_messages("big", 0, 0, 10)
    assert [len(m.body) for m in got] == [5, 5 << 20, 5 << 20]
    assert got[1].body == body and got[2].body == body[::-1]
    assert store.query_message("big", "huge")[0].body == body
    store.close()
    store = _store(tmp_path, **cfg)
    assert store.get_messages("big", 0, 1, 1)[0].body == body
    with pytest.raises(IllegalParam):
        store.put_message("big", 0, Message(topic="big", body=bytes(6 << 20)))
    store.close()


def test_concurrent_puts_from_threads_to_different_queues(tmp_path):
    store = _store(tmp_path, background_services=True)
    per_thread = 150
    errors = []

    def worker(q: int) -> None:
        try:
            for i in range(per_thread):
                r = store.put_message("orders", q, _msg("orders", q * 1000 + i, size=300))
                assert r.queue_offset == i
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(q,)) for q in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store.reput()
    offsets = set()
    for q in range(4):
        got = store.get_messages("orders", q, 0, 1000)
        assert [m.keys for m in got] == [[f"key-{q * 1000 + i}"] for i in range(per_thread)]
        offsets.update(m.commitlog_offset for m in got)
    assert len(offsets) == 4 * per_thread
    store.close()


def test_query_by_key_handles_hash_collisions_uniq_keys_and_time(tmp_path):
    clock = Clock(10_000)
    store = _store(tmp_path, clock=clock, index_hash_slots=4)  # few slots: long chains
    assert index_key_hash("orders", "Aa") == index_key_hash("orders", "BB")
    for i in range(30):
        clock.now += 1000
        key = ["Aa", "BB", "Cc"][i % 3]
        store.put_message("orders", i % 2, _msg("orders", i, keys=[key, f"id{i}"]))
    store.put_message("refunds", 0, _msg("refunds", 99, keys=["Aa"], properties={"UNIQ_KEY": "U-99"}))
    store.reput()
    got = store.query_message("orders", "Aa", max_count=100)
    assert [int(m.keys[1][2:]) for m in got] == list(range(27, -1, -3))  # newest first, no BB
    assert all("Aa" in m.keys and m.topic == "orders" for m in got)
    assert [m.keys[1] for m in store.query_message("orders", "BB", max_count=3)] == ["id28", "id25", "id22"]
    assert [m.keys for m in store.query_message("orders", "id7")] == [["BB", "id7"]]
    assert [m.queue_id for m in store.query_message("refunds", "U-99")] == [0]
    assert store.query_message("refunds", "BB") == []
    # time range: message i was stored at 11_000 + i*1000
    got = store.query_message("orders", "Aa", 100, begin=11_000 + 6 * 1000, end=11_000 + 15 * 1000)
    assert [m.keys[1] for m in got] == ["id15", "id12", "id9", "id6"]
    store.close()


def test_offset_by_time_lower_and_upper(tmp_path):
    """The digest's table (store times 40,50,50,50,60,60,70 at offsets 10..16)."""
    clock = Clock(30)
    store = _store(tmp_path, clock=clock)
    assert store.get_offset_in_queue_by_time("orders", 0, 50) == 0  # unknown queue
    for i in range(10):
        store.put_message("orders", 0, _msg("orders", i))  # offsets 0..9 at time 30
    for t in (40, 50, 50, 50, 60, 60, 70):
        clock.now = t
        store.put_message("orders", 0, _msg("orders", t))
    store.put_message("other", 0, _msg("other", 0))
    store.reput()
    lookup = store.get_offset_in_queue_by_time
    L, U = BoundaryType.LOWER, BoundaryType.UPPER
    assert lookup("orders", 0, 35) == 10
    assert lookup("orders", 0, 45) == 11 and lookup("orders", 0, 45, U) == 11
    assert lookup("orders", 0, 50, L) == 11
    assert lookup("orders", 0, 50, U) == 13
    assert lookup("orders", 0, 60, L) == 14
    assert lookup("orders", 0, 60, U) == 15
    assert lookup("orders", 0, 70, U) == 16
    assert lookup("orders", 0, 75) == 17 and lookup("orders", 0, 75, U) == 17
    assert lookup("orders", 0, 30, L) == 0 and lookup("orders", 0, 30, U) == 9
    assert lookup("orders", 0, 5) == 0
    assert store.get_store_timestamp("orders", 0, 12) == 50
    assert store.get_earliest_message_time() == 30
    assert store.get_earliest_message_time("orders", 0) == 30
    assert store.get_earliest_message_time("none", 0) == -1
    with pytest.raises(IllegalParam):
        lookup("orders", 0, 50, "LOWER")
    store.close()


def test_store_timestamps_never_go_backwards(tmp_path):
    clock = Clock(5000)
    store = _store(tmp_path, clock=clock)
    a = store.put_message("orders", 0, _msg("orders", 1))
    clock.now = 4000  # the wall clock stepped back
    b = store.put_message("orders", 0, _msg("orders", 2))
    assert b.store_timestamp == a.store_timestamp == 5000
    store.close()


def _fill_for_retention(store: LocalMessageStore, clock: Clock, count: int) -> list:
    results = []
    for i in range(count):
        clock.now += 100
        results.append(store.put_message("orders", i % 2, _msg("orders", i, size=2000)))
    store.reput()
    store.flush()
    return results


def test_retention_deletes_expired_files_and_moves_min_offsets(tmp_path):
    clock = Clock(1_000_000)
    store = _store(tmp_path, clock=clock, file_reserved_time_ms=60_000)
    results = _fill_for_retention(store, clock, 200)
    files = store.commit_log.files()
    assert len(files) >= 6
    # nothing is old enough yet
    assert store.delete_expired(clock.now) == 0
    # a full file's mtime is its last message's store time: expire the first three
    cutoff = files[2].mtime_ms() + 60_000
    assert files[3].mtime_ms() + 60_000 > cutoff
    assert store.delete_expired(cutoff) == 3
    new_min = files[3].start
    assert store.get_commit_log_min_offset() == new_min
    assert sorted(os.listdir(tmp_path / "commitlog"))[0] == f"{new_min:020d}"
    for q in (0, 1):
        lo = store.get_min_offset_in_queue("orders", q)
        first = [r for r in results if r.commitlog_offset >= new_min and (results.index(r) % 2) == q][0]
        assert lo == first.queue_offset > 0
        with pytest.raises(IllegalOffset):
            store.get_messages("orders", q, lo - 1)
        assert store.get_messages("orders", q, lo, 1)[0].commitlog_offset == first.commitlog_offset
        assert store.get_max_offset_in_queue("orders", q) == 100
    assert store.query_message("orders", "key-0") == []
    assert len(store.query_message("orders", "key-199")) == 1
    assert store.get_earliest_message_time() == min(r.store_timestamp for r in results
                                                    if r.commitlog_offset >= new_min)
    assert store.get_offset_in_queue_by_time("orders", 0, 0) == store.get_min_offset_in_queue("orders", 0)
    # keep_from protects what is not tiered yet; the active file is never deleted
    assert store.delete_expired(10**15, keep_from=files[4].limit - 1) == 1
    assert store.get_commit_log_min_offset() == files[4].start
    remaining = len(store.commit_log.files())
    assert store.delete_expired(10**15) == remaining - 1
    assert len(store.commit_log.files()) == 1
    assert store.get_max_offset_in_queue("orders", 0) == 100
    store.close()
    # offsets survive a restart after retention, and the queues go on
    store = _store(tmp_path, clock=clock, file_reserved_time_ms=60_000)
    assert store.get_max_offset_in_queue("orders", 0) == 100
    assert store.put_message("orders", 0, _msg("orders", 1000)).queue_offset == 100
    store.close()


def test_retention_never_deletes_what_was_not_reput_or_flushed(tmp_path):
    clock = Clock(1_000_000)
    store = _store(tmp_path, clock=clock, file_reserved_time_ms=1)
    for i in range(100):
        store.put_message("orders", 0, _msg("orders", i, size=2000))
    assert store.delete_expired(10**15) == 0  # no reput yet
    store.reput()
    assert store.delete_expired(10**15) == 0  # not flushed yet
    store.flush()
    assert store.delete_expired(10**15) > 0
    store.close()


def test_bad_input_is_rejected_and_nothing_is_stored(tmp_path):
    store = _store(tmp_path)
    store.put_message("orders", 0, _msg("orders", 0))
    end = store.get_commit_log_max_offset()
    bad = [
        ("bad topic!", 0, _msg("bad topic!", 1)),
        ("../x", 0, _msg("../x", 1)),
        ("orders", -1, _msg("orders", 1)),
        ("orders", 2**31, _msg("orders", 1)),
        ("orders", True, _msg("orders", 1)),
        ("orders", 0, _msg("payments", 1)),
        ("orders", 0, "not a message"),
        ("orders", 0, Message(topic="orders", body=bytes(40 * 1024))),
        ("orders", 0, Message(topic="orders", keys=["has space"])),
    ]
    for topic, q, m in bad:
        with pytest.raises(IllegalParam):
            store.put_message(topic, q, m)
    assert store.get_commit_log_max_offset() == end
    assert store.put_message("orders", 0, _msg("orders", 2)).queue_offset == 1
    with pytest.raises(IllegalParam):
        store.query_message("orders", "")
    with pytest.raises(IllegalParam):
        store.get_messages("orders", 0, 0, 0)
    store.close()


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError) as err:
        LocalStoreConfig(commit_log_file_size=10)
    assert err.value.key == "commit_log_file_size"
    with pytest.raises(ConfigError) as err:
        LocalStoreConfig(flush_mode="sometimes")
    assert err.value.key == "flush_mode"
    with pytest.raises(ConfigError) as err:
        LocalStoreConfig(commit_log_file_size=1 << 20, max_message_size=2 << 20)
    assert err.value.key == "max_message_size"
    with pytest.raises(ConfigError) as err:
        LocalStoreConfig(store_host=("127.0.0.1", 70000))
    assert err.value.key == "store_host"
    with pytest.raises(ConfigError) as err:
        LocalStoreConfig(index_max_items=1)
    assert err.value.key == "index_max_items"
    # RocketMQ's flushDiskType values are understood
    assert LocalStoreConfig(flush_mode="SYNC_FLUSH").flush_mode is FlushMode.SYNC
    assert LocalStoreConfig(flush_mode="async_flush").flush_mode is FlushMode.ASYNC


def test_without_the_index_key_queries_find_nothing(tmp_path):
    store = _store(tmp_path, message_index_enable=False)
    store.put_message("orders", 0, _msg("orders", 1))
    store.reput()
    assert store.query_message("orders", "key-1") == []
    assert not os.path.exists(tmp_path / "index")
    assert len(store.get_messages("orders", 0, 0)) == 1
    store.close()


def test_a_lost_key_index_is_indexed_again_at_the_next_open(tmp_path):
    """A Spark drill: the local key index files were lost (the directory emptied); the
    checkpoint's reput offset said every message was indexed, so key lookups of the local
    messages missed for good (999 of 1000), even after `tiered spark reindex`."""
    store = _store(tmp_path)
    for i in range(50):
        store.put_message("orders", 0, _msg("orders", i, size=100))
    store.reput()
    store.close()
    for name in os.listdir(tmp_path / "index"):
        os.unlink(tmp_path / "index" / name)
    reader = _store(tmp_path, read_only=True)  # a reader cannot index: it says so, and finds nothing
    assert reader.query_message("orders", "key-7") == []
    reader.close()
    store = _store(tmp_path)
    for i in (0, 7, 49):
        assert [m.queue_offset for m in store.query_message("orders", f"key-{i}")] == [i]
    store.close()


def test_reads_race_retention_safely(tmp_path):
    """Readers chasing the min offset while retention deletes files see only whole
    messages or IllegalOffset for offsets that just expired."""
    clock = Clock(1_000_000)
    store = _store(tmp_path, clock=clock, file_reserved_time_ms=0)
    _fill_for_retention(store, clock, 300)
    stop = threading.Event()
    errors: list[Exception] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            lo = store.get_min_offset_in_queue("orders", 0)
            try:
                got = store.get_messages("orders", 0, lo, 8)
            except IllegalOffset:
                continue
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            assert all(m.body.startswith(f"orders-{m.keys[0][4:]}:".encode()) for m in got)
            reads[0] += 1

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(10_000):  # let the readers get going first
        if reads[0] or errors:
            break
        time.sleep(0.001)
    deleted = 0
    for f in store.commit_log.files()[:-1]:
        deleted += store.delete_expired(f.mtime_ms())
    stop.set()
    for t in threads:
        t.join()
    assert errors == [] and deleted >= 5 and reads[0] > 0
    assert len(store.commit_log.files()) == 1
    store.close()


def test_a_store_directory_is_opened_by_one_owner_at_a_time(tmp_path):
    store = _store(tmp_path)
    with pytest.raises(StateConflict):
        _store(tmp_path)
    store.close()
    store.close()  # idempotent
    with _store(tmp_path) as again:
        assert again.list_queues() == []


def test_read_messages_filters_by_tags_code_and_says_where_to_go_on(tmp_path):
    store = _store(tmp_path)
    for i in range(40):
        store.put_message("orders", 0, _msg("orders", i, size=100, tags="paid" if i % 10 == 9 else "new"))
    store.reput()
    paid = tags_hash_code("paid")
    r = store.read_messages("orders", 0, 0, 2, message_filter=lambda code: code == paid)
    assert [m.queue_offset for m in r.messages] == [9, 19]
    assert (r.next_offset, r.min_offset, r.max_offset) == (20, 0, 40)
    r = store.read_messages("orders", 0, 20, 10, message_filter=lambda code: code == paid, max_scan=5)
    assert (r.messages, r.next_offset) == ([], 25)
    r = store.read_messages("orders", 0, 25, 10, message_filter=lambda code: code == paid)
    assert [m.queue_offset for m in r.messages] == [29, 39] and r.next_offset == 40
    r = store.read_messages("orders", 0, 3, 10, max_bytes=250)
    assert [m.queue_offset for m in r.messages] == [3] and r.next_offset == 4
    r = store.read_messages("orders", 0, 40, 10)
    assert (r.messages, r.next_offset) == ([], 40)
    r = store.read_messages("unknown", 0, 7, 10)
    assert (r.messages, r.next_offset, r.min_offset, r.max_offset) == ([], 7, 0, 0)
    store.close()


def test_store_timestamps_stay_monotonic_across_a_restart(tmp_path):
    clock = Clock(9000)
    store = _store(tmp_path, clock=clock)
    for i in range(40):  # several files, so the newest message is not in the last file's scan only
        store.put_message("orders", 0, _msg("orders", i, size=3000))
    store.close()
    clock.now = 100  # the clock went back while the store was down
    store = _store(tmp_path, clock=clock)
    assert store.put_message("orders", 0, _msg("orders", 99)).store_timestamp == 9000
    store.close()


def test_corrupt_bytes_are_never_handed_on(tmp_path):
    store = _store(tmp_path)
    r = store.put_message("orders", 0, _msg("orders", 1, size=500))
    store.put_message("orders", 0, _msg("orders", 2, size=500))
    store.reput()
    unit = store.get_consume_queue_units("orders", 0, 0)[0]
    raw = store.get_message_bytes(r.commitlog_offset, unit.size)
    path = os.path.join(tmp_path, "commitlog", f"{0:020d}")
    with open(path, "r+b") as f:  # bit rot inside the first message's body
        f.seek(r.commitlog_offset + len(raw) - 200)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(CorruptData) as err:
        store.get_message_bytes(r.commitlog_offset, unit.size)
    assert err.value.offset == r.commitlog_offset
    with pytest.raises(CorruptData):
        store.get_messages("orders", 0, 0, 1)
    with pytest.raises(CorruptData):
        store.get_message_bytes(r.commitlog_offset, unit.size - 1)  # a wrong size from a unit
    assert len(store.get_message_bytes(r.commitlog_offset, unit.size, verify=False)) == unit.size
    assert store.get_messages("orders", 0, 1, 1)[0].queue_offset == 1
    store.close()


def test_disk_failures_are_typed_and_leave_the_store_usable(tmp_path, monkeypatch):
    from tiered_core.errors import LocalIOError
    import errno

    store = _store(tmp_path)
    store.put_message("orders", 0, _msg("orders", 0))
    end = store.get_commit_log_max_offset()
    real = os.pwrite

    def full_disk(fd, data, pos):  # fault injection: the disk is full for one write
        real(fd, bytes(data)[:10], pos)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full_disk)
    with pytest.raises(LocalIOError) as err:
        store.put_message("orders", 0, _msg("orders", 1))
    assert err.value.retryable and err.value.errno == errno.ENOSPC and err.value.stored is False
    assert err.value.path.endswith("00000000000000000000")
    assert os.path.getsize(err.value.path) == end  # the partial bytes were cut
    monkeypatch.setattr(os, "pwrite", real)
    assert store.get_commit_log_max_offset() == end
    r = store.put_message("orders", 0, _msg("orders", 2))
    assert (r.queue_offset, r.commitlog_offset) == (1, end)  # the failed put left no trace
    store.reput()
    assert [m.keys for m in store.get_messages("orders", 0, 0)] == [["key-0"], ["key-2"]]
    store.close()
    store = _store(tmp_path)
    assert [m.keys for m in store.get_messages("orders", 0, 0)] == [["key-0"], ["key-2"]]
    store.close()
    (tmp_path / "afile").write_bytes(b"x")
    with pytest.raises(IllegalParam):
        _store(tmp_path / "afile")


def test_a_directory_open_elsewhere_is_refused_naming_the_holder_and_the_fix(tmp_path):
    """An operator drill (round 3): "local store ... is open in another process" named no
    process and no fix."""
    from tiered_core.local.local_store import acquire_store_lock, release_store_lock

    fd = acquire_store_lock(str(tmp_path))
    try:
        with pytest.raises(StateConflict) as info:
            acquire_store_lock(str(tmp_path))
        assert info.value.context["pid"] == os.getpid()
        assert f"(pid {os.getpid()})" in str(info.value) and "stop that process first" in str(info.value)
    finally:
        release_store_lock(fd)


@pytest.mark.parametrize("reopened_with", [128 << 10, 16 << 10])
def test_a_changed_commit_log_file_size_is_a_config_error_naming_the_key(tmp_path, reopened_with):
    """An operator drill (round 3): a store reopened with another local_commit_log_file_size
    failed with STATE_CONFLICT (exit 5) naming a file only ("holds 65536 bytes, more than the
    file size 16384"). It is a CONFIG error naming the key and the size the files were made with."""
    from tiered_core.codec.message import Message

    config = LocalStoreConfig(commit_log_file_size=64 << 10, background_services=False)
    with LocalMessageStore(tmp_path, config) as store:
        for i in range(200):
            store.put_message("t", 0, Message(topic="t", body=bytes(600)))
    with pytest.raises(ConfigError) as info:
        LocalMessageStore(tmp_path, LocalStoreConfig(commit_log_file_size=reopened_with, background_services=False))
    assert info.value.context["key"] == "local_commit_log_file_size"
    assert "(65536 bytes here)" in str(info.value)
