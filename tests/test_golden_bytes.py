"""Golden bytes: the same input gives the same tiered bytes, byte for byte, as the code of
the day the manifest was made (issue 11: "tiered bytes identical to today's").

A deterministic workload (3000 messages; 2 topics, 3 queues; fixed bodies of 0-1500
bytes, keys (some non-ASCII), ``UNIQ_KEY``s, other properties, tags, flags, born times
and hosts, IPv4 and IPv6) is put into a store on the posix driver, with the store's clock
pinned (store times and the index file's name are then fixed too) and one queue
dispatched at a time (index items then go in in a fixed order), and dispatched until
everything is tiered, the key index compacted and uploaded. Then every object under the
tiered root is hashed (sorted relative path -> sha256 and size) and compared with the
checked-in manifest ``tests/data/golden/tiered_bytes.json``. The first differing file is
named in the failure.

Covered: every tiered commit-log segment, consume-queue segment and uploaded index file
(small segment sizes make the commit log and consume queue roll, so several segments and
their file names are checked). Excluded, explicitly: the ownership record (``OWNER_DIR``),
which holds a random store id, the local store path and the wall-clock claim time -- it is
not message data and is different for every store by design.

Regenerate (only when a byte change is intended and reviewed)::

    .venv/bin/python tests/test_golden_bytes.py --regenerate
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__":  # run as a script: make ``tiered_core`` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tiered_core import Message, StoreConfig  # noqa: E402
from tiered_core.access.tiered_store import TieredMessageStore  # noqa: E402
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE  # noqa: E402
from tiered_core.codec.message import PROPERTY_UNIQ_KEY  # noqa: E402
from tiered_core.flat.ownership import OWNER_DIR  # noqa: E402

MANIFEST = Path(__file__).resolve().parent / "data" / "golden" / "tiered_bytes.json"

#: The workload: topic -> queue ids; messages go round-robin over every (topic, queue).
QUEUES: tuple[tuple[str, int], ...] = (("golden-orders", 0), ("golden-orders", 1), ("golden_audit", 3))
MESSAGES = 3000
SEED = 11
CLUSTER = "GoldenCluster"
BROKER = "golden-broker"
#: Store times: ``BASE_MS + 7 * seq`` (2024-01-01T00:00:00Z onward); born times 3 ms earlier.
BASE_MS = 1_704_067_200_000
BORN_HOST = ("10.1.2.3", 50123)
BORN_HOST_V6 = ("2001:db8::7", 40000)  # sets the born-host-v6 sys flag: a longer header


class PinnedClock:
    """A clock (ms since the epoch) that returns whatever the test set last: store times
    and index file names then depend on the workload only, not on when or how often the
    store asks."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def golden_messages() -> list[tuple[Message, int, int]]:
    """The workload as ``(message, queue_id, store time)``, the same on every call."""
    rng = random.Random(SEED)
    out: list[tuple[Message, int, int]] = []
    seqs: dict[tuple[str, int], int] = {}
    for seq in range(MESSAGES):
        topic, qid = QUEUES[seq % len(QUEUES)]
        n = seqs.get((topic, qid), 0)
        seqs[(topic, qid)] = n + 1
        size = rng.choice((0, 1, 17, 100, 300, 700, 1500)) if seq % 10 == 0 else rng.randint(20, 900)
        body = rng.randbytes(size) if seq % 3 == 0 else (f"{topic}/{qid}/{n}|".encode() * 200)[:size]
        keys = [] if seq % 7 == 0 else [f"order-{n}"] + ([f"cust-{n % 50}"] if seq % 2 else [])
        if seq % 17 == 0:  # non-ASCII keys: the index hashes UTF-16 (a surrogate pair in one)
            keys.append(f"ключ-{n}-\U0001F511")
        props = {PROPERTY_UNIQ_KEY: f"{0x0A010203:08X}{0x1F90:04X}{0xC0FFEE:08X}{seq:012X}"}
        if seq % 5 == 0:
            props["region"] = ("eu", "us", "ap")[seq % 3]
            props["trace-id"] = f"t{rng.getrandbits(40):x}"
            props["note"] = "größe ✓"
        store_ms = BASE_MS + 7 * seq
        msg = Message(topic=topic, body=body, keys=keys, tags=None if seq % 11 == 0 else f"tag{seq % 4}",
                      properties=props, flag=seq % 3, born_timestamp=store_ms - 3,
                      born_host=BORN_HOST_V6 if seq % 13 == 0 else BORN_HOST,
                      reconsume_times=seq % 2)
        out.append((msg, qid, store_ms))
    return out


