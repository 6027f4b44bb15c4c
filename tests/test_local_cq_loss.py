"""A local consume queue lost or cut while the commit log still holds its messages (operator
drill r2): the open rebuilds the missing units from the commit log, so the queue continues
after its last acknowledged message and every offset keeps naming its message. Before, the
open trusted the checkpoint's reput offset, the tier's end became the queue's floor and the
next put was handed an offset an acknowledged local message already had."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time

import pytest

from store_workload import small_config
from tiered_core import Message
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.codec import CQ_UNIT_SIZE
from tiered_core.local import LocalMessageStore, LocalStoreConfig

SMALL = dict(
    commit_log_file_size=64 * 1024,
    consume_queue_units_per_file=20,
    index_hash_slots=64,
    index_max_items=200,
    max_message_size=32 * 1024,
    background_services=False,
)
TIERED, LOCAL_ONLY = 300, 40  # per queue: offsets 0..299 tiered (local copy expired), 300..339 local only


def _files(qdir: str) -> dict[str, tuple[int, int]]:
    return {n: (os.stat(os.path.join(qdir, n)).st_mtime_ns, os.path.getsize(os.path.join(qdir, n)))
            for n in sorted(os.listdir(qdir))}


def test_a_queue_whose_consume_queue_files_were_deleted_is_rebuilt_and_continues(tmp_path, caplog):
    config = LocalStoreConfig(**SMALL)
    with LocalMessageStore(str(tmp_path), config) as store:
        for i in range(90):
            store.put_message("orders", i % 3, Message(topic="orders", body=b"m%d|" % i, keys=[f"m{i}"]))
    qdir = os.path.join(tmp_path, "consumequeue", "orders", "0")
    for name in os.listdir(qdir):
        os.remove(os.path.join(qdir, name))
    others = {q: _files(os.path.join(tmp_path, "consumequeue", "orders", str(q))) for q in (1, 2)}
    time.sleep(0.01)  # (a rewrite of the other queues' files would change their mtime)

    with caplog.at_level(logging.WARNING), LocalMessageStore(str(tmp_path), config) as store:
        assert (store.get_min_offset_in_queue("orders", 0), store.get_max_offset_in_queue("orders", 0)) == (0, 30)
        assert [m.body for m in store.get_messages("orders", 0, 0, 30)] == [b"m%d|" % i for i in range(0, 90, 3)]
        assert [m.keys for m in store.query_message("orders", "m33")] == [["m33"]]
        assert store.put_message("orders", 0, Message(topic="orders", body=b"new")).queue_offset == 30
        assert store.put_message("orders", 1, Message(topic="orders", body=b"new")).queue_offset == 30
    assert any("orders/0" in r.getMessage() and "rebuilt units 0..29" in r.getMessage() for r in caplog.records)
    assert not any("orders/1" in r.getMessage() or "orders/2" in r.getMessage() for r in caplog.records)
    # the other queues were not replayed: their files are the ones they were (then the put of orders/1)
    assert _files(os.path.join(tmp_path, "consumequeue", "orders", "2")) == others[2]


def test_a_removed_consume_queue_directory_is_replayed_without_calling_its_messages_gone(tmp_path, caplog):
    """The whole ``consumequeue/`` removed (re-drill F7): the open's replay of the commit log
    restores every queue, and no WARNING says the log "holds none of its messages" first."""
    config = LocalStoreConfig(**SMALL)
    with LocalMessageStore(str(tmp_path), config) as store:
        for i in range(60):
            store.put_message("orders", i % 2, Message(topic="orders", body=b"m%d|" % i))
    shutil.rmtree(os.path.join(tmp_path, "consumequeue"))
    with caplog.at_level(logging.WARNING), LocalMessageStore(str(tmp_path), config) as store:
        for q in (0, 1):
            assert store.get_max_offset_in_queue("orders", q) == 30
            assert [m.body for m in store.get_messages("orders", q, 0, 30)] == [b"m%d|" % i for i in range(q, 60, 2)]
    assert not any("holds none of its messages" in r.getMessage() for r in caplog.records)


def _tiered_store_with_local_tail(tmp_path):
    """Two queues: offsets 0..299 tiered and expired locally, 300..339 only in the local commit log."""
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tier")}, local_commit_log_file_size=64 << 10)
    with TieredMessageStore.open(config) as store:
        for i in range(TIERED):
            for q in (0, 1):
                store.put_message(Message(topic="t1", body=b"t1/%d/%d|" % (q, i) * 20), queue_id=q)
        while store.dispatch(force=True).messages:
            pass
        assert store.delete_expired_local(now_ms=int(time.time() * 1000) + 10**9) > 0
        for i in range(TIERED, TIERED + LOCAL_ONLY):
            for q in (0, 1):
                assert store.put_message(Message(topic="t1", body=b"t1/%d/%d|L" % (q, i)), queue_id=q) \
                    .queue_offset == i
        assert store.local.get_commit_log_min_offset() > 0
    return config


@pytest.mark.parametrize("damage", ["file_deleted", "truncated_mid_file", "queue_dir_removed",
                                    "truncated_past_the_tier", "truncated_past_the_tier_queue_list_garbled"])
def test_a_lost_local_consume_queue_does_not_hand_out_acknowledged_offsets_again(tmp_path, caplog, damage):
    config = _tiered_store_with_local_tail(tmp_path)
    qdir = os.path.join(config.store_path, "consumequeue", "t1", "0")
    first = os.path.join(qdir, sorted(n for n in os.listdir(qdir) if n.isdigit())[0])
    if damage == "file_deleted":
        for name in os.listdir(qdir):
            os.remove(os.path.join(qdir, name))
    elif damage == "truncated_mid_file":
        for name in sorted(os.listdir(qdir)):
            if os.path.join(qdir, name) != first:
                os.remove(os.path.join(qdir, name))
        os.truncate(first, (int(os.path.basename(first)) // CQ_UNIT_SIZE + 5) * CQ_UNIT_SIZE)
    elif damage.startswith("truncated_past_the_tier"):  # (re-drill N4: cut above what the tier holds)
        last = os.path.join(qdir, sorted(n for n in os.listdir(qdir) if n.isdigit())[-1])
        os.truncate(last, (TIERED + 10) * CQ_UNIT_SIZE - int(os.path.basename(last)) + 7)
        if damage.endswith("garbled"):  # a queue list it cannot use: as no checkpoint (re-drill 2, F4)
            path = os.path.join(config.store_path, "checkpoint.json")
            with open(path) as fh:
                doc = json.load(fh)
            doc["queues"] = [[t, q] for t, q, _m in doc["queues"]]
            with open(path, "w") as fh:
                json.dump(doc, fh)
    else:
        shutil.rmtree(qdir)

    with caplog.at_level(logging.WARNING), TieredMessageStore.open(config) as store:
        assert store.local.get_max_offset_in_queue("t1", 0) == TIERED + LOCAL_ONLY
        for q in (0, 1):
            r = store.put_message(Message(topic="t1", body=b"NEW"), queue_id=q)
            assert r.queue_offset == TIERED + LOCAL_ONLY, q
        for offset in (0, TIERED - 1, TIERED, TIERED + LOCAL_ONLY - 1):
            got = store.get_message("g", "t1", 0, offset, 1).messages
            assert [m.queue_offset for m in got] == [offset]
            assert bytes(got[0].body).startswith(b"t1/0/%d|" % offset), offset
        store.local.reput()  # (a put is readable once the reput reached it)
        got = store.get_message("g", "t1", 0, TIERED + LOCAL_ONLY, 1).messages
        assert [bytes(m.body) for m in got] == [b"NEW"]
    rebuilt = [r.getMessage() for r in caplog.records if "rebuilt units" in r.getMessage()]
    if damage.endswith("garbled"):  # the whole commit log is validated and replayed instead
        assert any("unreadable" in r.getMessage() for r in caplog.records)
    else:
        assert len(rebuilt) == 1 and "t1/0" in rebuilt[0] and f"..{TIERED + LOCAL_ONLY - 1}" in rebuilt[0]
    assert not any("continues at" in r.getMessage() for r in caplog.records)  # no floor at the tier's end
