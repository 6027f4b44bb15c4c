"""An offset names one message forever (issue 18): every recovery path continues each queue
past what the tier holds, and every offset the tier holds stays readable from it.

The paths: a lost local disk (same ``store_path`` with ``tiered takeover``, or a failover to a
new ``store_path``), a restored old copy of the store directory, lost metadata rebuilt from the
backend. Each test writes messages whose bodies name their offset, goes through the path,
puts again, and checks that the new offsets are past the tier's and that every old offset
still reads back its own body.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from store_workload import small_config as _small_config

from tiered_conformance.drills import copy_sparse
from tiered_core import BoundaryType, Message
from tiered_core.access.dispatcher import MessageStoreDispatcher
from tiered_core.index.coverage import COVERAGE_FILE
from tiered_core.access.results import GetMessageStatus
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.common import now_ms
from tiered_core.cli.ops import _dispatch_failure
from tiered_core.errors import OffsetConflict, StateConflict
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.local.local_consume_queue import FLOOR_FILE, ConsumeQueue
from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")

FAR_FUTURE_MS = 1 << 50
TOPIC = "topic0"


def config_at(tmp_path: Path, store: str = "store", **overrides):
    """POSIX, 64 KiB local and tiered files; the tier outside every store_path."""
    return _small_config(tmp_path, "posix", {"root": str(tmp_path / "tier")}, store_path=str(tmp_path / store),
                         **{"local_commit_log_file_size": 64 << 10, "commit_log_max_size": 64 << 10, **overrides})


def body(tag: str, queue_id: int, seq: int) -> bytes:
    return f"{tag}|{queue_id}|{seq}|".encode() * 8


def put(store: TieredMessageStore, tag: str, n: int, queues: int = 2) -> dict[tuple[int, int], bytes]:
    """Put ``n`` messages round-robin on ``queues`` queues (key ``{tag}-{queue}-{seq}``);
    returns {(queue, offset the put answered): body}."""
    sent = {}
    for i in range(n):
        qid = i % queues
        data = body(tag, qid, i // queues)
        r = store.put_message(Message(topic=TOPIC, body=data, keys=[f"{tag}-{qid}-{i // queues}"]), qid)
        assert (qid, r.queue_offset) not in sent, "one offset handed out twice"
        sent[(qid, r.queue_offset)] = data
    return sent


def tier_only(store: TieredMessageStore) -> None:
    store.dispatch(force=True)
    store.delete_expired_local(FAR_FUTURE_MS)


def assert_reads_back(store: TieredMessageStore, sent: dict[tuple[int, int], bytes]) -> None:
    """Every (queue, offset) reads back its own body, read 32 at a time from each queue's start."""
    by_queue: dict[int, list[int]] = {}
    for qid, off in sent:
        by_queue.setdefault(qid, []).append(off)
    for qid, offsets in by_queue.items():
        got: dict[int, bytes] = {}
        off, end = min(offsets), max(offsets) + 1
        while off < end:
            res = store.get_message("g", TOPIC, qid, off, 32)
            # a given-up range answers "skip to next_begin_offset"; what it skips is checked below
            assert res.status is GetMessageStatus.FOUND or res.next_begin_offset > off, \
                f"{TOPIC}/{qid}@{off}: {res.status.name}"
            for m in res.messages:
                got[m.queue_offset] = m.body
            off = res.next_begin_offset
        for o in offsets:
            assert got.get(o) == sent[(qid, o)], f"{TOPIC}/{qid}@{o} does not read back its own body"


