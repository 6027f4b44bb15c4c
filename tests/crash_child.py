"""Child process of tests/test_crash.py: append and commit messages to one FlatMessageFile until killed.

Usage: ``python crash_child.py ROOT METADATA_DB SEED``. Recovers the queue the way a dispatcher
would (the next queue offset is ``consume_queue_commit_offset()``), prints ``start Q`` once
recovered, then loops forever: a random batch of messages (commit log, then consume queue) and
one commit, after which it prints ``c Q`` (every offset below Q is acknowledged as durable).
Each message's body starts with ``seq=Q;`` (its sequence number is its queue offset). Exits 3
with a message on stderr if anything but the kill stops it.
"""

from __future__ import annotations

import os
import random
import sys
import time

from tiered_core.codec.message import Message, encode_message
from tiered_core.flat.settings import FlatFileConfig
from tiered_core.flat.message_file import FlatMessageFile
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.common import AppendResult
from tiered_core.spi.access import ConsumeQueueRequest
from tiered_driver_posix import PosixDriver

TOPIC = "CrashTopic"
QUEUE_ID = 0
#: Small segments, so that runs roll both files often (the consume queue every 16 units).
CONFIG = FlatFileConfig(commit_log_max_size=4096, consume_queue_max_size=16 * 20)


def emit(line: str) -> None:
    os.write(1, (line + "\n").encode())  # unbuffered: the parent reads what was acknowledged


def body_of(seq: int, rng: random.Random) -> bytes:
    return b"seq=%d;" % seq + bytes([seq % 251]) * rng.randint(0, 600)


def main(root: str, db: str, seed: int) -> int:
    rng = random.Random(seed)
    driver = PosixDriver(root=root, fsync=False)  # SIGKILL keeps the page cache: fsync adds nothing here
    metadata = SqliteMetadataStore(db)
    flat = FlatMessageFile(driver, metadata, TOPIC, QUEUE_ID, CONFIG)
    if not flat.initialized:
        flat.init_offset(0)
    queue_offset = flat.consume_queue_commit_offset()
    if flat.consume_queue_max_offset() != queue_offset:
        raise SystemExit(f"recovered with buffered units: max {flat.consume_queue_max_offset()} "
                         f"!= commit {queue_offset}")
    emit(f"start {queue_offset}")
    while True:
        for _ in range(rng.choice((1, 2, 5, 13, 40))):
            now = time.time_ns() // 1_000_000
            raw = encode_message(Message(topic=TOPIC, body=body_of(queue_offset, rng), tags="t",
                                         keys=[f"k{queue_offset}"]),
                                 queue_id=QUEUE_ID, queue_offset=queue_offset, store_timestamp=now)
            commitlog_offset = flat.commit_log.append_offset
            result = flat.append_commit_log(raw)
            if result is not AppendResult.SUCCESS:
                raise SystemExit(f"append_commit_log at queue offset {queue_offset}: {result}")
            result = flat.append_consume_queue(
                ConsumeQueueRequest(queue_offset, commitlog_offset, len(raw), 0, now))
            if result is not AppendResult.SUCCESS:
                raise SystemExit(f"append_consume_queue at queue offset {queue_offset}: {result}")
            queue_offset += 1
        for _attempt in range(100):
            if flat.commit():
                break
        else:
            raise SystemExit(f"commit failed 100 times at queue offset {queue_offset}")
        emit(f"c {queue_offset}")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            sys.exit(3)
        raise
