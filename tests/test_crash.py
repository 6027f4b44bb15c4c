"""Crash test (issue 4 item 6): SIGKILL a writer of a FlatMessageFile at random moments, then reopen.

A child process (tests/crash_child.py) appends and commits messages to one queue on the POSIX
driver with SQLite metadata, rolling small segments, and is killed with SIGKILL after a random
delay (sometimes while it is still starting and recovering). After every kill this test
reopens the queue and checks that

* every consume-queue unit points at an intact message (CRC verified) whose queue-offset field
  is the unit's queue offset, whose physical-offset field is the unit's commit-log offset, and
  whose body carries the same sequence number;
* queue offsets are contiguous from the minimum (0) to the commit offset, and units point at
  strictly increasing, non-overlapping commit-log ranges (no message readable twice);
* everything the child acknowledged as committed survived, and bytes verified after an earlier
  kill are unchanged;

then starts the next child, which resumes where recovery left off. ``TIERED_CRASH_RUNS`` sets
the number of runs (default 50), ``TIERED_CRASH_SEED`` the seed (printed on failure).
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_unit
from tiered_core.codec.message import Message, decode_message, encode_message
from tiered_core.flat import FlatFileConfig, FlatMessageFile
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.plugins import open_driver
from tiered_core.common import AppendResult
from tiered_core.spi.access import ConsumeQueueRequest

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_child.py")
TOPIC = "CrashTopic"
CONFIG = FlatFileConfig(commit_log_max_size=4096, consume_queue_max_size=16 * 20)  # as the child's
RUNS = int(os.environ.get("TIERED_CRASH_RUNS", "50"))


@dataclass
class Seen:
    """What earlier runs verified: it must survive every later crash unchanged."""

    consume_queue: bytes = b""
    commit_log: bytes = b""
    acknowledged: int = 0
    runs_with_progress: int = 0
    max_commit_log_segments: int = 0
    max_consume_queue_segments: int = 0
    kills_during_start: int = 0
    history: list[str] = field(default_factory=list)


def read_all(flat: FlatMessageFile, lo: int, hi: int) -> tuple[bytes, bytes]:
    """The committed consume-queue units [lo, hi) and the whole committed commit log."""
    cq = bytearray()
    q = lo
    while q < hi:
        chunk = flat.get_consume_queue(q, min(hi - q, 4096))
        assert chunk and len(chunk) % CQ_UNIT_SIZE == 0, f"consume-queue read at {q} gave {len(chunk)} bytes"
        cq += chunk
        q += len(chunk) // CQ_UNIT_SIZE
    cl = bytearray()
    end = flat.commit_log.commit_offset
    while len(cl) < end:
        chunk = flat.get_commit_log(len(cl), end - len(cl))
        assert chunk, f"commit-log read at {len(cl)} gave nothing"
        cl += chunk
    return bytes(cq), bytes(cl)


def verify(root: str, db: str, seen: Seen, run: str, rng: random.Random) -> None:
    driver = open_driver("posix", root=root, fsync=False)
    metadata = SqliteMetadataStore(db)
    flat = FlatMessageFile(driver, metadata, TOPIC, 0, CONFIG)
    try:
        lo, hi = flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()
        assert lo == 0, f"{run}: min queue offset {lo}, expected 0 (nothing expires here)"
        assert flat.consume_queue_max_offset() == hi, f"{run}: units buffered right after reopen"
        assert hi >= seen.acknowledged, (
            f"{run}: lost acknowledged messages: commit offset {hi} < acknowledged {seen.acknowledged}")
        cq, cl = read_all(flat, lo, hi)
        old_units = len(seen.consume_queue) // CQ_UNIT_SIZE
        assert cq[:len(seen.consume_queue)] == seen.consume_queue, f"{run}: verified units changed"
        assert cl[:len(seen.commit_log)] == seen.commit_log, f"{run}: verified commit-log bytes changed"
        prev_end = 0
        if old_units:
            last = decode_cq_unit(cq, (old_units - 1) * CQ_UNIT_SIZE)
            prev_end = last.commitlog_offset + last.size
        for q in range(old_units, hi):
            offset, size, _tags = decode_cq_unit(cq, q * CQ_UNIT_SIZE)
            where = f"{run}: unit {q} -> commit log [{offset}, {offset + size})"
            assert offset >= prev_end, f"{where} overlaps the previous message ending at {prev_end}"
            assert offset + size <= len(cl), f"{where} passes the committed commit log ({len(cl)} bytes)"
            msg = decode_message(cl, offset, verify_crc=True)
            assert msg.store_size == size, f"{where}: the message there is {msg.store_size} bytes"
            assert (msg.queue_offset, msg.commitlog_offset, msg.queue_id, msg.topic) == (q, offset, 0, TOPIC), where
            head = b"seq=%d;" % q
            assert msg.body.startswith(head), f"{where}: body starts {msg.body[:16]!r}"
            assert msg.body[len(head):] == bytes([q % 251]) * (len(msg.body) - len(head)), where
            prev_end = offset + size
        # The read path itself serves the same bytes (a sample, plus both ends).
        for q in {0, hi - 1, *(rng.randrange(hi) for _ in range(10))} if hi else ():
            offset, size, _ = decode_cq_unit(cq, q * CQ_UNIT_SIZE)
            assert flat.get_message(q) == cl[offset:offset + size], f"{run}: get_message({q}) differs"
        seen.consume_queue, seen.commit_log = cq, cl
        seen.max_commit_log_segments = max(seen.max_commit_log_segments, len(flat.commit_log.segments))
        seen.max_consume_queue_segments = max(seen.max_consume_queue_segments, len(flat.consume_queue.segments))
        seen.history.append(f"{run}: commit offset {hi}, commit log {len(cl)} bytes")
    finally:
        flat.shutdown()
        metadata.close()
        driver.close()


def run_child(root: str, db: str, seed: int, rng: random.Random, seen: Seen, run: str) -> None:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen([sys.executable, CHILD, root, db, str(seed)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        if rng.random() < 0.25:
            # Kill while it may still be importing or recovering.
            time.sleep(rng.uniform(0.0, 0.4))
            seen.kills_during_start += 1
        else:
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, f"{run}: the child did not start within 60 s"
            time.sleep(rng.uniform(0.0, 0.3))
        exited = proc.poll()
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    assert exited is None and proc.returncode == -signal.SIGKILL, (
        f"{run}: the child stopped by itself (exit {exited if exited is not None else proc.returncode}): "
        f"{err.decode(errors='replace')[-2000:]}")
    acks = [int(line.split()[1]) for line in out.decode().splitlines() if line.startswith("c ")]
    starts = [int(line.split()[1]) for line in out.decode().splitlines() if line.startswith("start ")]
    if starts:
        # It resumed exactly where the previous verification found the commit offset.
        assert starts[0] >= seen.acknowledged, f"{run}: resumed at {starts[0]} < acknowledged {seen.acknowledged}"
    if acks:
        assert acks == sorted(acks)
        if acks[-1] > seen.acknowledged:
            seen.runs_with_progress += 1
        seen.acknowledged = max(seen.acknowledged, acks[-1])


@pytest.mark.slow
def test_sigkill_at_random_moments_never_breaks_the_queue(tmp_path):
    base_seed = int(os.environ.get("TIERED_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(base_seed)
    root, db = str(tmp_path / "root"), str(tmp_path / "meta.db")
    seen = Seen()
    for i in range(RUNS):
        run = f"run {i} (TIERED_CRASH_SEED={base_seed})"
        run_child(root, db, rng.randrange(1 << 30), rng, seen, run)
        verify(root, db, seen, run, rng)
    # The test exercised what it claims: progress across kills, rolls of both files.
    total = len(seen.consume_queue) // CQ_UNIT_SIZE
    # (Loose bound: on a loaded machine a commit's fsyncs can outlast a short random delay.)
    assert seen.runs_with_progress >= max(1, RUNS // 10), (seen.runs_with_progress, seen.history[-5:])
    assert total > RUNS, seen.history[-5:]
    assert seen.max_commit_log_segments > 2 and seen.max_consume_queue_segments > 2


def test_a_consume_queue_roll_never_commits_units_ahead_of_their_messages(tmp_path):
    """Deterministic form of what the SIGKILL loop found: sealing a full consume-queue segment
    commits its buffered units, so the commit log must be committed before it. Abandoning the
    writer without commit() is the crash."""
    cfg = FlatFileConfig(consume_queue_max_size=2 * CQ_UNIT_SIZE)
    driver = open_driver("posix", root=str(tmp_path / "root"), fsync=False)
    metadata = SqliteMetadataStore(str(tmp_path / "meta.db"))
    flat = FlatMessageFile(driver, metadata, TOPIC, 0, cfg)
    flat.init_offset(0)
    for q in range(3):  # the third unit rolls the consume queue
        raw = encode_message(Message(topic=TOPIC, body=b"seq=%d;" % q), queue_id=0, queue_offset=q,
                             store_timestamp=1)
        offset = flat.commit_log.append_offset
        assert flat.append_commit_log(raw) is AppendResult.SUCCESS
        assert flat.append_consume_queue(ConsumeQueueRequest(q, offset, len(raw), 0, 1)) is AppendResult.SUCCESS
    again = FlatMessageFile(driver.reopen(), SqliteMetadataStore(str(tmp_path / "meta.db")), TOPIC, 0, cfg)
    assert again.consume_queue_commit_offset() == 2  # committed by the roll
    for q in range(2):
        assert decode_message(again.get_message(q)).body == b"seq=%d;" % q
