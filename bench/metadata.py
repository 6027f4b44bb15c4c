"""Metadata stores: recovery time and the cost of one segment update, SQLite against JSON.

    python bench/metadata.py [--json] [--segments 100000] [--queues 10000]

A store is filled with ``--segments`` file segments spread over ``--queues`` queues
(10 queues per topic; half commit-log, half consume-queue segments), closed, then:

* ``open_recover_s``: open the store and iterate every topic, every queue and every
  segment (what a restart does before it rebuilds the flat files);
* ``update_ms``: mean wall time of one ``update_file_segment`` outside a transaction
  (durable when it returns), over ``--sqlite-updates`` / ``--json-updates`` updates
  of random segments.

Ratios printed: JSON over SQLite for both figures, and each store's update cost
against the limit measured in the same run and directory: ``fsync_ms`` (append 4 KiB
to a file and fdatasync it: the floor of any durable update, and what a WAL commit
does) for SQLite, and ``rewrite_ms`` (write
the JSON file's size to a temporary file, fsync, rename: the floor of rewriting the
whole file) for JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

from tiered_core.metadata import open_metadata_store
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore

QUEUES_PER_TOPIC = 10
STORES = {"sqlite": "tieredStoreMetadata.db", "json": "tieredStoreMetadata.json"}


def fill(store: TieredMetadataStore, segments: int, queues: int) -> list[tuple[int, str, int]]:
    """Write the data set in one transaction; returns every segment key."""
    per_queue = max(1, segments // queues)
    keys: list[tuple[int, str, int]] = []
    now = 1_713_719_372_709
    with store.transaction():
        for q in range(queues):
            topic = f"topic-{q // QUEUES_PER_TOPIC:05d}"
            queue_id = q % QUEUES_PER_TOPIC
            if queue_id == 0:
                store.add_topic(topic)
            store.add_queue(topic, queue_id, 0, broker_name="broker-a")
            path = f"broker-a/{topic}/{queue_id}"
            for i in range(per_queue):
                seg_type = i % 2  # COMMIT_LOG / CONSUME_QUEUE
                base = (i // 2) * 1_073_741_824 if seg_type == 0 else (i // 2) * 6_000_000
                store.update_file_segment(FileSegmentMetadata(
                    path, seg_type, base, size=1_000_000 + i, status=1 if i < per_queue - 2 else 0,
                    create_timestamp=now + i, begin_timestamp=now + i, end_timestamp=now + i + 1000,
                    seal_timestamp=now + i + 2000 if i < per_queue - 2 else 0))
                keys.append((seg_type, path, base))
                if len(keys) >= segments:
                    break
    return keys


def recover(name: str, path: str) -> tuple[float, int]:
    """Seconds to open the store and iterate all of it; and the segments seen."""
    start = time.perf_counter()
    store = open_metadata_store(name, path)
    count = 0
    for topic in store.iterate_topics():
        for _ in store.iterate_queues(topic.topic):
            pass
    for _ in store.iterate_file_segments():
        count += 1
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed, count


def update_cost(name: str, path: str, keys: list[tuple[int, str, int]], updates: int, rng: random.Random) -> float:
    """Mean seconds of one durable update_file_segment on a random existing segment."""
    store = open_metadata_store(name, path)
    try:
        picks = [store.get_file_segment(*rng.choice(keys)) for _ in range(updates)]
        times = []
        for m in picks:
            m.size += 1
            start = time.perf_counter()
            store.update_file_segment(m)
            times.append(time.perf_counter() - start)
        return statistics.fmean(times)
    finally:
        store.close()


def append_sync_floor(directory: str, rounds: int) -> float:
    """Mean seconds to append 4 KiB to an existing file and fdatasync it (what a WAL commit does)."""
    path = os.path.join(directory, "append.bin")
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    times = []
    try:
        os.write(fd, block)
        os.fsync(fd)
        for _ in range(rounds):
            start = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.remove(path)
    return statistics.fmean(times)


def rewrite_floor(directory: str, size: int, rounds: int) -> float:
    """Mean seconds to write ``size`` bytes to a temp file, fsync, rename it over another and fsync the dir."""
    payload = os.urandom(size)
    tmp, final = os.path.join(directory, "floor.tmp"), os.path.join(directory, "floor.bin")
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        times.append(time.perf_counter() - start)
    os.remove(final)
    return statistics.fmean(times)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--sqlite-updates", type=int, default=300)
    parser.add_argument("--json-updates", type=int, default=10)
    parser.add_argument("--dir", default=None,
                        help="work directory (default: a temporary one under the current directory, "
                             "so fsync reaches a real disk)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.segments < 1 or args.queues < 1:
        parser.error("--segments and --queues must be >= 1")

    workdir = tempfile.mkdtemp(prefix="bench-metadata-", dir=args.dir or os.getcwd())
    rng = random.Random(args.seed)
    result: dict[str, Any] = {"segments": args.segments, "queues": args.queues,
                              "topics": (args.queues + QUEUES_PER_TOPIC - 1) // QUEUES_PER_TOPIC}
    try:
        keys: list[tuple[int, str, int]] = []
        for name, filename in STORES.items():
            path = os.path.join(workdir, name, filename)
            store = open_metadata_store(name, path)
            fill_s, keys = timed(lambda: fill(store, args.segments, args.queues))
            store.close()
            recover_s, seen = recover(name, path)
            if seen != len(keys):
                raise SystemExit(f"{name}: recovered {seen} segments, wrote {len(keys)}")
            updates = args.sqlite_updates if name == "sqlite" else args.json_updates
            update_s = update_cost(name, path, keys, updates, rng)
            result[name] = {
                "fill_s": round(fill_s, 3),
                "open_recover_s": round(recover_s, 4),
                "update_ms": round(update_s * 1000, 3),
                "updates": updates,
                "file_bytes": os.path.getsize(path),
            }
        floor_dir = os.path.join(workdir, "floor")
        os.makedirs(floor_dir)
        fsync_s = append_sync_floor(floor_dir, 100)
        rewrite_s = rewrite_floor(floor_dir, result["json"]["file_bytes"], 5)
        sq, js = result["sqlite"], result["json"]
        result["limits"] = {"fsync_ms": round(fsync_s * 1000, 3), "rewrite_ms": round(rewrite_s * 1000, 3)}
        result["ratios"] = {
            "recovery_json_over_sqlite": round(js["open_recover_s"] / sq["open_recover_s"], 2),
            "update_json_over_sqlite": round(js["update_ms"] / sq["update_ms"], 1),
            "sqlite_update_over_fsync": round(sq["update_ms"] / (fsync_s * 1000), 2),
            "json_update_over_rewrite": round(js["update_ms"] / (rewrite_s * 1000), 2),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"metadata stores: {args.segments} segments over {args.queues} queues ({result['topics']} topics)")
    for name in STORES:
        r = result[name]
        print(f"  {name:6}  open+recover {r['open_recover_s']:8.3f} s   one update {r['update_ms']:9.3f} ms "
              f"(mean of {r['updates']})   file {r['file_bytes'] / 1e6:7.1f} MB   fill {r['fill_s']:.1f} s")
    lim, rat = result["limits"], result["ratios"]
    print(f"  limits  append+fdatasync 4 KiB {lim['fsync_ms']:.3f} ms   rewrite JSON-sized file {lim['rewrite_ms']:.3f} ms")
    print(f"  ratios  recovery json/sqlite {rat['recovery_json_over_sqlite']}   "
          f"update json/sqlite {rat['update_json_over_sqlite']}   "
          f"sqlite update/fsync {rat['sqlite_update_over_fsync']}   "
          f"json update/rewrite {rat['json_update_over_rewrite']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