def test_lost_disk_and_takeover_continue_after_the_tier(tmp_path, capsys):
    """The issue's reproduction: rm -rf the store_path, takeover, put --dispatch, get."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        sent = put(store, "before", 3000)
        tier_only(store)
    shutil.rmtree(cfg.store_path)
    toml = tmp_path / "s2.toml"
    toml.write_text(
        f'[tiered]\nstore_path = "{cfg.store_path}"\ndriver = "posix"\ncommit_log_max_size = "64KiB"\n'
        f'consume_queue_max_size = "6000"\nlocal_commit_log_file_size = "64KiB"\n'
        f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    assert main(["takeover", "--config", str(toml), "--create"]) == 0  # the disk is gone: asked explicitly
    capsys.readouterr()
    assert main(["put", "--config", str(toml), "--topic", TOPIC, "--body", "after-loss", "--dispatch", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queue_offset"] == 1500, "a put after the lost disk reused an offset the tier holds"
    assert out["dispatch"]["messages"] == 1 and out["dispatch"]["errors"] == []
    with TieredMessageStore.open(cfg.replace(store_path=cfg.store_path)) as store:
        assert_reads_back(store, {**sent, (0, 1500): b"after-loss"})
        assert store.get_max_offset_in_queue(TOPIC, 0) == 1501
        assert store.get_max_offset_in_queue(TOPIC, 1) == 1500


def test_failover_to_a_new_store_path(tmp_path):
    """Another broker takes the prefix over from a new, empty store_path."""
    old = config_at(tmp_path, "old")
    with TieredMessageStore.open(old) as store:
        sent = put(store, "a", 400)
        store.dispatch(force=True)  # tiered, local copy kept
    new = config_at(tmp_path, "new")
    with TieredMessageStore.open(new, take_over=True) as store:
        after = put(store, "b", 10)
        assert sorted(o for q, o in after if q == 0) == list(range(200, 205))
        store.dispatch(force=True)
        assert_reads_back(store, {**sent, **after})
        # Time lookups over the tier's range name tiered offsets.
        first_ts = store.get_message("g", TOPIC, 0, 0, 1).messages[0].store_timestamp
        assert store.get_offset_in_queue_by_time(TOPIC, 0, first_ts, BoundaryType.LOWER) == 0
    with TieredMessageStore.open(new) as store:  # and it holds after a reopen
        later = put(store, "c", 4)
        assert sorted(o for q, o in later if q == 0) == [205, 206]
        store.local.reput()  # readable once reput (the background thread may not have run yet)
        assert_reads_back(store, {**sent, **after, **later})


def test_restored_old_directory_continues_after_the_tier(tmp_path):
    """A backup of the store directory taken at offset 100, restored after 100 more were tiered."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        sent = put(store, "a", 200)
        store.dispatch(force=True)
    backup = tmp_path / "backup"
    shutil.copytree(cfg.store_path, backup, copy_function=copy_sparse)
    with TieredMessageStore.open(cfg) as store:
        sent.update(put(store, "b", 200))
        store.dispatch(force=True)
        b_ts = store.get_message("g", TOPIC, 0, 150, 1).messages[0].store_timestamp
    shutil.rmtree(cfg.store_path)
    shutil.copytree(backup, cfg.store_path, copy_function=copy_sparse)
    with TieredMessageStore.open(cfg) as store:
        assert store.local.get_max_offset_in_queue(TOPIC, 0) == 200  # continued past the tier's 200
        # The backup's key index ends before the b messages: the open indexed them again from the tier.
        assert store.key_repair is not None and store.key_repair.since <= b_ts and store.key_repair.done.is_set()
        assert store.key_index_gap_since is None and store.index.coverage.known
        hits = store.query_message(TOPIC, "b-0-70").messages
        assert [(m.queue_id, m.body) for m in hits] == [(0, body("b", 0, 70))]
        after = put(store, "c", 6)
        assert sorted(o for q, o in after if q == 0) == [200, 201, 202]
        store.local.reput()
        assert_reads_back(store, {**sent, **after})
        times = [store.get_message("g", TOPIC, 0, o, 1).messages[0].store_timestamp for o in range(203)]
        expected = next(o for o, t in enumerate(times) if t >= b_ts)
        assert store.get_offset_in_queue_by_time(TOPIC, 0, b_ts, BoundaryType.LOWER) == expected
        # The backup's local copy of offset 5 is below the floor: the tier serves it.
        hits = store.query_message(TOPIC, "a-0-5").messages
        assert [(m.queue_id, m.queue_offset, m.body) for m in hits] == [(0, 5, body("a", 0, 5))]
        store.dispatch(force=True)
    with TieredMessageStore.open(cfg) as store:  # the floor is durable: the gap reads from the tier
        assert_reads_back(store, {**sent, **after})
        assert store.key_repair is None  # a plain reopen is no recovery


