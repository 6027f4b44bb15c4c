"""Static topics: read throughput of a logic queue spanning 3 generations against one physical
queue; with ``--queues N``, how ``static-topic create`` and ``status`` grow with the queue count.

    python bench/static_topic.py [--json] [--messages N] [--size BYTES] [--rounds R]
    python bench/static_topic.py --queues N [--json] [--repeat R]

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

Scaling mode (``--queues N``): for N/100, N/10 and N logic queues (e.g. 1,000, 10,000 and
100,000), a fresh cluster of three brokers (a cluster TOML file, POSIX driver, temporary
directories) runs ``tiered static-topic create --cluster FILE --topic T --queues n --brokers
a,b,c --json`` and then ``tiered static-topic status --cluster FILE --topic T --json``, each
in this process through the command's entry point (``tiered_core.cli.main``: the cluster
opened from its file, the command's work, its JSON written to a file, the cluster closed;
the interpreter's start-up and a first untimed run of 10 queues, which imports the code, left
out). Each size runs ``--repeat`` times (a fresh cluster
each); the median counts. Figures per command and size: ``seconds`` (wall clock) and
``cpu_seconds`` (this process's CPU time: what other processes of a shared machine took
is left out); per command, ``growth``: the time of one size divided by the time of the
size ten times smaller, by CPU time (the work done; the wall-clock growth is printed too,
``growth_wall``). Target: every growth <= 12 per 10x queues (linear: 10; quadratic: 100).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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


#: Largest accepted time growth of ``create`` and ``status`` per 10x queues (linear: 10).
GROWTH_TARGET = 12.0
SCALE_TOPIC = "bench_scale"

CLUSTER_FILE = """[tiered]
driver = "posix"
cluster = "bench"
[tiered.options]
root = "./tier"
fsync = false
[[broker]]
broker = "a"
store_path = "./a"
[[broker]]
broker = "b"
store_path = "./b"
[[broker]]
broker = "c"
store_path = "./c"
"""


def run_command(argv: list[str], out_path: Path) -> tuple[float, float]:
    """``tiered *argv`` in this process, stdout to ``out_path``: (wall seconds, CPU seconds)."""
    from tiered_core.cli import main as tiered

    with open(out_path, "w") as out, contextlib.redirect_stdout(out):
        cpu, wall = time.process_time(), time.perf_counter()
        code = tiered(argv)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if code != 0:
        raise RuntimeError(f"tiered {' '.join(argv)} exited {code}: {out_path.read_text()[-2000:]}")
    return wall, cpu


def measure_size(queues: int, repeat: int) -> dict[str, dict[str, float]]:
    """``create`` then ``status`` of a static topic of ``queues`` logic queues on a fresh
    three-broker cluster, ``repeat`` times: the median wall and CPU seconds of each."""
    runs: dict[str, list[tuple[float, float]]] = {"create": [], "status": []}
    for _ in range(repeat):
        root = Path(tempfile.mkdtemp(prefix="bench-static-scale-"))
        try:
            cluster = root / "cluster.toml"
            cluster.write_text(CLUSTER_FILE)
            base = ["--cluster", str(cluster), "--topic", SCALE_TOPIC, "--json"]
            runs["create"].append(run_command(["static-topic", "create", *base, "--queues", str(queues),
                                               "--brokers", "a,b,c"], root / "create.json"))
            runs["status"].append(run_command(["static-topic", "status", *base], root / "status.json"))
            doc = json.loads((root / "status.json").read_text())
            assert doc["totalQueues"] == queues == len(doc["queues"]), (queues, doc["totalQueues"])
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return {cmd: {"seconds": round(statistics.median(w for w, _ in r), 3),
                  "cpu_seconds": round(statistics.median(c for _, c in r), 3)} for cmd, r in runs.items()}


def scaling(queues: int, repeat: int) -> dict[str, Any]:
    """The scaling figures for N/100, N/10 and N queues (see the module doc)."""
    sizes = [max(1, queues // 100), max(1, queues // 10), queues]
    measure_size(10, 1)  # warm-up, untimed: imports, plugin discovery
    measured = {n: measure_size(n, repeat) for n in sizes}
    result: dict[str, Any] = {"sizes": sizes, "repeat": repeat, "brokers": 3, "target_growth_per_10x": GROWTH_TARGET}
    ok = True
    for cmd in ("create", "status"):
        times = [measured[n][cmd] for n in sizes]
        growth = [round(b["cpu_seconds"] / max(a["cpu_seconds"], 1e-9), 2) for a, b in zip(times, times[1:])]
        growth_wall = [round(b["seconds"] / max(a["seconds"], 1e-9), 2) for a, b in zip(times, times[1:])]
        passed = all(g <= GROWTH_TARGET for g in growth)
        ok = ok and passed
        result[cmd] = {"seconds": {str(n): t["seconds"] for n, t in zip(sizes, times)},
                       "cpu_seconds": {str(n): t["cpu_seconds"] for n, t in zip(sizes, times)},
                       "growth": growth, "growth_wall": growth_wall, "result": "PASS" if passed else "FAIL"}
    result["result"] = "PASS" if ok else "FAIL"
    result.update(cpu_count=os.cpu_count(), load_average_1m=round(os.getloadavg()[0], 2))
    return result


def print_scaling(result: dict[str, Any]) -> None:
    sizes = result["sizes"]
    print(f"static-topic create and status, {result['brokers']} brokers, median of {result['repeat']} run(s) "
          f"(cpus {result['cpu_count']}, load {result['load_average_1m']})")
    for cmd in ("create", "status"):
        r = result[cmd]
        times = ", ".join(f"{n} queues {r['seconds'][str(n)]} s (cpu {r['cpu_seconds'][str(n)]} s)" for n in sizes)
        print(f"  {cmd}: {times}")
        print(f"  {cmd}: growth per 10x queues {r['growth']} by CPU time (wall clock {r['growth_wall']}); "
              f"target <= {result['target_growth_per_10x']} {r['result']}")
    print(result["result"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--messages", type=int, default=5000, help="messages per generation")
    p.add_argument("--size", type=int, default=512, help="body bytes")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--queues", type=int, help="scaling mode: create and status of N/100, N/10 and N logic queues")
    p.add_argument("--repeat", type=int, default=3, help="scaling mode: runs per size (the median counts)")
    args = p.parse_args(argv)
    if args.queues is not None:
        if args.queues < 100 or args.repeat < 1:
            p.error("--queues must be >= 100 and --repeat >= 1")
        result = scaling(args.queues, args.repeat)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print_scaling(result)
        return 0 if result["result"] == "PASS" else 1
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
