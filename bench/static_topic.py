"""Read throughput of a static topic's logic queue spanning 3 generations, against one physical queue.

    python bench/static_topic.py [--json] [--messages N] [--size BYTES] [--rounds R]

Set-up (POSIX driver, temporary directories, three brokers a, b, c of one cluster): one
logic queue created on a; N messages put; remapped to b; N more; remapped to c; N more;
everything dispatched; then brokers a and b are closed and their ``store_path`` deleted, so
two of the three generations are readable from the tier only. The baseline is a normal
topic on broker c holding the same 3N messages in one physical queue, dispatched, whose
local copy is then deleted too (so both sides read from the tiered store).

Both sides read the same 3N messages of the same size, 32 a call, from offset 0 to the
end, with warm state: one untimed pass of each side first (the read-ahead caches, the
tier-only readers and the logic queue's read plan are built there). Then ``--rounds``
timed rounds; a round times one pass of each side back to back, the side going first
alternating between rounds, so both see the same load on a shared machine.

Figures:

* ``ratio``: the median over the rounds of (logic msgs/s / physical msgs/s) of the round:
  messages/s reading the whole logic queue through :meth:`Cluster.get_message`, divided by
  messages/s reading the physical queue through :meth:`TieredMessageStore.get_message`.
  Target >= 0.9. ``ratio_min``, ``ratio_max``: the spread over the rounds.
* ``ratio_cpu``: the same median with both sides timed by this process's CPU time instead
  of the wall clock (time the other processes of a shared machine held the CPU left out).
* ``logic_msgs_per_s``, ``physical_msgs_per_s``: the two sides (median over the rounds, wall clock).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from tiered_core import Message, StoreConfig
from tiered_core.access.results import GetMessageStatus
from tiered_core.static_topic import Cluster

TOPIC = "bench_static"
BASE = "bench_physical"
BATCH = 32


def configs(root: Path) -> list[StoreConfig]:
    return [StoreConfig.from_mapping({"store_path": str(root / b), "driver": "posix", "cluster": "bench",
                                      "broker": b, "options": {"root": str(root / "tier"), "fsync": False},
                                      "storage_level": "FORCE"})
            for b in ("a", "b", "c")]


def read_all(get_message: Callable[[int, int], Any], expected: int) -> tuple[float, float]:
    """Messages/s reading a queue from offset 0 to its end, ``BATCH`` a call, with
    ``get_message(offset, count)`` (a logic or a physical queue): by the wall clock, and by
    this process's CPU time (which leaves out the time other processes held the CPU)."""
    cpu = time.process_time()
    start = time.perf_counter()
    offset = n = 0
    while True:
        res = get_message(offset, BATCH)
        if res.status is not GetMessageStatus.FOUND:
            break
        n += len(res.messages)
        offset = res.next_begin_offset
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    assert n == expected, (n, expected)
    return n / elapsed, n / max(cpu, 1e-9)


def read_logic(cluster: Cluster, expected: int) -> tuple[float, float]:
    return read_all(lambda offset, count: cluster.get_message("bench", TOPIC, 0, offset, count), expected)


def read_physical(cluster: Cluster, expected: int) -> tuple[float, float]:
    store = cluster.stores["c"]
    return read_all(lambda offset, count: store.get_message("bench", BASE, 0, offset, count), expected)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--messages", type=int, default=5000, help="messages per generation")
    p.add_argument("--size", type=int, default=512, help="body bytes")
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-static-"))
    try:
        cfgs = configs(root)
        body = b"x" * args.size
        with Cluster.open(cfgs) as cluster:
            cluster.create_static_topic(TOPIC, 1, ["a"])
            for gen, broker in enumerate(("a", "b", "c")):
                if gen:
                    cluster.remap_static_topic(TOPIC, [broker])
                for i in range(args.messages):
                    cluster.put_message(Message(topic=TOPIC, body=body, keys=[f"k{gen}-{i}"]), 0)
            for i in range(3 * args.messages):
                cluster.stores["c"].put_message(Message(topic=BASE, body=body, keys=[f"p-{i}"]), 0)
            cluster.dispatch(force=True)
            for broker in ("a", "b"):
                cluster.close_broker(broker)
                shutil.rmtree(root / broker)
            total = 3 * args.messages
            read_physical(cluster, total)  # warm-up, untimed figures
            read_logic(cluster, total)
            logic, physical = [], []
            for r in range(args.rounds):
                if r % 2:
                    logic.append(read_logic(cluster, total))
                    physical.append(read_physical(cluster, total))
                else:
                    physical.append(read_physical(cluster, total))
                    logic.append(read_logic(cluster, total))
            status = cluster.static_topic_status(TOPIC)
        ratios = [lg[0] / ph[0] for lg, ph in zip(logic, physical)]
        cpu_ratios = [lg[1] / ph[1] for lg, ph in zip(logic, physical)]
        result = {"messages": total, "generations": len(status["queues"][0]["items"]), "tier_only_generations": 2,
                  "rounds": args.rounds, "logic_msgs_per_s": round(statistics.median(w for w, _ in logic)),
                  "physical_msgs_per_s": round(statistics.median(w for w, _ in physical)),
                  "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
                  "ratio_max": round(max(ratios), 3), "ratio_cpu": round(statistics.median(cpu_ratios), 3),
                  "target": 0.9}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"logic queue over {result['generations']} generations (2 tier-only): {result['logic_msgs_per_s']} msg/s; "
              f"one physical queue: {result['physical_msgs_per_s']} msg/s; ratio {result['ratio']} (median of "
              f"{result['rounds']} rounds, {result['ratio_min']}..{result['ratio_max']}; target >= 0.9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
