"""Read policies of TieredMessageStore, fallback to the local store, statuses at the bounds.

The tiered store is a real memory driver behind :class:`store_faults.FlakyDriver`, whose
counting layer counts driver reads (so "never reads the tiered store" is observed, not
assumed) and whose fault layer can fail them (a tiered miss).
"""

from __future__ import annotations

import pytest

import tiered_core.local.local_store as local_store_module
from store_faults import SPEC, flaky_of
from store_workload import Workload, assert_exactly_once, memory_options, read_queue, small_config, tiered_commit
from tiered_core.access.results import GetMessageStatus as S
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.common import BoundaryType
from tiered_core import Message

FAR_FUTURE_MS = 1 << 50
TOPIC = "orders"


def make_config(tmp_path, request, **overrides):
    options = {"inner": "memory", "inner_options": memory_options(request)}
    return small_config(tmp_path, SPEC, options, **{"local_commit_log_file_size": 128 << 10, **overrides})


@pytest.fixture
def tiered_and_expired(tmp_path, request):
    """A store whose messages are all tiered and whose local copy lost its older files.

    Returns ``(config, workload, local_min)``; the store is closed.
    """
    config = make_config(tmp_path, request)
    workload = Workload(topics=(TOPIC,), queues=2)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1200)
        assert store.dispatch(force=True).messages == workload.count
        assert store.delete_expired_local(FAR_FUTURE_MS) > 0
        local_min = {k: store.local.get_min_offset_in_queue(*k) for k in workload.sent}
    assert all(0 < lo < len(workload.sent[k]) for k, lo in local_min.items()), local_min
    return config, workload, local_min


def reopen(config, level: str) -> TieredMessageStore:
    """The store at ``level``, its driver's read count reset after recovery and after the
    queues' min offsets are known (the tiered min may read a commit log's head once)."""
    store = TieredMessageStore.open(config.replace(storage_level=level))
    for topic, qid in store.local.list_queues():
        store.get_min_offset_in_queue(topic, qid)
    flaky_of(store.driver).reset()
    return store


def test_disable_never_reads_the_tiered_store(tiered_and_expired):
    config, workload, local_min = tiered_and_expired
    with reopen(config, "DISABLE") as store:
        for (topic, qid), sent in workload.sent.items():
            lo = local_min[(topic, qid)]
            for offset in (0, lo - 1):
                got = store.get_message("g", topic, qid, offset, 8)
                assert (got.status, got.tier, got.next_begin_offset) == (S.OFFSET_TOO_SMALL, StoreTier.LOCAL, lo)
            got = store.get_message("g", topic, qid, lo, 8)
            assert got.found and got.tier is StoreTier.LOCAL and got.messages[0].queue_offset == lo
            assert got.messages[0].body == sent[lo].body
            # time and key lookups stay local too: the oldest local message, no tiered-only key
            assert store.get_offset_in_queue_by_time(topic, qid, sent[0].store_timestamp) == lo
            assert store.query_message(topic, sent[0].key).messages == []
            assert [m.queue_offset for m in store.query_message(topic, sent[lo].key).messages] == [lo]
        assert flaky_of(store.driver).calls["read"] == 0


def test_not_in_disk_reads_the_tiered_store_only_below_the_local_copy(tiered_and_expired):
    config, workload, local_min = tiered_and_expired
    with reopen(config, "NOT_IN_DISK") as store:
        for (topic, qid), sent in workload.sent.items():
            lo = local_min[(topic, qid)]
            for offset in (lo, len(sent) - 1):
                got = store.get_message("g", topic, qid, offset, 4)
                assert got.found and got.tier is StoreTier.LOCAL
        assert flaky_of(store.driver).calls["read"] == 0
        assert_exactly_once(store, workload, tier=lambda t, q, off: (
            StoreTier.TIERED if off < local_min[(t, q)] else StoreTier.LOCAL))
        assert flaky_of(store.driver).calls["read"] > 0
        # newer messages, not tiered yet, are served locally
        topic, qid = TOPIC, 0
        end = len(workload.sent[(topic, qid)])
        workload.put(store, 2)
        store.local.reput()
        got = store.get_message("g", topic, qid, end, 4)
        assert got.found and got.tier is StoreTier.LOCAL and got.messages[0].queue_offset == end


