"""Local retention never deletes a message that is not tiered yet, and what it deletes
stays readable from the tiered store."""

from __future__ import annotations

from store_workload import (
    Workload,
    assert_exactly_once,
    assert_message_matches,
    read_queue,
    small_config,
    tiered_commit,
)
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore

FAR_FUTURE_MS = 1 << 50


def test_retention_keeps_every_untiered_message(tmp_path):
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered")},
                          local_commit_log_file_size=64 << 10)
    workload = Workload(topics=("orders",), queues=2)
    tiered_q, lagging_q = workload.queue_keys
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1500)
        store.dispatch(force=True)
        first_phase = {k: len(v) for k, v in workload.sent.items()}
        workload.put(store, 1500)
        store.local.reput()
        store.local.flush()
        store.dispatcher.dispatch_queue(*tiered_q, force=True)
        assert tiered_commit(store, *tiered_q) == len(workload.sent[tiered_q])
        assert tiered_commit(store, *lagging_q) == first_phase[lagging_q]

        assert store.delete_expired_local(FAR_FUTURE_MS) > 0  # the first phase's files go
        # ... but not one message of the lagging queue that only the local store has
        assert 0 < store.local.get_min_offset_in_queue(*lagging_q) <= tiered_commit(store, *lagging_q)
        # a second pass changes nothing while the queue lags
        before = store.local.get_min_offset_in_queue(*lagging_q)
        store.delete_expired_local(FAR_FUTURE_MS)
        assert store.local.get_min_offset_in_queue(*lagging_q) == before

        # everything is readable: below the local copy from the tiered store, the rest locally
        def tier_of(topic, qid, offset):
            return StoreTier.TIERED if offset < store.local.get_min_offset_in_queue(topic, qid) else StoreTier.LOCAL

        lagging_sent = workload.sent.pop(lagging_q)  # not fully tiered: checked by reads alone
        assert_exactly_once(store, workload, tier=tier_of)
        workload.sent[lagging_q] = lagging_sent
        got = read_queue(store, *lagging_q, len(lagging_sent))
        assert len(got) == len(lagging_sent)
        for offset, ((m, start, tier), sent) in enumerate(zip(got, lagging_sent)):
            assert_message_matches(m, *lagging_q, offset, sent)
            assert tier is tier_of(*lagging_q, start)
        store.dispatch(force=True)
        assert store.delete_expired_local(FAR_FUTURE_MS) > 0
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)
