"""Per-kernel cost of the compiled core against its pure-Python oracle, in one process.

    python bench/speedups.py [--json] [--rounds 5] [--batch 32] [--body 1024]

For each kernel of :mod:`tiered_core.codec._impl` prints the µs per call of the pure
function and of its compiled twin on the same prebuilt input (1 KiB bodies, a fetch-sized
batch of 32 messages for the batch kernels), and ``speedup`` = pure / compiled. Rounds
alternate the two sides; the best round of each counts (the least disturbed by
neighbours). The inputs are valid: corrupted input goes to the oracle by design.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tiered_core.codec import _impl
from tiered_core.codec.consume_queue import ConsumeQueueUnit
from tiered_core.codec.hashing import tags_hash_code
from tiered_core.codec.message import Message


def _cases(batch: int, body: int):
    pure = _impl.pure
    msgs = [Message("BenchTopic", os.urandom(body), keys=[f"key-{i}"], tags="TagA",
                    properties={"UNIQ_KEY": f"{i:032X}", "user": "v"}, born_host=("10.0.0.7", 50000))
            for i in range(batch)]
    buf = bytearray()
    units = []
    for i, m in enumerate(msgs):
        raw = pure.encode_message(m, queue_id=3, queue_offset=1000 + i, store_timestamp=1_700_000_000_000 + i,
                                  physical_offset=1 << 30 | len(buf), store_host=("10.0.0.8", 10911))
        units.append(ConsumeQueueUnit((1 << 30) + len(buf), len(raw), tags_hash_code("TagA")))
        buf += raw
    buf = bytes(buf)
    first = bytes(buf[:units[0].size])
    cq = pure.encode_cq_units(units)
    m0 = msgs[0]
    from tiered_core.codec.checks import scan_flags
    scan_units = [tuple(u) for u in units]
    positions = [u.commitlog_offset - (1 << 30) for u in units]
    group = (buf, positions, [u.commitlog_offset for u in units], [u.size for u in units],
             [u.tags_code for u in units], 1 << 33)
    # name, kernel, args, kwargs, messages per call
    return [
        ("check_units", "check_units", (units, buf, 1 << 30),
         dict(topic="BenchTopic", queue_id=3, queue_offset=1000), batch),
        ("decode_message", "decode_message", (first,), dict(verify_crc=False), 1),
        ("decode_message+crc", "decode_message", (first,), {}, 1),
        ("validate_message", "validate_message", (first,), {}, 1),
        ("peek_store_timestamp", "peek_store_timestamp", (first,), {}, 1),
        ("peek_queue_offset", "peek_queue_offset", (first,), {}, 1),
        ("encode_message", "encode_message", (m0,),
         dict(queue_id=3, queue_offset=1000, store_timestamp=1_700_000_000_000, physical_offset=1 << 30,
              store_host=("10.0.0.8", 10911)), 1),
        ("encode_message+prop_crc", "encode_message", (m0,),
         dict(queue_id=3, queue_offset=1000, store_timestamp=1_700_000_000_000, physical_offset=1 << 30,
              store_host=("10.0.0.8", 10911), prop_crc=True), 1),
        ("encode_cq_unit", "encode_cq_unit", (1 << 30, 1200, -123456), {}, 1),
        ("encode_cq_units", "encode_cq_units", (units,), {}, batch),
        ("decode_cq_units", "decode_cq_units", (cq,), {}, batch),
        ("cq_span", "cq_span", (cq, 16 << 20), {}, batch),
        ("batch_items", "batch_items", ([tuple(u) for u in units], buf, 1 << 30, 1000), {}, batch),
        ("pack_item", "pack_item", (123456789, 7, 3, 1 << 30, 1200, 3600, 42), {}, 1),
        (f"java_crc32 ({body} B)", "java_crc32", (m0.body,), {}, 1),
        ("scan_units", "scan_units", (scan_units, buf, 1 << 30, b"BenchTopic", 3, 1000,
                                      scan_flags("BenchTopic")), {}, batch),
        ("build_group", "build_group", group, {}, batch),
        ("build_group (no keys)", "build_group", group + (False,), {}, batch),
        ("lazy_message_ext", "lazy_message_ext", (first, "BenchTopic"), {}, 1),
        ("lazy_message_ext (topic)", "lazy_message_ext", (first,), {}, 1),
        ("link_items (2 keys/msg)", "link_items",
         (bytes(28 + 8 * 5_000_000), 5_000_000, 1000, "BenchTopic", 7, 3,
          [[f"{i:032X}", f"key-{i}"] for i in range(batch)], [u.commitlog_offset for u in units],
          [u.size for u in units], list(range(batch))), {}, batch),
    ]


def _time(fn, args, kw, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn(*args, **kw)
    return (time.perf_counter() - t0) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32, help="messages per batch kernel call")
    ap.add_argument("--body", type=int, default=1024, help="body bytes per message")
    ap.add_argument("--seconds", type=float, default=0.05, help="target time per side per round")
    args = ap.parse_args(argv)
    compiled = _impl.load_compiled()
    if compiled is None:
        print(_impl.pure_python_line() or "the compiled core is not built", file=sys.stderr)
        return 1
    rows = []
    for label, name, a, kw, per in _cases(args.batch, args.body):
        pure_fn, comp_fn = getattr(_impl.pure, name), getattr(compiled, name)
        assert pure_fn(*a, **kw) == comp_fn(*a, **kw), label
        one = max(_time(pure_fn, a, kw, 3), 0.05)
        number = max(10, int(args.seconds * 1e6 / one))
        best_p = best_c = float("inf")
        for _ in range(args.rounds):
            best_p = min(best_p, _time(pure_fn, a, kw, number))
            best_c = min(best_c, _time(comp_fn, a, kw, number))
        rows.append({"kernel": label, "messages_per_call": per, "pure_us": round(best_p, 3),
                     "compiled_us": round(best_c, 3), "speedup": round(best_p / best_c, 2)})
    if args.json:
        print(json.dumps({"implementation_in_use": _impl.IMPLEMENTATION, "batch": args.batch,
                          "body": args.body, "kernels": rows}, indent=2))
        return 0
    print(f"{'kernel':26} {'msgs/call':>9} {'pure µs':>10} {'compiled µs':>12} {'speedup':>8}")
    for r in rows:
        print(f"{r['kernel']:26} {r['messages_per_call']:>9} {r['pure_us']:>10.3f} {r['compiled_us']:>12.3f} "
              f"{r['speedup']:>7.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