def test_not_in_disk_and_not_in_mem_read_locally_while_the_local_copy_is_complete(tmp_path, request):
    for level in ("NOT_IN_DISK", "NOT_IN_MEM"):
        config = make_config(tmp_path / level, request, storage_level=level)
        workload = Workload(topics=(TOPIC,), queues=1)
        with TieredMessageStore.open(config) as store:
            workload.put(store, 300)
            store.dispatch(force=True)
            store.get_min_offset_in_queue(TOPIC, 0)  # may read the tiered commit log's head once
            flaky_of(store.driver).reset()
            # everything is tiered, and everything is on the local disk (and in its recent window)
            got = read_queue(store, TOPIC, 0, 300)
            assert [m.body for m, _, _ in got] == [s.body for s in workload.sent[(TOPIC, 0)]]
            assert {tier for _, _, tier in got} == {StoreTier.LOCAL}
            assert flaky_of(store.driver).calls["read"] == 0


def test_force_reads_committed_offsets_from_the_tiered_store(tmp_path, request):
    config = make_config(tmp_path, request, storage_level="FORCE")
    workload = Workload(topics=(TOPIC,), queues=1)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1)
        store.local.reput()
        # the queue's tiered file exists but holds nothing yet: FORCE does not read locally
        got = store.get_message("g", TOPIC, 0, 0, 4)
        assert (got.status, got.tier) == (S.NO_MESSAGE_IN_QUEUE, StoreTier.TIERED)
        workload.put(store, 199)
        store.dispatch(force=True)
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)  # although the local copy is whole
        committed = tiered_commit(store, TOPIC, 0)
        workload.put(store, 10)
        store.local.reput()
        local_max = store.local.get_max_offset_in_queue(TOPIC, 0)
        assert local_max == committed + 10
        # beyond the tiered commit point: overflow at the tiered max, never the local max (RocketMQ #7363)
        got = store.get_message("g", TOPIC, 0, committed, 4)
        assert (got.status, got.tier) == (S.OFFSET_OVERFLOW_ONE, StoreTier.TIERED)
        assert got.next_begin_offset == got.max_offset == committed
        got = store.get_message("g", TOPIC, 0, committed + 5, 4)
        assert (got.status, got.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, committed)
        store.dispatch(force=True)
        got = store.get_message("g", TOPIC, 0, committed, 4)
        assert got.found and got.tier is StoreTier.TIERED and got.messages[0].queue_offset == committed


def test_a_tiered_miss_falls_back_to_the_local_store(tmp_path, request):
    config = make_config(tmp_path, request, storage_level="FORCE")
    workload = Workload(topics=(TOPIC,), queues=1)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1000)
        store.dispatch(force=True)
        assert store.delete_expired_local(FAR_FUTURE_MS) > 0
        lo = store.local.get_min_offset_in_queue(TOPIC, 0)
        sent = workload.sent[(TOPIC, 0)]
        # the backend fails reads: what the local disk still has is served from it
        flaky_of(store.driver).faults.unavailable.add("read")
        store.cache.clear()
        got = store.get_message("g", TOPIC, 0, lo + 3, 4)
        assert got.found and got.tier is StoreTier.LOCAL
        assert [m.body for m in got.messages] == [s.body for s in sent[lo + 3:lo + 7]]
        # ... what only the tiered store had is reported, not invented
        got = store.get_message("g", TOPIC, 0, 0, 4)
        assert (got.status, got.tier, got.messages) == (S.OFFSET_FOUND_NULL, StoreTier.TIERED, [])
        flaky_of(store.driver).faults.unavailable.clear()
        got = store.get_message("g", TOPIC, 0, 0, 4)
        assert got.found and [m.body for m in got.messages] == [s.body for s in sent[:4]]
        # the queue's tiered files are gone altogether: the local store serves it
        store.flat_files.destroy_file(TOPIC, 0)
        got = store.get_message("g", TOPIC, 0, lo, 4)
        assert got.found and got.tier is StoreTier.LOCAL and got.messages[0].body == sent[lo].body