def test_restored_old_directory_after_tiered_expiry_reads_as_expired(tmp_path):
    """A backup of the store directory restored after tiered retention deleted old segments:
    what the backup's metadata lists and the tier expired reads as expired ("offset too
    small"), not as damage, from the first open on, also for a read-only open; a segment
    missing that is not past its reserve time stays damage."""
    cfg = config_at(tmp_path, file_reserved_hours=1)
    later = now_ms() + 2 * 3600_000  # past the reserve time of everything written now
    with TieredMessageStore.open(cfg) as store:
        sent = put(store, "a", 2000)
        store.dispatch(force=True)
    backup = tmp_path / "backup"
    shutil.copytree(cfg.store_path, backup, copy_function=copy_sparse)
    with TieredMessageStore.open(cfg) as store:
        tier_only(store)
        store.delete_expired_tiered(later)
        tiered_min = store.stat()[0].tiered_min
    assert 0 < tiered_min < 1000
    shutil.rmtree(cfg.store_path)
    shutil.copytree(backup, cfg.store_path, copy_function=copy_sparse)
    with TieredMessageStore.open(cfg, read_only=True, clock=lambda: later) as store:
        assert [s.damage for s in store.stat()] == [[], []]
    with TieredMessageStore.open(cfg, clock=lambda: later) as store:
        stats = store.stat()
        assert [(s.tiered_min, s.damage) for s in stats] == [(tiered_min, []), (tiered_min, [])]
        store.delete_expired_local(FAR_FUTURE_MS)
        res = store.get_message("g", TOPIC, 0, 0, 1)
        assert res.status is GetMessageStatus.OFFSET_TOO_SMALL and res.next_begin_offset == tiered_min
        assert_reads_back(store, {k: v for k, v in sent.items() if k[1] >= tiered_min})
        after = put(store, "b", 2)
        assert sorted(after) == [(0, 1000), (1, 1000)]
    # Not past the reserve time (the clock of the restore): missing is damage, as before.
    shutil.rmtree(cfg.store_path)
    shutil.copytree(backup, cfg.store_path, copy_function=copy_sparse)
    with TieredMessageStore.open(cfg, read_only=True) as store:
        assert all(s.damage and s.tiered_min == 0 for s in store.stat())


def restored_after(cfg, tag: str, later):
    """Put 3 messages (``tag``) on queue 0 and tier them, back the store directory up, call
    ``later(store)`` and tier what it put, then put the backup back in place; returns what
    ``later`` returned."""
    with TieredMessageStore.open(cfg) as store:
        put(store, tag, 3, queues=1)
        store.dispatch(force=True)
    backup = Path(cfg.store_path).with_name("backup")
    shutil.copytree(cfg.store_path, backup, copy_function=copy_sparse)
    with TieredMessageStore.open(cfg) as store:
        result = later(store)
        store.dispatch(force=True)
    shutil.rmtree(cfg.store_path)
    shutil.copytree(backup, cfg.store_path, copy_function=copy_sparse)
    return result


def test_restored_copy_finds_keys_of_a_queue_it_never_had(tmp_path):
    """A backup holding queue 0 only; queue 1 is first written (and tiered) after it. Restored
    (metadata rebuilt, the documented path), queue 1's keys are newer than every local message: lookups must still ask the tier.
    (Found by bench/offset_state_machine.py: ``key k6 of sm/0@0 finds []``.)"""
    cfg = config_at(tmp_path)
    r = restored_after(cfg, "a", lambda store: store.put_message(Message(topic=TOPIC, body=b"late",
                                                                         keys=["late-key"]), 1))
    with TieredMessageStore.open(cfg.replace(metadata_recovery="rebuild")) as store:
        assert store.local.get_earliest_message_time() >= 0  # the backup's queue 0 is still local
        assert not store.local.has_queue(TOPIC, 1)
        hits = store.query_message(TOPIC, "late-key").messages
        assert [(m.queue_id, m.queue_offset, m.body) for m in hits] == [(1, r.queue_offset, b"late")]
        assert [m.body for m in store.query_message(TOPIC, "a-0-1").messages] == [body("a", 0, 1)]


