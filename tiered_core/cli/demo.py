"""``tiered demo``: a round trip through FileSegment on the configured driver.

Appends records into segments of a fixed size, rolling to a new segment when one is
full (the full one is committed and sealed), then reads every record back from the
backend and verifies it. Prints a summary.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import struct
import sys
import time

from tiered_core.plugins import open_driver
from tiered_core.segment import AppendResult, FileSegment

_HEADER = struct.Struct(">QI")  # sequence number, body length


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="round trip records through segments on a driver and verify them")
    p.add_argument("--driver", default="posix")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="driver option (default for posix: root=./demo-data)")
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--segment-mib", type=int, default=8)
    p.add_argument("--keep", action="store_true", help="keep the data directory afterwards")
    p.set_defaults(func=run)


def _record(seq: int, size: int) -> bytes:
    body = hashlib.blake2b(seq.to_bytes(8, "big"), digest_size=32).digest()
    body = (body * (size // len(body) + 1))[:size]
    return _HEADER.pack(seq, size) + body


def _progress(label: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        width = 30
        fill = width * done // max(total, 1)
        sys.stderr.write(f"\r{label:8} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")


def run(args: argparse.Namespace) -> int:
    options = dict(o.split("=", 1) for o in args.option)
    if args.driver == "posix":
        options.setdefault("root", os.path.abspath("demo-data"))
    driver = open_driver(args.driver, **options)
    prefix = f"demo/{int(time.time() * 1000)}"
    seg_size = args.segment_mib << 20
    segments: list[FileSegment] = []

    def roll(base: int) -> FileSegment:
        seg = FileSegment(driver, f"{prefix}/{base:020d}", base_offset=base, max_size=seg_size)
        segments.append(seg)
        return seg

    t0 = time.perf_counter()
    offset = 0
    seg = roll(0)
    for seq in range(args.records):
        rec = _record(seq, args.record_size)
        result = seg.append(rec)
        if result is AppendResult.BUFFER_FULL or (seg.append_position - seg.commit_position) >= 4 << 20:
            while not seg.commit():
                time.sleep(0.01)
            if result is AppendResult.BUFFER_FULL:
                result = seg.append(rec)
        if result is AppendResult.FILE_FULL:
            seg.seal()
            seg = roll(offset)
            result = seg.append(rec)
        if result is not AppendResult.SUCCESS:
            print(f"append failed: {result.name} at record {seq}", file=sys.stderr)
            return 1
        offset += len(rec)
        if seq % 5000 == 0:
            _progress("write", seq, args.records)
    seg.seal()
    _progress("write", args.records, args.records)
    write_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    verified = 0
    for reopened in (FileSegment(driver, s.path, base_offset=s.base_offset, max_size=seg_size) for s in segments):
        data = reopened.read(0, reopened.commit_position) if reopened.commit_position else b""
        pos = 0
        while pos < len(data):
            seq, size = _HEADER.unpack_from(data, pos)
            rec = data[pos:pos + _HEADER.size + size]
            if seq != verified or rec != _record(seq, size):
                print(f"verification failed at record {verified} (segment {reopened.path})", file=sys.stderr)
                return 1
            pos += len(rec)
            verified += 1
            if verified % 5000 == 0:
                _progress("verify", verified, args.records)
    _progress("verify", verified, args.records)
    read_s = time.perf_counter() - t1
    ok = verified == args.records and all(driver.is_sealed(s.path) for s in segments)

    mib = offset / (1 << 20)
    rows = [
        ("driver", driver.name),
        ("records written", f"{args.records:,}"),
        ("bytes written", f"{offset:,} ({mib:.1f} MiB)"),
        ("segments (rolled, sealed)", f"{len(segments)}"),
        ("write + commit", f"{write_s:.2f} s  ({mib / write_s:.1f} MiB/s)"),
        ("read back + verify", f"{read_s:.2f} s  ({mib / read_s:.1f} MiB/s)"),
        ("records verified", f"{verified:,} / {args.records:,}"),
        ("result", "OK: every record read back intact" if ok else "FAILED"),
    ]
    width = max(len(k) for k, _ in rows)
    print("tiered demo: FileSegment round trip")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    if not args.keep:
        for s in segments:
            driver.delete(s.path)
        if args.driver == "posix" and "root" in options and os.path.isdir(options["root"]):
            shutil.rmtree(os.path.join(options["root"], prefix.split("/")[0]), ignore_errors=True)
    driver.close()
    return 0 if ok else 1
