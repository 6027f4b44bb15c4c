"""LocalMessageStore restart recovery: torn tails, dangling consume-queue units, lost
consume queues, and processes killed (SIGKILL) in the middle of writing."""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import textwrap

import pytest

from tiered_core.codec import CQ_UNIT_SIZE, Message
from tiered_core.local import LocalMessageStore, LocalStoreConfig

SMALL = dict(
    commit_log_file_size=64 * 1024,
    consume_queue_units_per_file=20,
    index_hash_slots=64,
    index_max_items=200,
    max_message_size=32 * 1024,
    background_services=False,
)


def _store(path, **overrides) -> LocalMessageStore:
    return LocalMessageStore(str(path), LocalStoreConfig(**{**SMALL, **overrides}))


def _body(ident: str, size: int) -> bytes:
    return (ident.encode() + b"|") * (size // (len(ident) + 1) + 1)


def _put_many(store: LocalMessageStore, count: int, start: int = 0) -> list:
    out = []
    for i in range(start, start + count):
        ident = f"m{i}"
        r = store.put_message("orders", i % 3, Message(topic="orders", body=_body(ident, 500 + i * 13 % 3000)[:500 + i * 13 % 3000],
                                                       keys=[ident]))
        out.append((i % 3, r.queue_offset, ident, r.commitlog_offset))
    return out


def _check_queues(store: LocalMessageStore) -> dict[int, list]:
    """Every readable unit of every queue is a whole, valid message of that queue."""
    got = {}
    for topic, q in store.list_queues():
        lo, hi = store.get_min_offset_in_queue(topic, q), store.get_max_offset_in_queue(topic, q)
        msgs = store.get_messages(topic, q, lo, max_count=hi - lo + 1) if hi > lo else []
        assert [m.queue_offset for m in msgs] == list(range(lo, hi))
        for m in msgs:
            ident = m.keys[0]
            assert m.body == _body(ident, len(m.body))[: len(m.body)]
        got[q] = msgs
    return got


def _last_file(path) -> str:
    d = os.path.join(path, "commitlog")
    return os.path.join(d, sorted(os.listdir(d))[-1])


def test_torn_tail_is_cut_and_queues_index_follow(tmp_path):
    store = _store(tmp_path)
    sent = _put_many(store, 80)
    store.close()
    q, qoff, ident, phy = sent[-1]
    last = _last_file(tmp_path)
    start = int(os.path.basename(last))
    with open(last, "r+b") as f:
        f.truncate(phy - start + 50)  # the last message was only partly written
    store = _store(tmp_path)
    assert store.recovery.truncated_bytes == 50
    assert store.get_commit_log_max_offset() == phy
    assert store.get_max_offset_in_queue("orders", q) == qoff
    got = _check_queues(store)
    assert sum(len(v) for v in got.values()) == 79
    assert store.query_message("orders", ident) == []
    # the queue offset and the commit-log bytes are taken by the next message
    r = store.put_message("orders", q, Message(topic="orders", body=_body("new", 10)[:10], keys=["new"]))
    assert (r.queue_offset, r.commitlog_offset) == (qoff, phy)
    store.reput()
    assert [m.queue_offset for m in store.query_message("orders", "new")] == [qoff]
    assert store.query_message("orders", ident) == []
    store.close()


def test_garbage_after_the_last_message_is_removed(tmp_path):
    store = _store(tmp_path)
    sent = _put_many(store, 30)
    end = store.get_commit_log_max_offset()
    store.close()
    with open(_last_file(tmp_path), "ab") as f:
        f.write(os.urandom(1000))
    store = _store(tmp_path)
    assert store.get_commit_log_max_offset() == end
    got = _check_queues(store)
    assert sorted((q, m.queue_offset, m.keys[0]) for q, ms in got.items() for m in ms) == \
        sorted((q, o, i) for q, o, i, _ in sent)
    store.close()


def test_consume_queue_units_beyond_the_commit_log_are_cut(tmp_path):
    store = _store(tmp_path)
    _put_many(store, 30)
    end = store.get_commit_log_max_offset()
    store.close()
    qdir = os.path.join(tmp_path, "consumequeue", "orders", "0")
    last = os.path.join(qdir, sorted(os.listdir(qdir))[-1])
    with open(last, "ab") as f:
        f.write(struct.pack(">qiq", end + 100, 50, 0))  # a unit for bytes that never landed
        f.write(b"\x00" * 9)  # and a torn one
    store = _store(tmp_path)
    assert store.get_max_offset_in_queue("orders", 0) == 10
    assert os.path.getsize(last) % CQ_UNIT_SIZE == 0
    _check_queues(store)
    assert store.put_message("orders", 0, Message(topic="orders", body=b"m99|", keys=["m99"])).queue_offset == 10
    store.close()


@pytest.mark.parametrize("drop_checkpoint", [False, True])
def test_lost_consume_queues_are_rebuilt_from_the_commit_log(tmp_path, drop_checkpoint):
    store = _store(tmp_path)
    sent = _put_many(store, 70)
    store.put_message("refunds", 5, Message(topic="refunds", body=b"r1|", keys=["r1"]))
    store.close()
    shutil.rmtree(os.path.join(tmp_path, "consumequeue"))
    shutil.rmtree(os.path.join(tmp_path, "index"))
    if drop_checkpoint:
        os.unlink(os.path.join(tmp_path, "checkpoint.json"))
    store = _store(tmp_path)
    assert store.list_queues() == [("orders", 0), ("orders", 1), ("orders", 2), ("refunds", 5)]
    got = _check_queues(store)
    assert sorted((q, m.queue_offset, m.keys[0]) for q, ms in got.items() for m in ms if q < 3) == \
        sorted((q, o, i) for q, o, i, _ in sent)
    assert [m.keys for m in store.query_message("orders", "m33")] == [["m33"]]
    assert store.put_message("orders", 1, Message(topic="orders", body=b"x")).queue_offset == \
        sum(1 for s in sent if s[0] == 1)
    store.close()


_CHILD = textwrap.dedent("""
    import os, random, signal, sys
    from tiered_core.codec import Message
    from tiered_core.local import LocalMessageStore, LocalStoreConfig

    root, run, mode, tear_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if tear_at:
        # Fault injection: the tear_at-th message write lands partly, then the process dies.
        real_pwrite, writes = os.pwrite, [0]

        def pwrite(fd, data, pos):
            if len(data) >= 200:  # message records (units, index items and BLANK heads are smaller)
                writes[0] += 1
                if writes[0] == tear_at:
                    real_pwrite(fd, bytes(data)[: random.randrange(1, len(data))], pos)
                    os.kill(os.getpid(), signal.SIGKILL)
            return real_pwrite(fd, data, pos)

        os.pwrite = pwrite
    store = LocalMessageStore(root, LocalStoreConfig(
        commit_log_file_size=256 * 1024, consume_queue_units_per_file=32, index_hash_slots=64,
        index_max_items=128, max_message_size=120 * 1024, flush_interval_ms=2,
        flush_mode="SYNC" if mode == "SYNC" else "ASYNC"))
    i = 0
    while True:
        ident = f"{run}-{i}"
        size = (i * 7919) % (100 * 1024) + 200
        body = ((ident + "|").encode() * (size // (len(ident) + 1) + 1))[:size]
        r = store.put_message("orders", i % 3, Message(topic="orders", body=body, keys=[ident]))
        print(i % 3, r.queue_offset, ident, flush=True)
        i += 1
""")


@pytest.mark.parametrize("mode", ["ASYNC", "SYNC", "TORN"])
def test_killed_writer_recovers_every_acknowledged_message(tmp_path, mode):
    """SIGKILL a writing process at random points (TORN: it dies in the middle of
    writing a message); after each kill every acknowledged message is there, whole,
    at its queue offset, and the queues are contiguous."""
    rng = random.Random(mode)
    root = str(tmp_path / "store")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    acked: list[tuple[int, int, str]] = []
    for run in range(4):
        target = rng.randrange(30, 150)
        tear_at = target if mode == "TORN" else 0
        with subprocess.Popen([sys.executable, "-c", _CHILD, root, f"r{run}", mode, str(tear_at)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True) as child:
            seen = 0
            try:
                for line in child.stdout:
                    q, off, ident = line.split()
                    acked.append((int(q), int(off), ident))
                    seen += 1
                    if seen >= target and not tear_at:
                        break
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait()
            # lines the child printed before the kill are acknowledged too
            for line in child.stdout.read().splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[2].startswith(f"r{run}-"):
                    acked.append((int(parts[0]), int(parts[1]), parts[2]))
            errors = child.stderr.read()
        assert child.returncode == -signal.SIGKILL
        assert sum(1 for a in acked if a[2].startswith(f"r{run}-")) >= (target - 1 if tear_at else target), errors
        with LocalMessageStore(root, LocalStoreConfig(
                commit_log_file_size=256 * 1024, consume_queue_units_per_file=32, index_hash_slots=64,
                index_max_items=128, max_message_size=120 * 1024, background_services=False)) as store:
            if tear_at:
                assert store.recovery.truncated_bytes > 0  # the torn message was cut
            got = {}
            for topic, q in store.list_queues():
                hi = store.get_max_offset_in_queue(topic, q)
                msgs = store.get_messages(topic, q, 0, max_count=hi + 1)
                assert [m.queue_offset for m in msgs] == list(range(hi))  # contiguous, all valid
                for m in msgs:
                    assert m.body == ((m.keys[0] + "|").encode() * len(m.body))[: len(m.body)]
                got[q] = [m.keys[0] for m in msgs]
            for q, off, ident in acked:
                assert got[q][off] == ident, f"acknowledged {ident} at {q}/{off} lost after kill {run}"
            # besides, at most the one message per run whose ack the kill swallowed
            assert len(acked) <= sum(len(v) for v in got.values()) <= len(acked) + run + 1
            last = acked[-1][2]
            assert [m.keys[0] for m in store.query_message("orders", last)] == [last]


def test_power_loss_keeps_what_was_flushed_and_nothing_dangles(tmp_path):
    """A machine crash loses the commit-log bytes that were not fsynced, while consume
    queues and index (reput ahead of the flush) still reference them."""
    live = tmp_path / "live"
    store = _store(live)
    first = _put_many(store, 40)
    store.reput()
    store.flush()
    flushed = store.commit_point()
    later = _put_many(store, 25, start=40)
    store.reput()  # units and index items for bytes that are not durable
    assert store.commit_point() == flushed
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    store.close()
    # what the disk holds after the power cut: the commit log up to the flushed offset
    cl = crashed / "commitlog"
    for name in sorted(os.listdir(cl)):
        start = int(name)
        path = cl / name
        if start >= flushed:
            os.unlink(path)
        elif start + os.path.getsize(path) > flushed:
            with open(path, "r+b") as f:
                f.truncate(flushed - start)
    store = _store(crashed)
    assert store.get_commit_log_max_offset() == flushed
    got = _check_queues(store)
    assert sorted((q, m.queue_offset, m.keys[0]) for q, ms in got.items() for m in ms) == \
        sorted((q, o, i) for q, o, i, _ in first)
    for q, off, ident, _ in later:
        assert store.query_message("orders", ident) == []
    # queues go on from where the durable data ends; the new messages are found by key
    for q in range(3):
        n = sum(1 for s in first if s[0] == q)
        r = store.put_message("orders", q, Message(topic="orders", body=b"new|", keys=[f"new{q}"]))
        assert r.queue_offset == n
    store.reput()
    for q in range(3):
        assert [m.queue_offset for m in store.query_message("orders", f"new{q}")] == \
            [sum(1 for s in first if s[0] == q)]
    store.close()