def test_a_read_only_open_of_a_restored_copy_serves_times_and_says_its_keys_may_be_missed(tmp_path, capsys):
    """An upgrade drill (U2): after a restored backup and `metadata rebuild --force`, and
    before any writable open, a read-only open answered the time lookup of a message tiered
    after the backup with the local end, a read past the tier's end with "next: the local
    end" (a consumer would read the tier's messages again), and its key lookup with "no message has key": the
    key index's local part (restored) misses those keys, and a read-only open cannot index
    them again. Now the time lookup asks the tier, and the key lookup says it may have missed
    messages (exit 5); the next writable open indexes them and finds the key."""
    cfg = config_at(tmp_path)
    late = restored_after(cfg, "early", lambda store: [
        store.put_message(Message(topic=TOPIC, body=b"late%d" % i, keys=[f"late{i}"]), 0) for i in range(3)])
    toml = tmp_path / "t.toml"
    toml.write_text(cfg.to_toml())
    assert main(["metadata", "rebuild", "--config", str(toml), "--force"]) == 0
    capsys.readouterr()
    with TieredMessageStore.open(cfg, read_only=True) as store:
        assert store.local.get_max_offset_in_queue(TOPIC, 0) < late[-1].queue_offset  # the restored copy
        for r in late:
            got = store.get_message("g", TOPIC, 0, r.queue_offset, 1).messages
            assert [m.store_timestamp for m in got] == [r.store_timestamp]
            assert store.get_offset_in_queue_by_time(TOPIC, 0, r.store_timestamp, BoundaryType.LOWER) == \
                min(x.queue_offset for x in late if x.store_timestamp == r.store_timestamp)
        # past the tier's end a consumer is told the tier's end, never sent back to the local end
        tier_end = late[-1].queue_offset + 1
        for offset, status in ((tier_end, GetMessageStatus.OFFSET_OVERFLOW_ONE),
                               (tier_end + 5, GetMessageStatus.OFFSET_OVERFLOW_BADLY)):
            res = store.get_message("g", TOPIC, 0, offset, 1)
            assert (res.status, res.next_begin_offset, res.max_offset) == (status, tier_end, tier_end), offset
        result = store.query_message(TOPIC, "late1")
        assert isinstance(result.error, StateConflict) and result.error.context["key_index_gap"]
        assert "misses the keys of tiered messages of 1 queue(s) of topic" in result.error.message
    assert main(["get", "--config", str(toml), "--topic", TOPIC, "--key", "late1"]) == 5
    err = capsys.readouterr().err
    assert "STATE_CONFLICT" in err and "read-only open does not index them again" in err
    # a key the local copy finds is shown, with the same error as an object beside it (--json)
    assert main(["get", "--config", str(toml), "--topic", TOPIC, "--key", "early-0-1", "--json"]) == 5
    out = json.loads(capsys.readouterr().out)
    assert [m["queue_offset"] for m in out["messages"]] == [1]
    assert (out["error"]["code"], out["error"]["exit_code"], out["error"]["key_index_gap"]) == ("STATE_CONFLICT", 5, True)
    with TieredMessageStore.open(cfg) as store:  # the writable open indexes the missed keys
        assert [m.body for m in store.query_message(TOPIC, "late1").messages] == [b"late1"]
    assert main(["get", "--config", str(toml), "--topic", TOPIC, "--key", "late1"]) == 0
    assert "late1" in capsys.readouterr().out


def test_a_key_window_beginning_at_the_newest_tier_only_message_finds_it(tmp_path):
    """An operator drill: after a restored backup and a metadata rebuild, a key lookup whose
    window began exactly at the store time of the newest message only the tier holds found
    nothing (the tier was asked only for windows beginning before that time)."""
    cfg = config_at(tmp_path)
    late = restored_after(cfg, "early", lambda store: [
        store.put_message(Message(topic=TOPIC, body=b"late%d" % i, keys=[f"late{i}"]), 0) for i in range(3)])
    with TieredMessageStore.open(cfg.replace(metadata_recovery="rebuild")) as store:
        for i, r in enumerate(late):
            ts = r.store_timestamp
            for begin, end in ((ts - 1, ts), (ts, ts), (ts, None)):
                hits = store.query_message(TOPIC, f"late{i}", 10, begin, end).messages
                assert [(m.queue_offset, m.body) for m in hits] == [(r.queue_offset, b"late%d" % i)], (i, begin, end)