def test_statuses_at_the_bounds(tmp_path, request):
    config = make_config(tmp_path, request, storage_level="FORCE", file_reserved_hours=1)
    workload = Workload(topics=(TOPIC,), queues=1)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1200)
        store.dispatch(force=True)
        end = len(workload.sent[(TOPIC, 0)])
        assert store.get_max_offset_in_queue(TOPIC, 0) == end
        # tiered expiry drops the sealed head segments; the local copy is whole
        store.delete_expired_tiered(FAR_FUTURE_MS)
        flat = store.flat_files.get(TOPIC, 0)
        tiered_min = flat.consume_queue_min_offset()
        assert 0 < tiered_min < end
        for level, tier in (("FORCE", StoreTier.TIERED), ("DISABLE", StoreTier.LOCAL)):
            store.policy = store.policy.parse(level)
            expect = {
                end: (S.OFFSET_OVERFLOW_ONE, end),
                end + 1: (S.OFFSET_OVERFLOW_BADLY, end),
                end + 1000: (S.OFFSET_OVERFLOW_BADLY, end),
            }
            if level == "FORCE":
                expect[tiered_min - 1] = (S.OFFSET_TOO_SMALL, tiered_min)
                expect[0] = (S.OFFSET_TOO_SMALL, tiered_min)
            for offset, (status, nxt) in expect.items():
                got = store.get_message("g", TOPIC, 0, offset, 4)
                assert (got.status, got.next_begin_offset, got.tier, got.messages) == (status, nxt, tier, []), \
                    (level, offset)
                assert got.max_offset == end
            got = store.get_message("g", TOPIC, 0, tiered_min, 4)
            assert got.found and got.tier is tier and got.messages[0].queue_offset == tiered_min
            # the reported min spans both tiers (the local copy starts at 0 here)
            assert got.min_offset == 0
            for topic, qid in (("no-such-topic", 0), (TOPIC, 7)):
                got = store.get_message("g", topic, qid, 0, 4)
                assert (got.status, got.tier, got.next_begin_offset) == (S.NO_MATCHED_LOGIC_QUEUE, tier, 0)


def one_millisecond(tmp_path, request, monkeypatch) -> tuple[int, object, Workload]:
    """(the time, the config, a one-queue workload) of a store whose every message is stored
    in the same millisecond (the local store's clock is frozen)."""
    frozen = 1_700_000_000_000
    monkeypatch.setattr(local_store_module, "now_ms", lambda: frozen)
    return frozen, make_config(tmp_path, request), Workload(topics=(TOPIC,), queues=1)


def test_time_lookup_at_the_local_boundary_within_one_millisecond(tmp_path, request, monkeypatch):
    """Messages stored in the same millisecond on both sides of the local copy's start:
    the lookup of that time must answer the first of them, which only the tiered store has."""
    frozen, config, workload = one_millisecond(tmp_path, request, monkeypatch)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1000)
        store.dispatch(force=True)
        assert store.delete_expired_local(FAR_FUTURE_MS) > 0
        assert store.local.get_min_offset_in_queue(TOPIC, 0) > 0
        assert store.local.get_earliest_message_time(TOPIC, 0) == frozen
        assert store.get_offset_in_queue_by_time(TOPIC, 0, frozen, BoundaryType.LOWER) == 0
        assert store.get_offset_in_queue_by_time(TOPIC, 0, frozen, BoundaryType.UPPER) == 999
        assert store.get_offset_in_queue_by_time(TOPIC, 0, frozen - 1, BoundaryType.LOWER) == 0
        assert store.get_offset_in_queue_by_time(TOPIC, 0, frozen + 1, BoundaryType.LOWER) == 1000


