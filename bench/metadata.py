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
against the limit measured in the same run, directory and moment (one floor
operation right after each update, so a noisy neighbour slows both alike):

* SQLite: append 4 KiB to a file and fdatasync it (a WAL commit; the floor of any
  durable update);
* JSON: write the JSON file's size to a temp file, fsync, rename it over another,
  fsync the directory (the floor of rewriting the whole file atomically).
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


def update_cost(name: str, path: str, keys: list[tuple[int, str, int]], updates: int, rng: random.Random,
                floor: Callable[[], float]) -> tuple[list[float], list[float]]:
    """Seconds of each durable update_file_segment on a random existing segment, and of the
    floor operation run right after each one (interleaved, so a noisy neighbour hits both)."""
    store = open_metadata_store(name, path)
    try:
        picks = [store.get_file_segment(*rng.choice(keys)) for _ in range(updates)]
        times, floors = [], []
        for m in picks:
            m.size += 1
            start = time.perf_counter()
            store.update_file_segment(m)
            times.append(time.perf_counter() - start)
            floors.append(floor())
        return times, floors
    finally:
        store.close()


class AppendSync:
    """The floor of one durable small update: append 4 KiB to a file and fdatasync it (a WAL commit)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "floor-append.bin")
        self.block = os.urandom(4096)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self) -> float:
        start = time.perf_counter()
        os.write(self.fd, self.block)
        os.fdatasync(self.fd)
        return time.perf_counter() - start

    def close(self) -> None:
        os.close(self.fd)
        os.remove(self.path)


class Rewrite:
    """The floor of rewriting a whole file atomically: write ``size`` bytes to a temp file,
    fsync, rename over the old one, fsync the directory."""

    def __init__(self, directory: str, size: int) -> None:
        self.directory = directory
        self.payload = os.urandom(size)
        self.tmp = os.path.join(directory, "floor-rewrite.tmp")
        self.final = os.path.join(directory, "floor-rewrite.bin")

    def __call__(self) -> float:
        start = time.perf_counter()
        fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(self.payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.tmp, self.final)
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return time.perf_counter() - start

    def close(self) -> None:
        if os.path.exists(self.final):
            os.remove(self.final)


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
            directory = os.path.dirname(path)
            floor = AppendSync(directory) if name == "sqlite" else Rewrite(directory, os.path.getsize(path))
            try:
                times, floors = update_cost(name, path, keys, updates, rng, floor)
            finally:
                floor.close()
            result[name] = {
                "fill_s": round(fill_s, 3),
                "open_recover_s": round(recover_s, 4),
                "update_ms": round(statistics.fmean(times) * 1000, 3),
                "update_median_ms": round(statistics.median(times) * 1000, 3),
                "updates": updates,
                "floor": "append 4 KiB + fdatasync" if name == "sqlite" else "atomic rewrite of the file's size",
                "floor_ms": round(statistics.fmean(floors) * 1000, 3),
                "file_bytes": os.path.getsize(path),
            }
        sq, js = result["sqlite"], result["json"]
        result["ratios"] = {
            "recovery_json_over_sqlite": round(js["open_recover_s"] / sq["open_recover_s"], 2),
            "update_json_over_sqlite": round(js["update_ms"] / sq["update_ms"], 1),
            "sqlite_update_over_floor": round(sq["update_ms"] / sq["floor_ms"], 2),
            "json_update_over_floor": round(js["update_ms"] / js["floor_ms"], 2),
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
              f"(mean of {r['updates']}, median {r['update_median_ms']:.3f})   file {r['file_bytes'] / 1e6:7.1f} MB   fill {r['fill_s']:.1f} s")
    rat = result["ratios"]
    for name in STORES:
        r = result[name]
        print(f"  floor   {name:6}  {r['floor']}: {r['floor_ms']:.3f} ms (interleaved with the updates)")
    print(f"  ratios  recovery json/sqlite {rat['recovery_json_over_sqlite']}   "
          f"update json/sqlite {rat['update_json_over_sqlite']}   "
          f"sqlite update/floor {rat['sqlite_update_over_floor']}   "
          f"json update/floor {rat['json_update_over_floor']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
