"""TieredMessageStore end to end on every driver: put, dispatch, delete the local copy,
read everything back (FORCE, then the default NOT_IN_DISK), key and time lookups.

gcs and azure run against fake-gcs-server and Azurite (under CI=true an emulator that
cannot start fails the test).
"""

from __future__ import annotations

import random

import pytest

from store_workload import (
    DRIVERS,
    Workload,
    assert_exactly_once,
    backend_options,
    small_config,
    tiered_commit,
)
from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.common import BoundaryType

FAR_FUTURE_MS = 1 << 50  # local retention with local_retention_hours=0 expires every full file


@pytest.fixture(params=DRIVERS)
def driver_setup(request, tmp_path):
    return request.param, backend_options(request, request.param, tmp_path)


def check_keys(store: TieredMessageStore, workload: Workload, offsets: dict[tuple[str, int], list[int]]) -> None:
    """A key lookup finds exactly the message that carries the key."""
    for (topic, qid), picks in offsets.items():
        sent = workload.sent[(topic, qid)]
        for offset in picks:
            found = store.query_message(topic, sent[offset].key, max_count=4).messages
            assert [(m.queue_id, m.queue_offset, m.body) for m in found] == [(qid, offset, sent[offset].body)], \
                (topic, qid, offset, sent[offset].key)
    assert store.query_message("orders", "no-such-key").messages == []


def check_times(store: TieredMessageStore, workload: Workload, times: dict[tuple[str, int], list[int]],
                boundaries: tuple[BoundaryType, ...] = (BoundaryType.LOWER, BoundaryType.UPPER)) -> None:
    """A time lookup answers what the recorded store times say (each one costs a bisection
    over the tiered consume queue, two driver reads a step: keep them few)."""
    for (topic, qid), stamps in times.items():
        for ts in stamps:
            for boundary in boundaries:
                assert store.get_offset_in_queue_by_time(topic, qid, ts, boundary) == \
                    workload.expected_offset_by_time(topic, qid, ts, boundary), (topic, qid, ts, boundary)


def test_put_dispatch_expire_locally_and_read_back(driver_setup, tmp_path):
    driver, options = driver_setup
    config = small_config(tmp_path, driver, options, local_commit_log_file_size=512 << 10)
    workload = Workload()

    with TieredMessageStore.open(config) as store:
        workload.put(store, 3000)
        # Before any dispatch everything is served locally (once the background reput has
        # indexed the puts: it runs on its own thread, as RocketMQ's ReputMessageService does).
        store.local.reput()
        first = store.get_message("g", "orders", 0, 0, 8)
        assert first.found and first.tier is StoreTier.LOCAL
        stats = store.dispatch(force=True)
        assert stats.errors == [] and stats.messages == workload.count
        assert all(tiered_commit(store, *k) == len(v) for k, v in workload.sent.items())
        assert store.delete_expired_local(FAR_FUTURE_MS) > 0
        local_min = {k: store.local.get_min_offset_in_queue(*k) for k in workload.sent}
        assert all(0 < local_min[k] < len(v) for k, v in workload.sent.items()), local_min
        # min offset spans both tiers; the max is the queue's end
        for (topic, qid), sent in workload.sent.items():
            assert store.get_min_offset_in_queue(topic, qid) == 0
            assert store.get_max_offset_in_queue(topic, qid) == len(sent)

    rng = random.Random(5)
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert store.flat_files.failures == []
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)
        check_keys(store, workload, {k: [0, rng.randrange(len(v)), len(v) - 1] for k, v in workload.sent.items()})
        sent = workload.sent[("orders", 1)]
        check_times(store, workload, {("orders", 1): [sent[0].store_timestamp - 1, sent[-1].store_timestamp + 1,
                                                      sent[rng.randrange(len(sent))].store_timestamp]})

    with TieredMessageStore.open(config) as store:  # the default NOT_IN_DISK, local copy partly gone
        assert store.policy.name == "NOT_IN_DISK"
        assert {k: store.local.get_min_offset_in_queue(*k) for k in workload.sent} == local_min

        def tier_of(topic: str, qid: int, offset: int) -> StoreTier:
            # below the local min only the tiered store has it; from there on the local disk serves
            return StoreTier.TIERED if offset < local_min[(topic, qid)] else StoreTier.LOCAL

        assert_exactly_once(store, workload, tier=tier_of)
        # keys below the local copy come from the tiered index, the others from the local one
        check_keys(store, workload, {k: [rng.randrange(lo), rng.randrange(lo, len(workload.sent[k]))]
                                     for k, lo in local_min.items()})
        # times before the local copy are answered by the tiered store, at its first message
        # too (messages of the same millisecond may be on both sides), later ones locally
        check_times(store, workload, {k: [workload.sent[k][lo].store_timestamp] for k, lo in local_min.items()},
                    (BoundaryType.LOWER,))
        sent, lo = workload.sent[("audit", 0)], local_min[("audit", 0)]
        check_times(store, workload, {("audit", 0): [sent[rng.randrange(lo)].store_timestamp,
                                                     sent[rng.randrange(lo, len(sent))].store_timestamp]})
        # a reader that starts below the local copy goes on into the local one seamlessly
        topic, qid = "audit", 2
        lo = local_min[(topic, qid)]
        got = store.get_message("g", topic, qid, lo - 1, 4)
        assert got.found and got.tier is StoreTier.TIERED and got.messages[0].queue_offset == lo - 1
        nxt = store.get_message("g", topic, qid, got.next_begin_offset, 4)
        assert nxt.found and nxt.messages[0].queue_offset == got.next_begin_offset


def test_empty_and_unknown_queues(driver_setup, tmp_path):
    driver, options = driver_setup
    config = small_config(tmp_path, driver, options, storage_level="FORCE")
    with TieredMessageStore.open(config) as store:
        assert store.get_message("g", "nothing", 0, 0, 4).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.dispatch(force=True).messages == 0
        assert store.query_message("nothing", "k").messages == []