def build_tiered(workdir: Path) -> Path:
    """Put the golden workload into a store on the posix driver under ``workdir``, dispatch
    everything (index compacted and uploaded) and close it; returns the tiered root."""
    root = workdir / "tiered"
    config = StoreConfig(
        store_path=str(workdir / "store"), driver="posix", driver_options={"root": str(root)},
        metadata="sqlite", cluster=CLUSTER, broker=BROKER,
        local_commit_log_file_size=1 << 20,
        commit_log_max_size=128 << 10,  # several commit-log segments per queue
        consume_queue_max_size=CQ_UNIT_SIZE * 300,  # several consume-queue segments per queue
        read_ahead_cache_bytes=0,
        # One queue copied at a time: with parallel queues, the order in which their groups'
        # keys reach the index (item positions, hash-chain links) is a thread race.
        max_pending_limit=1,
    )
    messages = golden_messages()
    clock = PinnedClock(BASE_MS)
    with TieredMessageStore.open(config, clock=clock) as store:
        for msg, qid, store_ms in messages:
            clock.now = store_ms
            res = store.put_message(msg, qid)
            if not res.ok:
                raise AssertionError(f"put {msg.topic}/{qid} failed: {res}")
        expected = {}
        for msg, qid, _ in messages:
            expected[(msg.topic, qid)] = expected.get((msg.topic, qid), 0) + 1
        for _ in range(200):
            store.dispatch(force=True)
            tiered = {k: store.flat_files.get(*k).consume_queue_commit_offset()
                      for k in expected if store.flat_files.get(*k) is not None}
            if tiered == expected:
                break
        else:
            raise AssertionError(f"not everything tiered: {tiered} != {expected}")
        store.index.roll_file()
        store.index.compact_and_upload()
    return root


def manifest_of(root: Path) -> dict[str, dict[str, object]]:
    """``relative path -> {"sha256", "size"}`` of every file under ``root`` (sorted), but the
    ownership record (random store id, wall-clock claim time: not message data)."""
    out: dict[str, dict[str, object]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if OWNER_DIR in path.relative_to(root).parts:
            continue  # the ownership record: random store id, local path, claim time
        data = path.read_bytes()
        out[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return out


def kind_of(rel: str) -> str:
    """``COMMIT_LOG``, ``CONSUME_QUEUE``, ``INDEX`` or ``OTHER`` for a tiered relative path."""
    parts = rel.split("/")
    if "COMMIT_LOG" in parts:
        return "COMMIT_LOG"
    if "CONSUME_QUEUE" in parts:
        return "CONSUME_QUEUE"
    if "rmq_sys_INDEX" in parts:
        return "INDEX"
    return "OTHER"


def first_difference(expected: dict[str, dict[str, object]], actual: dict[str, dict[str, object]]) -> str | None:
    """A sentence naming the first (sorted) file that is missing, extra or different; None when equal."""
    for rel in sorted(set(expected) | set(actual)):
        if rel not in actual:
            return f"{rel} is in the golden manifest but was not written"
        if rel not in expected:
            return f"{rel} was written but is not in the golden manifest"
        if expected[rel] != actual[rel]:
            return (f"{rel} differs: golden {expected[rel]['size']} bytes sha256 {expected[rel]['sha256']}, "
                    f"now {actual[rel]['size']} bytes sha256 {actual[rel]['sha256']}")
    return None


def test_tiered_bytes_match_the_golden_manifest(tmp_path: Path) -> None:
    golden = json.loads(MANIFEST.read_text())
    actual = manifest_of(build_tiered(tmp_path))
    kinds = {}
    for rel in actual:
        kinds[kind_of(rel)] = kinds.get(kind_of(rel), 0) + 1
    # the check covers every tiered format, several segments of each queue's files
    assert kinds.get("COMMIT_LOG", 0) >= 2 * len(QUEUES) and kinds.get("CONSUME_QUEUE", 0) >= 2 * len(QUEUES), kinds
    assert kinds.get("INDEX", 0) >= 1 and kinds.get("OTHER", 0) == 0, kinds
    assert golden["messages"] == MESSAGES
    diff = first_difference(golden["files"], actual)
    assert diff is None, f"tiered bytes changed for the same input: {diff} (regenerate only if intended: " \
                         f"python tests/test_golden_bytes.py --regenerate)"


def main(argv: list[str] | None = None) -> int:
    """``--regenerate`` rewrites the manifest from this checkout's code; ``--check`` compares."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--regenerate", action="store_true", help="write tests/data/golden/tiered_bytes.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tiered-golden-") as tmp:
        actual = manifest_of(build_tiered(Path(tmp)))
    if args.regenerate:
        MANIFEST.parent.mkdir(parents=True, exist_ok=True)
        MANIFEST.write_text(json.dumps({"messages": MESSAGES, "files": actual}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {MANIFEST} ({len(actual)} files)")
        return 0
    diff = first_difference(json.loads(MANIFEST.read_text())["files"], actual)
    print(diff or f"identical ({len(actual)} files)")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
