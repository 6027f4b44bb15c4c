"""Cold-read cost of the tiered read path, against a floor measured in the same run.

    python bench/read_path.py [--messages 40000] [--size 1024] [--queues 4] [--rounds 5] [--keep DIR]

* ``api``: every message once through ``TieredMessageStore.get_message(..., 32)`` returning
  ``MessageExt``s (storage level FORCE, read-ahead cache emptied first), µs per message;
  each message's ``body`` and ``topic`` are touched (what a consumer does).
* ``fetch``: every message once through ``MessageStoreFetcher.read_batch`` (one CQ read, one
  commit-log read, split + validate, no decode; ``read`` on trees without it), µs per message.
* ``floor``: ``driver.read`` of every tiered commit-log segment in 16 MiB reads, plus, per
  message, ``zlib.crc32`` of its body and a ``bytes`` slice of it: the least a validated
  read must do in a Python loop.

Prints the medians and the ratios ``floor / path`` (1.0 = at the floor).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import tempfile
import time
import zlib

from tiered_core import Message, StoreConfig
from tiered_core.access.results import GetMessageStatus
from tiered_core.access.tiered_store import TieredMessageStore

TOPIC = "bench"
MiB = 1 << 20
_HEAD = struct.Struct(">i")


def build(path: str, messages: int, size: int, queues: int) -> StoreConfig:
    config = StoreConfig(store_path=path, driver="posix", driver_options={"root": os.path.join(path, "tiered")},
                         metadata="sqlite", local_commit_log_file_size=256 * MiB,
                         read_ahead_cache_bytes=max(256 * MiB, 2 * messages * (size + 256)))
    if os.path.exists(os.path.join(path, ".built")):
        return config
    with TieredMessageStore.open(config) as store:
        for seq in range(messages):
            qid = seq % queues
            stamp = f"{qid}/{seq}|".encode()
            body = (stamp * (size // len(stamp) + 1))[:size]
            store.put_message(Message(topic=TOPIC, body=body, keys=[f"k-{seq}"], tags=f"t{seq % 8}"), qid)
        store.local.reput()
        store.local.flush()
        stats = store.dispatcher.dispatch(force=True)
        assert stats.messages == messages, stats
    open(os.path.join(path, ".built"), "w").close()
    return config


def segments(store: TieredMessageStore, queues: int) -> list[tuple[str, int]]:
    out = []
    for qid in range(queues):
        flat = store.flat_files.get(TOPIC, qid)
        cl = getattr(flat, "commit_log")
        out += [(seg.path, seg.commit_position) for seg in cl.segments]
    return out


def floor(store: TieredMessageStore, paths: list[tuple[str, int]]) -> tuple[float, int]:
    crc32, head = zlib.crc32, _HEAD.unpack_from
    n = 0
    start = time.perf_counter()
    for path, size in paths:
        pos = 0
        while pos < size:
            data = store.driver.read(path, pos, min(16 * MiB, size - pos))
            p, end = 0, len(data)
            while p + 88 <= end:
                total = head(data, p)[0]
                if p + total > end:
                    break
                blen = head(data, p + 84)[0]
                crc32(memoryview(data)[p + 88:p + 88 + blen])
                data[p:p + total]
                p += total
                n += 1
            pos += p
    return time.perf_counter() - start, n


def api(store: TieredMessageStore, counts: list[int]) -> tuple[float, int]:
    store.cache.clear()
    n = 0
    start = time.perf_counter()
    for qid, count in enumerate(counts):
        offset = 0
        while offset < count:
            got = store.get_message("g", TOPIC, qid, offset, 32)
            if got.status is not GetMessageStatus.FOUND:
                raise RuntimeError(f"{qid}@{offset}: {got.status.name}")
            for m in got.messages:
                m.body, m.topic
            n += len(got.messages)
            offset = got.next_begin_offset
    return time.perf_counter() - start, n


def fetch(store: TieredMessageStore, counts: list[int]) -> tuple[float, int]:
    fetcher = store.fetcher
    read = getattr(fetcher, "read_batch", None) or fetcher.read
    n = 0
    start = time.perf_counter()
    for qid, count in enumerate(counts):
        flat = store.flat_files.get(TOPIC, qid)
        offset = 0
        while offset < count:
            got = read(flat, offset, 4096)
            if not len(got):
                raise RuntimeError(f"{qid}@{offset}: nothing read")
            n += len(got)
            offset += len(got)
    return time.perf_counter() - start, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep", default=None, help="build the store here once and reuse it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    path = args.keep or tempfile.mkdtemp(prefix="tiered-bench-read-")
    counts = [len(range(q, args.messages, args.queues)) for q in range(args.queues)]
    try:
        config = build(path, args.messages, args.size, args.queues)
        figures: dict[str, list[float]] = {"floor": [], "api": [], "fetch": []}
        with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
            paths = segments(store, args.queues)
            for _ in range(args.rounds):
                for name, fn in (("floor", lambda: floor(store, paths)), ("api", lambda: api(store, counts)),
                                 ("fetch", lambda: fetch(store, counts))):
                    secs, n = fn()
                    assert n == args.messages, (name, n)
                    figures[name].append(secs * 1e6 / n)
        med = {k: statistics.median(v) for k, v in figures.items()}
        out = {"us_per_msg": {k: round(v, 3) for k, v in med.items()},
               "api_ratio_vs_floor": round(med["floor"] / med["api"], 3),
               "fetch_ratio_vs_floor": round(med["floor"] / med["fetch"], 3)}
        print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