def test_the_min_offset_after_tiered_expiry_and_a_lost_disk_is_the_tiers(tmp_path, capsys):
    """An operator drill: after tiered expiry, a lost disk and `takeover --create`, the queue's
    min offset answered 0 (the new, empty local queue's) until the first put; a consumer reset
    to the earliest offset was then told 0 is too small."""
    hour = 3_600_000
    now = now_ms()
    clock = [now - 5 * hour]
    cfg = config_at(tmp_path, commit_log_max_size=2048, consume_queue_max_size=100, group_commit_count=4,
                    local_commit_log_file_size=4096, file_reserved_hours=1)
    with TieredMessageStore.open(cfg, clock=lambda: clock[0]) as store:
        for i in range(50):
            clock[0] = now - 5 * hour + i if i < 40 else now - 60_000 + i
            store.put_message(Message(topic=TOPIC, body=b"m%d" % i), 0)
        store.dispatch(force=True)
        store.delete_expired_local(now_ms=now)
        store.delete_expired_tiered(now_ms=now)
        tier_min = store.flat_files.get(TOPIC, 0).consume_queue_min_offset()
        assert tier_min > 0
    shutil.rmtree(cfg.store_path)
    toml = tmp_path / "t.toml"
    toml.write_text(cfg.to_toml())
    assert main(["takeover", "--config", str(toml), "--create"]) == 0
    capsys.readouterr()
    with TieredMessageStore.open(cfg, read_only=True) as store:
        assert store.get_min_offset_in_queue(TOPIC, 0) == tier_min
        got = store.get_message("g", TOPIC, 0, tier_min, 1)
        assert got.status is GetMessageStatus.FOUND and got.messages[0].body == b"m%d" % tier_min


def test_lost_metadata_rebuilt_then_lost_disk(tmp_path):
    """metadata_recovery = "rebuild" on a store whose whole store_path (metadata included) is gone."""
    cfg = config_at(tmp_path, metadata_recovery="rebuild")
    with TieredMessageStore.open(cfg) as store:
        sent = put(store, "a", 300)
        tier_only(store)
    shutil.rmtree(cfg.store_path)
    with TieredMessageStore.open(cfg, take_over=True) as store:
        after = put(store, "b", 2)
        assert sorted(after) == [(0, 150), (1, 150)]
        store.dispatch(force=True)
        assert_reads_back(store, {**sent, **after})


def test_dispatcher_refuses_a_local_queue_behind_the_tier(tmp_path):
    """A local store that knows nothing of the tier (no floor) must not copy its offset 0 over
    the tier's: the dispatcher stops that queue with OffsetConflict and writes nothing."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        put(store, "a", 20, queues=1)
        store.dispatch(force=True)
        driver, metadata = store.driver, store.metadata
        flat_files = FlatFileStore(driver, metadata, cfg.flat_config())
        assert flat_files.load()
        before = flat_files.get(TOPIC, 0).consume_queue_commit_offset()
        bare = LocalMessageStore(tmp_path / "bare", LocalStoreConfig(background_services=False))
        try:
            bare.put_message(TOPIC, 0, Message(topic=TOPIC, body=b"stray"))
            bare.reput()
            bare.flush()
            stats = MessageStoreDispatcher(bare, flat_files).dispatch(force=True)
            assert stats.messages == 0
            assert any("would reuse tiered offsets" in e for e in stats.errors), stats.errors
            with pytest.raises(OffsetConflict) as err:
                MessageStoreDispatcher(bare, flat_files)._dispatch_group(flat_files.get(TOPIC, 0), True,
                                                                         type(stats)())
            assert err.value.tiered_end == before and err.value.offset == 1
            assert flat_files.get(TOPIC, 0).consume_queue_commit_offset() == before
        finally:
            bare.close()


def test_put_dispatch_fails_unless_the_message_is_tiered(tmp_path):
    """`put --dispatch` decides by the put's own offset, not by comparing queue maxima."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        r = store.put_message(Message(topic=TOPIC, body=b"x"), 0)
        empty = type(store.dispatch(force=False))()  # a round that reported nothing
        failure = _dispatch_failure(store, empty, TOPIC, 0, r.queue_offset, {})
        assert failure is not None and "not tiered" in failure.message
        store.dispatch(force=True)
        assert store.is_tiered(TOPIC, 0, r.queue_offset)
        assert _dispatch_failure(store, empty, TOPIC, 0, r.queue_offset, {}) is None


