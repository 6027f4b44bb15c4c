"""TieredMessageStore throughput, each figure against a limit measured in the same run.

    python bench/store.py --driver posix [--json] [--messages 40000] [--size 1024]
    python bench/store.py --driver gcs|azure [--option key=value ...]

Figures (medians over ``--rounds``; every round uses a fresh store and a fresh tiered
location, and raw runs alternate with store runs so a noisy neighbour hurts both alike):

* ``put_msgs_per_s``: ``put_message`` of ``--messages`` messages of ``--size`` body bytes,
  spread over ``--queues`` queues of one topic (the local store, async flush).
* ``dispatch_ratio_vs_raw``: dispatch throughput (message bytes per second of
  ``MessageStoreDispatcher.dispatch(force=True)``, after the local reput and flush,
  default group commit: 4096 messages / 4 MiB) divided by the raw limit of the same
  driver: ``driver.write`` of the same total bytes in 4 MiB writes to one new object.
* ``group_commit_speedup``: dispatch messages per second with the default grouping,
  divided by the same with ``group_commit_count=1`` (one commit per message; measured
  on ``--single-messages`` messages). Seed 000 reports >= 3.
* ``cold_read_ratio_vs_raw``: reading every message once through ``get_message``
  (storage level FORCE, read-ahead cache emptied first, so each batch starts with a
  miss) in message bytes per second, divided by raw ``driver.read`` of the same
  tiered commit-log bytes in 16 MiB reads (the fetcher's read-ahead size).
* ``warm_read_msgs_per_s``: reading every message again, now all from the cache.

gcs and azure start their emulator when no endpoint is configured (the drivers'
``tiered_conformance_environment`` hook); ``--option`` adds or overrides driver options.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

from tiered_core import Message, StoreConfig
from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.store import TieredMessageStore
from tiered_core.plugins import conformance_environment, driver_class

MiB = 1 << 20
RAW_WRITE = 4 * MiB
RAW_READ = 16 * MiB
TOPIC = "bench"


def parse_options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"--option wants key=value, got {pair!r}")
        out[key] = value
    return out


def body_of(queue_id: int, seq: int, size: int) -> bytes:
    stamp = f"{queue_id}/{seq}|".encode()
    return (stamp * (size // len(stamp) + 1))[:size]


def open_store(base: StoreConfig, workdir: str, **changes) -> TieredMessageStore:
    """A store on a fresh local directory and a fresh tiered location (a broker name of its own)."""
    tag = uuid.uuid4().hex[:10]
    return TieredMessageStore.open(base.replace(store_path=os.path.join(workdir, f"store-{tag}"),
                                                broker=f"bench-{tag}", **changes))


def put(store: TieredMessageStore, messages: int, size: int, queues: int) -> float:
    """Seconds to put ``messages`` messages round-robin over ``queues`` queues."""
    start = time.perf_counter()
    for seq in range(messages):
        qid = seq % queues
        store.put_message(Message(topic=TOPIC, body=body_of(qid, seq, size), keys=[f"k-{seq}"],
                                  tags=f"t{seq % 8}"), qid)
    return time.perf_counter() - start


def dispatch(store: TieredMessageStore, expected: int) -> tuple[float, int]:
    """Seconds of one forced dispatch round (after reput and flush), and the bytes it copied."""
    store.local.reput()
    store.local.flush()
    start = time.perf_counter()
    stats = store.dispatcher.dispatch(force=True)
    elapsed = time.perf_counter() - start
    if stats.errors or stats.messages != expected:
        raise RuntimeError(f"dispatch copied {stats.messages} of {expected} messages: {stats.errors}")
    return elapsed, stats.bytes


def raw_write(driver, total: int) -> float:
    """Seconds for ``driver.write`` of ``total`` bytes in 4 MiB writes to one new object."""
    path = f"bench-raw/{uuid.uuid4().hex}/write"
    payload = os.urandom(RAW_WRITE)
    start = time.perf_counter()
    pos = 0
    while pos < total:
        chunk = payload[:min(RAW_WRITE, total - pos)]
        driver.write(path, pos, chunk)
        pos += len(chunk)
    elapsed = time.perf_counter() - start
    driver.delete(path)
    return elapsed


def read_all(store: TieredMessageStore, counts: list[int], batch: int = 32) -> tuple[float, int]:
    """Seconds to read every message through ``get_message``, and their stored bytes."""
    total = 0
    start = time.perf_counter()
    for qid, count in enumerate(counts):
        offset = 0
        while offset < count:
            got = store.get_message("bench", TOPIC, qid, offset, batch)
            if got.status is not GetMessageStatus.FOUND or got.tier is not StoreTier.TIERED:
                raise RuntimeError(f"{TOPIC}/{qid}@{offset}: {got.status.name} from {got.tier}")
            total += sum(m.store_size for m in got.messages)
            offset = got.next_begin_offset
    return time.perf_counter() - start, total


def raw_read(store: TieredMessageStore) -> tuple[float, int]:
    """Seconds for ``driver.read`` of every tiered commit-log segment of the bench topic in 16 MiB reads."""
    paths = [(seg.path, seg.commit_position) for qid in range(len(store.stat()))
             for seg in store.flat_files.get(TOPIC, qid).commit_log.segments]
    total = 0
    start = time.perf_counter()
    for path, size in paths:
        pos = 0
        while pos < size:
            n = min(RAW_READ, size - pos)
            total += len(store.driver.read(path, pos, n))
            pos += n
    return time.perf_counter() - start, total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", default="posix")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes per message")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--single-messages", type=int, default=1500,
                    help="messages dispatched with group_commit_count=1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="where the local stores (and the posix root) go")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if min(args.messages, args.size, args.queues, args.single_messages, args.rounds) <= 0:
        sys.exit("--messages, --size, --queues, --single-messages and --rounds must be > 0")

    workdir = tempfile.mkdtemp(prefix="tiered-bench-store-", dir=args.workdir)
    if args.driver == "gcs":  # gcsfs probes HNS buckets, which the emulator lacks
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    cls = driver_class(args.driver)
    counts = [len(range(q, args.messages, args.queues)) for q in range(args.queues)]
    figures: dict[str, list[float]] = {k: [] for k in (
        "put", "dispatch", "raw_write", "dispatch_msgs", "single_msgs", "cold", "raw_read", "warm")}
    try:
        with conformance_environment(args.driver, workdir) as env_options:
            options = cls.coerce_options({**env_options, **parse_options(args.option)})
            base = StoreConfig(store_path=workdir, driver=args.driver, driver_options=options, metadata="sqlite",
                               local_commit_log_file_size=256 * MiB,
                               read_ahead_cache_bytes=max(256 * MiB, 2 * args.messages * (args.size + 256)))
            for _ in range(args.rounds):
                # put and dispatch with the default grouping
                with open_store(base, workdir) as store:
                    put_s = put(store, args.messages, args.size, args.queues)
                    dispatch_s, dispatched = dispatch(store, args.messages)
                    raw_w_s = raw_write(store.driver, dispatched)
                    store.index.compact_and_upload()
                    config = store.config
                figures["put"].append(args.messages / put_s)
                figures["dispatch"].append(dispatched / dispatch_s)
                figures["dispatch_msgs"].append(args.messages / dispatch_s)
                figures["raw_write"].append(dispatched / raw_w_s)
                # cold, then warm reads of the same store, reopened with FORCE
                with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
                    raw_r_s, raw_bytes = raw_read(store)
                    store.cache.clear()
                    cold_s, read_bytes = read_all(store, counts)
                    warm_s, _ = read_all(store, counts)
                    if store.cache.stats.hits == 0:
                        raise RuntimeError("the warm read never hit the cache")
                figures["raw_read"].append(raw_bytes / raw_r_s)
                figures["cold"].append(read_bytes / cold_s)
                figures["warm"].append(args.messages / warm_s)
                shutil.rmtree(config.store_path, ignore_errors=True)
                # one commit per message
                with open_store(base, workdir, group_commit_count=1) as store:
                    put(store, args.single_messages, args.size, args.queues)
                    single_s, _ = dispatch(store, args.single_messages)
                    single_path = store.config.store_path
                figures["single_msgs"].append(args.single_messages / single_s)
                shutil.rmtree(single_path, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in figures.items()}
    result = {
        "driver": args.driver,
        "messages": args.messages,
        "body_bytes": args.size,
        "queues": args.queues,
        "rounds": args.rounds,
        "put_msgs_per_s": round(med["put"]),
        "dispatch_mib_s": round(med["dispatch"] / MiB, 2),
        "raw_write_mib_s": round(med["raw_write"] / MiB, 2),
        "dispatch_ratio_vs_raw": round(statistics.median(
            d / r for d, r in zip(figures["dispatch"], figures["raw_write"])), 3),
        "dispatch_msgs_per_s": round(med["dispatch_msgs"]),
        "dispatch_one_commit_per_message_msgs_per_s": round(med["single_msgs"], 1),
        "group_commit_speedup": round(med["dispatch_msgs"] / med["single_msgs"], 1),
        "cold_read_mib_s": round(med["cold"] / MiB, 2),
        "raw_read_mib_s": round(med["raw_read"] / MiB, 2),
        "cold_read_ratio_vs_raw": round(statistics.median(
            c / r for c, r in zip(figures["cold"], figures["raw_read"])), 3),
        "warm_read_msgs_per_s": round(med["warm"]),
        "targets": {"group_commit_speedup": 3},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:44} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