@pytest.mark.parametrize("race", ["inside the read", "before the read"])
def test_local_retention_racing_a_local_read_is_served_by_the_tiered_store(tmp_path, request, race):
    """NOT_IN_DISK routed a read to the local disk, then retention deleted its files before
    the read ran: the reader gets the messages from the tiered store -- not an exception,
    not OFFSET_TOO_SMALL (which would make a consumer skip messages the tiered store holds)."""
    config = make_config(tmp_path, request)
    workload = Workload(topics=(TOPIC,), queues=1)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1000)
        store.dispatch(force=True)
        assert store.local.get_min_offset_in_queue(TOPIC, 0) == 0
        deleted = []
        if race == "inside the read":  # the bounds were checked, the files go before the bytes are read
            target, name = store.local, "read_messages"
        else:  # routed to the local store, the files go before its bounds are read
            target, name = store, "_get_local"
        original = getattr(target, name)

        def racing(*args, **kwargs):
            setattr(target, name, original)  # once
            deleted.append(store.delete_expired_local(FAR_FUTURE_MS))
            return original(*args, **kwargs)

        setattr(target, name, racing)
        got = store.get_message("g", TOPIC, 0, 0, 4)
        assert deleted and deleted[0] > 0 and store.local.get_min_offset_in_queue(TOPIC, 0) > 4
        assert (got.status, got.tier) == (S.FOUND, StoreTier.TIERED)
        assert [m.body for m in got.messages] == [s.body for s in workload.sent[(TOPIC, 0)][:4]]
        assert got.next_begin_offset == 4


def test_not_in_mem_reads_the_tiered_store_outside_the_recent_local_window(tmp_path, request, monkeypatch):
    import tiered_core.access.tiered_store as store_module

    window = 64 << 10
    monkeypatch.setattr(store_module, "IN_MEMORY_WINDOW", window)
    config = make_config(tmp_path, request, storage_level="NOT_IN_MEM", local_commit_log_file_size=1 << 20)
    workload = Workload(topics=(TOPIC,), queues=1)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 600)
        store.dispatch(force=True)
        assert store.local.get_min_offset_in_queue(TOPIC, 0) == 0  # the local copy is whole
        local_end = store.local.get_commit_log_max_offset()
        sent = workload.sent[(TOPIC, 0)]
        expected = [StoreTier.TIERED if s.commitlog_offset < local_end - window else StoreTier.LOCAL for s in sent]
        assert StoreTier.TIERED in expected and StoreTier.LOCAL in expected
        got = read_queue(store, TOPIC, 0, len(sent), batch=1)
        assert [tier for _, _, tier in got] == expected
        assert [m.body for m, _, _ in got] == [s.body for s in sent]
        store.policy = store.policy.parse("NOT_IN_DISK")  # the window plays no part there
        assert {tier for _, _, tier in read_queue(store, TOPIC, 0, len(sent))} == {StoreTier.LOCAL}


def test_a_tags_filter_gives_the_same_messages_from_either_tier(tmp_path, request):
    from tiered_core.codec.hashing import tags_hash_code

    config = make_config(tmp_path, request, local_commit_log_file_size=1 << 20)
    workload = Workload(topics=(TOPIC,), queues=1)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 800)
        store.dispatch(force=True)
        sent = workload.sent[(TOPIC, 0)]
        wanted = tags_hash_code("tag2")
        expected = [s.queue_offset for s in sent if s.tags == "tag2"]
        assert 0 < len(expected) < len(sent)
        for level, tier in (("FORCE", StoreTier.TIERED), ("DISABLE", StoreTier.LOCAL)):
            store.policy = store.policy.parse(level)
            store.cache.clear()
            offset, seen = 0, []
            while offset < len(sent):
                got = store.get_message("g", TOPIC, 0, offset, 7, message_filter=lambda code: code == wanted)
                assert got.tier is tier and got.status in (S.FOUND, S.NO_MATCHED_MESSAGE), (level, offset, got.status)
                assert got.next_begin_offset > offset, (level, offset)  # a filtered read always moves on
                seen += [m.queue_offset for m in got.messages]
                assert all(m.tags == "tag2" for m in got.messages)
                offset = got.next_begin_offset
            assert seen == expected, level


