"""Local store write path: put_message alone, reput alone, put + background reput end to end.

    python bench/local_put.py [--messages 40000] [--size 1024] [--queues 4] [--rounds 3] [--json]

Messages are built before the timed loops (``--size`` body bytes, one key and one tag
each, round-robin over ``--queues`` queues of one topic, async flush). Figures, medians
over ``--rounds`` (a fresh store each round):

* ``floor_us``: the CPU floor of a put -- body CRC, one ``struct`` pack of the head,
  the copy into a 4 MiB buffer, written and fdatasync'ed every 4 MiB;
* ``put_us``: ``put_message`` with no background services (no reput running);
* ``reput_us``: one ``reput()`` over what was put, per message (CQ units and key index);
* ``e2e_msgs_per_s``: ``put_message`` with the background reput and flush threads, from
  the first put until the reput reached the last message;
* ``put_vs_floor``: ``floor_us / put_us``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
import zlib

from tiered_core.codec.message import Message
from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig

MiB = 1 << 20
TOPIC = "bench"


def build(messages: int, size: int, queues: int) -> list[tuple[int, Message]]:
    out = []
    for seq in range(messages):
        qid = seq % queues
        stamp = f"{qid}/{seq}|".encode()
        body = (stamp * (size // len(stamp) + 1))[:size]
        out.append((qid, Message(topic=TOPIC, body=body, keys=[f"k-{seq}"], tags=f"t{seq % 8}",
                                 born_timestamp=1_700_000_000_000 + seq)))
    return out


def floor(msgs: list[tuple[int, Message]], path: str) -> float:
    head = struct.Struct(">iIiiiqqiq4siq4siiqi")
    buf = bytearray(4 * MiB)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        pos = 0
        for qid, m in msgs:
            body = m.body
            n = head.size + len(body) + 40
            if pos + n > len(buf):
                os.write(fd, memoryview(buf)[:pos])
                os.fdatasync(fd)
                pos = 0
            head.pack_into(buf, pos, n, 0xDAA320A7, zlib.crc32(body) & 0x7FFFFFFF, qid, 0, 0, 0, 0, 0,
                           b"\x7f\0\0\x01", 0, 0, b"\x7f\0\0\x01", 0, 0, 0, len(body))
            p = pos + head.size
            buf[p:p + len(body)] = body
            pos = p + len(body) + 40
        os.write(fd, memoryview(buf)[:pos])
        os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def config(background: bool) -> LocalStoreConfig:
    return LocalStoreConfig(commit_log_file_size=256 * MiB, background_services=background)


def put_then_reput(msgs, root: str) -> tuple[float, float]:
    with LocalMessageStore(root, config(False)) as store:
        put = store.put_message
        start = time.perf_counter()
        for qid, m in msgs:
            put(TOPIC, qid, m)
        put_s = time.perf_counter() - start
        start = time.perf_counter()
        n = store.reput()
        reput_s = time.perf_counter() - start
        assert n == len(msgs), n
    return put_s, reput_s


def end_to_end(msgs, root: str) -> float:
    with LocalMessageStore(root, config(True)) as store:
        put = store.put_message
        start = time.perf_counter()
        for qid, m in msgs:
            put(TOPIC, qid, m)
        end = store.get_commit_log_max_offset()
        while store.reput_offset < end:
            time.sleep(0.0002)
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    n = args.messages
    workdir = tempfile.mkdtemp(prefix="tiered-bench-put-", dir=args.workdir)
    figs: dict[str, list[float]] = {"floor": [], "put": [], "reput": [], "e2e": []}
    try:
        for r in range(args.rounds):
            msgs = build(n, args.size, args.queues)
            figs["floor"].append(floor(msgs, os.path.join(workdir, "floor")) / n * 1e6)
            put_s, reput_s = put_then_reput(msgs, os.path.join(workdir, f"a{r}"))
            figs["put"].append(put_s / n * 1e6)
            figs["reput"].append(reput_s / n * 1e6)
            shutil.rmtree(os.path.join(workdir, f"a{r}"))
            msgs = build(n, args.size, args.queues)
            figs["e2e"].append(n / end_to_end(msgs, os.path.join(workdir, f"b{r}")))
            shutil.rmtree(os.path.join(workdir, f"b{r}"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in figs.items()}
    result = {
        "messages": n, "body_bytes": args.size, "queues": args.queues, "rounds": args.rounds,
        "floor_us": round(med["floor"], 2),
        "put_us": round(med["put"], 2),
        "reput_us": round(med["reput"], 2),
        "put_vs_floor": round(med["floor"] / med["put"], 3),
        "put_msgs_per_s": round(1e6 / med["put"]),
        "e2e_msgs_per_s": round(med["e2e"]),
        "all": {k: [round(x, 2) for x in v] for k, v in figs.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:16} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