def test_put_dispatch_failure_is_told_without_asking_the_backend(tmp_path, monkeypatch):
    """After a failed dispatch the backend may hang: the report that the message is stored
    reads nothing from it (it read each queue's first tiered message, waiting out every
    request's timeout and retries, and then failed with the backend's error instead)."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        put(store, "a", 40)
        store.dispatch(force=True)
        store.delete_expired_local(FAR_FUTURE_MS)  # reads of the first messages go to the tier
        r = store.put_message(Message(topic=TOPIC, body=b"last"), 0)
        empty = type(store.dispatch(force=False))()

        def backend_down(*args, **kwargs):
            raise AssertionError("the backend was asked")

        for flat in store.flat_files.files():
            for part in (flat.commit_log, flat.consume_queue):
                monkeypatch.setattr(part.driver, "read", backend_down)
                monkeypatch.setattr(part.driver, "size", backend_down)
        for flat in store.flat_files.files():
            flat.commit_log._first_queue_offset = -1  # as in a new process: not cached
        failure = _dispatch_failure(store, empty, TOPIC, 0, r.queue_offset, {})
        assert failure is not None and failure.context["stored"] is True
        assert failure.context["queues"] == [f"{TOPIC}/0"] and f"{TOPIC}/0@{r.queue_offset}" in failure.message


def _store_toml(tmp_path: Path, cfg) -> str:
    toml = tmp_path / "store.toml"
    toml.write_text(f'[tiered]\nstore_path = "{cfg.store_path}"\ndriver = "posix"\ncommit_log_max_size = "64KiB"\n'
                    f'consume_queue_max_size = "6000"\nlocal_commit_log_file_size = "64KiB"\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    return str(toml)


@pytest.mark.parametrize("log", ["COMMIT_LOG", "CONSUME_QUEUE"])
def test_foreign_bytes_past_the_committed_end_are_never_adopted(tmp_path, log):
    """Someone's bytes after the committed end of a queue's last segment (an object in the
    name of the segment's next part, on an object store): adopted at open, a foreign unit
    became the queue's next offset and the acknowledged message put there was never
    tiered. Now the queue refuses writes until `tiered repair --apply` sets them aside; then
    the message is tiered at its own offset."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        sent = put(store, "a", 60)
        store.dispatch(force=True)
        r = store.put_message(Message(topic=TOPIC, body=b"acked-not-tiered"), 0)
        sent[(0, r.queue_offset)] = b"acked-not-tiered"
    last = max((tmp_path / "tier").glob(f"*/broker-a/{TOPIC}/0/{log}/*"), key=lambda p: p.name[-20:])
    with open(last, "ab") as f:
        f.write(b"FOREIGN 20 bytes....")
    with TieredMessageStore.open(cfg) as store:
        assert "fail the read-back check" in store.unrecoverable[(TOPIC, 0)]
        with pytest.raises(StateConflict):
            store.put_message(Message(topic=TOPIC, body=b"x"), 0)
        store.dispatch(force=True)
        assert not store.is_tiered(TOPIC, 0, r.queue_offset)
        assert_reads_back(store, {k: v for k, v in sent.items() if k[0] == 1})
    assert main(["repair", "--config", _store_toml(tmp_path, cfg), "--apply"]) == 0
    with TieredMessageStore.open(cfg) as store:
        assert store.unrecoverable == {}
        store.dispatch(force=True)
        assert store.is_tiered(TOPIC, 0, r.queue_offset)
        store.delete_expired_local(FAR_FUTURE_MS)
        assert_reads_back(store, sent)


def test_a_rebuild_records_a_consume_queue_without_units_naming_no_message(tmp_path):
    """Lost metadata, and a foreign unit after the last consume-queue unit: the rebuild
    adopted it as the queue's next offset (reads there failed, the take-over stopped with
    ILLEGAL_OFFSET). It is recorded without it, as a tail the open does not adopt."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        sent = put(store, "a", 60)
        tier_only(store)
    last = max((tmp_path / "tier").glob(f"*/broker-a/{TOPIC}/0/CONSUME_QUEUE/*"), key=lambda p: p.name[-20:])
    with open(last, "ab") as f:
        f.write(b"FOREIGN 20 bytes....")
    shutil.rmtree(cfg.store_path)  # the lost disk: take-over rebuilds the metadata
    with TieredMessageStore.open(cfg, take_over=True) as store:
        assert store.get_max_offset_in_queue(TOPIC, 0) == 30
        assert (TOPIC, 0) in store.unrecoverable
        assert_reads_back(store, sent)
    assert main(["repair", "--config", _store_toml(tmp_path, cfg), "--apply"]) == 0
    with TieredMessageStore.open(cfg) as store:
        assert store.put_message(Message(topic=TOPIC, body=b"next"), 0).queue_offset == 30


def test_a_failed_commit_is_reported_with_the_backends_error(tmp_path, monkeypatch):
    """A commit the backend failed (a timeout: retryable) was counted as a failed commit with
    no error, and ``put --dispatch`` said "no error was reported": the report names it now."""
    from tiered_core.errors import DriverError

    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        put(store, "a", 4)
        store.dispatch(force=True)
        r = store.put_message(Message(topic=TOPIC, body=b"last"), 0)

        def timed_out(*args, **kwargs):
            raise DriverError("posix: write of 'x' timed out after 5 s", retryable=True)

        flat = store.flat_files.get(TOPIC, 0)
        monkeypatch.setattr(flat.commit_log.driver, "write", timed_out)
        stats = store.dispatch(force=True)
        assert stats.failed_commits >= 1
        assert any("commit failed" in e and "timed out after 5 s" in e for e in stats.errors), stats.errors
        failure = _dispatch_failure(store, stats, TOPIC, 0, r.queue_offset, {})
        assert failure is not None and "timed out after 5 s" in failure.message
        assert "no error was reported" not in failure.message
        monkeypatch.undo()
        again = store.dispatch(force=True)  # the next round uploads it, and says nothing of the old error
        assert again.errors == [] and store.get_message("t", TOPIC, 0, r.queue_offset, 1).messages[0].body == b"last"


def test_local_retention_keeps_messages_whose_tiered_copy_a_commit_found_lost(tmp_path):
    """A driver drill: the backend kept only part of each write and said it stored it all.
    The next commit found the object shorter than committed (STATE_CONFLICT), yet local
    retention deleted the local copies of those messages: their last copy. Now the commit
    records the damage, retention holds those messages, and every offset reads back."""
    cfg = config_at(tmp_path, local_commit_log_file_size=4096, group_commit_count=40)
    with TieredMessageStore.open(cfg) as store:
        sent = put(store, "a", 40, queues=1)
        store.local.reput()
        store.dispatch(force=True)
        flat = store.flat_files.get(TOPIC, 0)
        seg = flat.commit_log.segments[-1]
        real = Path(cfg.driver_options["root"]) / seg.path
        with open(real, "r+b") as fh:  # the backend "loses" the tail it acknowledged
            fh.truncate(200)
        sent.update(put(store, "b", 20, queues=1))
        store.local.reput()
        stats = store.dispatch(force=True)
        assert any("holds" in e for e in stats.errors), stats.errors
        store.delete_expired_local(FAR_FUTURE_MS)
        assert_reads_back(store, sent)  # the lost range from its local copies, the rest from the tier
        lost = flat.first_lost_queue_offset()
        assert lost is not None and 0 < lost < 40 and store.local.get_min_offset_in_queue(TOPIC, 0) <= lost


def test_floor_recorded_before_its_gap(tmp_path):
    """A crash after the floor file was written but before its gap units: the next open fills
    the gap, so the queue still continues at the floor."""
    d = tmp_path / "cq"
    d.mkdir()
    (d / FLOOR_FILE).write_text(json.dumps({"offset": 1234, "until_ms": 5}))
    cq = ConsumeQueue(str(d), TOPIC, 0, units_per_file=100)
    try:
        assert (cq.min_offset, cq.max_offset, cq.floor, cq.floor_until_ms) == (1234, 1234, 1234, 5)
        assert cq.put(1233, 0, 10, 0) is False  # below the floor: never stored
        assert cq.put(1234, 0, 10, 0) is True
    finally:
        cq.close()


def test_unreadable_floor_stops_the_open(tmp_path):
    d = tmp_path / "cq"
    d.mkdir()
    (d / FLOOR_FILE).write_text("garbage")
    with pytest.raises(StateConflict) as err:
        ConsumeQueue(str(d), TOPIC, 0)
    assert err.value.path == str(d / FLOOR_FILE)


def test_floor_is_never_lowered(tmp_path):
    cq = ConsumeQueue(str(tmp_path / "cq"), TOPIC, 0, units_per_file=100)
    try:
        assert cq.raise_floor(250, 7) is True
        assert cq.raise_floor(100) is False
        assert (cq.min_offset, cq.max_offset) == (250, 250)
        assert os.path.exists(tmp_path / "cq" / FLOOR_FILE)
    finally:
        cq.close()


def test_local_history_from_before_a_takeover_is_given_up(tmp_path):
    """A backup from before a failover diverges from the tier: the other store wrote the same
    offsets since. Its local copies are never served, and its queues continue past both."""
    a = config_at(tmp_path, "a")
    with TieredMessageStore.open(a) as store:
        sent = put(store, "a", 100)
        store.dispatch(force=True)           # 0..49 of each queue tiered
        put(store, "u", 100)                 # 50..99 only on a's disk
    backup = tmp_path / "backup"
    shutil.copytree(a.store_path, backup, copy_function=copy_sparse)
    b = config_at(tmp_path, "b")
    with TieredMessageStore.open(b, take_over=True) as store:  # a's disk is lost; b takes over
        sent.update(put(store, "b", 20))   # 50..59 of each queue, other messages than a's
        store.dispatch(force=True)
    assert all(o < 60 for _, o in sent)
    shutil.rmtree(a.store_path)
    shutil.copytree(backup, a.store_path, copy_function=copy_sparse)
    with TieredMessageStore.open(a, take_over=True) as store:  # a comes back from the backup
        assert store.given_up_history is not None and os.path.isdir(store.given_up_history)  # moved, not deleted
        res = store.get_message("g", TOPIC, 0, 60, 1)  # before any put: the queue ends at the tier's end
        assert (res.status, res.next_begin_offset, res.max_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 60, 60)
        after = put(store, "c", 2)
        # The tier's consume queue stays contiguous: a's given-up, never-tiered 60..99 were lost
        # at the failover, and the queue continues at the tier's end.
        assert sorted(after) == [(0, 60), (1, 60)], "a put reused an offset the tier holds"
        store.local.reput()
        assert_reads_back(store, {**sent, **after})   # 50..59 are b's messages, from the tier
        assert store.get_message("g", TOPIC, 0, 61, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        store.dispatch(force=True)
        assert store.is_tiered(TOPIC, 0, 60) and store.is_tiered(TOPIC, 1, 60)  # and it is tiered again


def test_lost_disk_key_lookups_are_repaired_and_an_interrupted_repair_resumes(tmp_path):
    """After a lost disk the keys of everything tiered since the last uploaded index file
    are indexed again from the tier; the coverage marks then say, per queue, what the index
    holds, so a repair cut short resumes exactly where it stopped."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        sent = put(store, "a", 300)
        tier_only(store)
    shutil.rmtree(cfg.store_path)
    new = config_at(tmp_path, "new")
    with TieredMessageStore.open(new, take_over=True) as store:
        assert store.key_repair is not None and store.key_repair.done.is_set()
        assert store.key_repair.indexed == len(sent)
        for qid, seq in ((0, 0), (1, 149), (0, 75)):
            hits = store.query_message(TOPIC, f"a-{qid}-{seq}").messages
            assert [(m.queue_id, m.body) for m in hits] == [(qid, body("a", qid, seq))]
        assert store.index.coverage.get(TOPIC, 1) == 150
    # A repair cut short after offset 100 of queue 1: the record says so, the next open does the rest.
    record = os.path.join(new.store_path, "tiered_index_file", COVERAGE_FILE)
    doc = json.load(open(record))
    doc["queues"] = [[t, q, 100 if q == 1 else o] for t, q, o in doc["queues"]]
    with open(record, "w") as f:
        json.dump(doc, f)
    with TieredMessageStore.open(new) as store:
        assert store.key_repair is not None and store.key_repair.ranges == {(TOPIC, 1): 100}
        assert store.key_repair.done.is_set() and store.key_repair.indexed == 50
        assert len(store.query_message(TOPIC, "a-1-120").messages) == 1  # indexed twice, found once
    with TieredMessageStore.open(new) as store:
        assert store.key_repair is None  # nothing left
