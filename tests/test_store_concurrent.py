"""A store with its background services running while a producer puts, local retention
deletes what is tiered, and consumers follow ``next_begin_offset`` from the first message:
every consumer sees every message once, in order, across the switch between tiers, and
is never told to skip (OFFSET_TOO_SMALL) or handed an error."""

from __future__ import annotations

import threading
import time

from store_workload import Workload, small_config
from tiered_core.access.results import GetMessageStatus as S
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore

WAITING = {S.OFFSET_OVERFLOW_ONE, S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE}


def test_consumers_follow_the_queues_while_dispatch_and_retention_run(tmp_path):
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered"), "fsync": False},
                          local_commit_log_file_size=32 << 10, group_commit_count=20,
                          group_commit_interval_ms=50)
    workload = Workload(topics=("orders",), queues=2, min_size=100, max_size=400)
    total = 3000
    done = threading.Event()
    errors: list[BaseException] = []
    consumed: dict[int, list] = {}
    statuses: dict[int, dict] = {}

    def guarded(fn):
        def run(*args):
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
                done.set()
        return run

    @guarded
    def produce():
        for _ in range(total // 50):
            workload.put(store, 50)
            time.sleep(0.005)

    @guarded
    def retain():
        while not done.is_set():
            store.delete_expired_local()
            time.sleep(0.01)

    @guarded
    def consume(qid: int):
        # start once the local copy lost its head, so the first reads must come from the tiered store
        deadline = time.monotonic() + 120
        while store.local.get_min_offset_in_queue("orders", qid) == 0:
            assert time.monotonic() < deadline, "local retention never deleted anything"
            time.sleep(0.01)
        seen, counts, offset = consumed.setdefault(qid, []), statuses.setdefault(qid, {}), 0
        while offset < total // 2:
            assert time.monotonic() < deadline, f"consumer {qid} stuck at {offset}: {counts}"
            got = store.get_message("c", "orders", qid, offset, 16)
            counts[(got.status, got.tier)] = counts.get((got.status, got.tier), 0) + 1
            if got.status is S.FOUND:
                assert got.next_begin_offset == offset + len(got.messages)
                seen.extend(got.messages)
                offset = got.next_begin_offset
            else:
                assert got.status in WAITING, (qid, offset, got.status, got.tier, got.next_begin_offset)
                time.sleep(0.005)

    with TieredMessageStore.open(config, background=True) as store:
        threads = [threading.Thread(target=produce), threading.Thread(target=retain),
                   *(threading.Thread(target=consume, args=(q,)) for q in range(2))]
        for t in threads[:1] + threads[2:]:
            t.start()
        threads[1].start()
        for t in threads[2:]:
            t.join()
        threads[0].join()
        done.set()
        threads[1].join()
    assert not errors, errors
    for qid in range(2):
        sent = workload.sent[("orders", qid)]
        assert [m.queue_offset for m in consumed[qid]] == list(range(len(sent)))
        assert [m.body for m in consumed[qid]] == [s.body for s in sent]
        # the first reads had to come from the tiered store (the local head was gone)
        assert (S.FOUND, StoreTier.TIERED) in statuses[qid], statuses[qid]