def test_upper_time_lookup_counts_the_local_messages_past_the_tiers_end(tmp_path, request, monkeypatch):
    """An operator drill: 1000 messages in one millisecond, 600 of them tiered. UPPER of that
    time answered 599, the last the tier holds, although the local copy serves 600..999."""
    frozen, config, workload = one_millisecond(tmp_path, request, monkeypatch)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 600)
        store.dispatch(force=True)
        tiered = tiered_commit(store, TOPIC, 0)
        workload.put(store, 400)
        store.local.reput()  # (the background reput may be behind: every put in the queue)
        end = len(workload.sent[(TOPIC, 0)])
        assert store.local.get_max_offset_in_queue(TOPIC, 0) == end
        assert 0 < tiered < end and tiered_commit(store, TOPIC, 0) == tiered
        assert store.get_offset_in_queue_by_time(TOPIC, 0, frozen, BoundaryType.LOWER) == 0
        assert store.get_offset_in_queue_by_time(TOPIC, 0, frozen, BoundaryType.UPPER) == end - 1
        assert store.get_offset_in_queue_by_time(TOPIC, 0, frozen + 1, BoundaryType.UPPER) == end


def test_a_time_lookup_after_tiered_expiry_finds_what_only_the_local_copy_still_holds(tmp_path, request):
    """An operator drill: the tier expired its oldest segments while the local copy still held
    offsets 37..39 (served by reads). A lookup of any time before them answered the tier's first
    offset, 40: a consumer seeking by time skipped three retained messages."""
    hour = 3_600_000
    now = 1_700_000_000_000
    clock = [now - 5 * hour]
    config = make_config(tmp_path, request, commit_log_max_size=2048, consume_queue_max_size=100,
                         group_commit_count=4, local_commit_log_file_size=4096, file_reserved_hours=1)
    with TieredMessageStore.open(config, clock=lambda: clock[0]) as store:
        times = {}
        for i in range(45):
            clock[0] = now - 5 * hour + i if i < 40 else now - 10 + i
            r = store.put_message(Message(topic=TOPIC, body=b"old%d" % i, keys=[f"k{i}"]), 0)
            times[r.queue_offset] = r.store_timestamp
        store.local.reput()
        store.dispatch(force=True)
        clock[0] = now
        store.delete_expired_local(now_ms=now)
        store.delete_expired_tiered(now_ms=now)
        local_min = store.local.get_min_offset_in_queue(TOPIC, 0)
        tier_min = store.flat_files.get(TOPIC, 0).consume_queue_min_offset()
        assert local_min < tier_min, (local_min, tier_min)  # the situation of the drill
        assert store.get_min_offset_in_queue(TOPIC, 0) == local_min
        assert store.get_message("g", TOPIC, 0, local_min, 1).messages[0].body == b"old%d" % local_min
        for t in (0, times[local_min] - 1, times[local_min]):
            assert store.get_offset_in_queue_by_time(TOPIC, 0, t, BoundaryType.LOWER) == local_min, t
        assert store.get_offset_in_queue_by_time(TOPIC, 0, times[local_min] + 1, BoundaryType.LOWER) == local_min + 1
        assert store.get_offset_in_queue_by_time(TOPIC, 0, times[44], BoundaryType.UPPER) == 44


@pytest.mark.parametrize("bad", ["2024-01-01T00:00:00Z", None, 1.5, True, float("nan")])
def test_a_time_that_is_not_epoch_milliseconds_is_refused_naming_it(tmp_path, request, bad):
    from tiered_core.errors import IllegalParam

    with TieredMessageStore.open(make_config(tmp_path, request)) as store:
        with pytest.raises(IllegalParam, match="timestamp must be epoch milliseconds"):
            store.get_offset_in_queue_by_time(TOPIC, 0, bad)
        with pytest.raises(IllegalParam, match="queue id must be an int >= 0, got -1"):
            store.get_offset_in_queue_by_time(TOPIC, -1, 0)
        with pytest.raises(IllegalParam, match="max_count must be an int > 0, got '5'"):
            store.query_message(TOPIC, "k", max_count="5")
        with pytest.raises(IllegalParam, match="holds a space"):
            store.query_message(TOPIC, "a b")
