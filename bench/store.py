"""TieredMessageStore hot paths, each against a floor measured in the same round.

    python bench/store.py --driver posix [--json] [--messages 40000] [--size 1024] [--impl both]
    python bench/store.py --driver gcs|azure [--option key=value ...]

Every figure is a median over ``--rounds``; every round uses fresh stores and a fresh
tiered location, messages are built before any timed loop, and each path's floor is
measured in the same round right next to it, so a noisy neighbour hurts both alike. A
*floor* is the minimal work the path must do, written as a tight Python loop; a *ratio*
is ``floor time / path time`` (1.0 = as fast as the floor; higher is better).

Paths (``--messages`` messages of ``--size`` body bytes, one key and tags each, round-robin
over ``--queues`` queues of one topic):

* ``put``: ``TieredMessageStore.put_message`` alone, the local reput thread paused (it
  waits on the reput lock; ``put_reput_paused`` says whether that was possible).
  Floor: body CRC32 + one ``struct`` pack of the 88-byte header + memcpy of body, topic
  and properties into a 4 MiB buffer, written and fsynced every 4 MiB.
  ``put_reput_msgs_per_s``: put + the background reput, end to end (first put until the
  reput has consumed everything), on another fresh store.
* ``dispatch``: ``MessageStoreDispatcher.dispatch(force=True)`` after the local reput and
  flush (default group commit, key index included). Floor, per group of the same size: one
  ``pread`` of the group's local commit-log span, each message copied out with its 8-byte
  physical offset patched to its tiered position, a 20-byte consume-queue unit packed,
  one write to a commit-log and a consume-queue file, ``fdatasync`` of both.
* ``cold_read_fetch``: the fetcher's read-ahead read (consume-queue read, one commit-log
  read, split + validate) of every message in read-ahead batches.
  ``cold_read_api``: every message through ``get_message(..., 32)`` returning
  ``MessageExt``s (storage level FORCE, read-ahead cache emptied first).
  Floor of both: ``driver.read`` of the same commit-log bytes in the same batches,
  ``zlib.crc32`` of every body and one ``bytes`` slice per message.
  The floor computes the CRC with ``zlib.crc32``; the compiled core uses its own kernel
  (carry-less multiplication where the CPU has PCLMULQDQ, ``_speedups/crc32_clmul.h``),
  about 4x faster per KiB, so a compiled ratio above 1 is expected and honest: the work
  (every body's CRC-32 checked) is the same, done faster.
* ``warm_read_msgs_per_s``: every message again, now from the read-ahead cache;
  ``group_commit_speedup``: dispatch msg/s with the default grouping over the same with
  one commit per message (``--single-messages``).

``--impl both`` (default) runs the whole bench once per implementation in a child process:
``compiled`` (the ``tiered_core._speedups`` extension; reported unavailable, not an error,
when it cannot be imported) and ``pure`` (``TIERED_PURE_PYTHON=1``). The issue's targets
are printed with PASS/FAIL for each measured figure.

gcs and azure start their emulator when no endpoint is configured (the drivers'
``tiered_conformance_environment`` hook); ``--option`` adds or overrides driver options.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

if __name__ == "__main__":  # run from a checkout: import its tiered_core
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tiered_core import Message, StoreConfig  # noqa: E402
from tiered_core.access.results import GetMessageStatus, StoreTier  # noqa: E402
from tiered_core.access.tiered_store import TieredMessageStore  # noqa: E402
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_unit  # noqa: E402
from tiered_core.plugins import conformance_environment, driver_class  # noqa: E402

MiB = 1 << 20
TOPIC = "bench"
PURE_ENV = "TIERED_PURE_PYTHON"
IMPLS = {"compiled": "compiled", "pure": "pure-python"}

#: The issue's acceptance figures: (figure, minimum) per implementation.
TARGETS: dict[str, dict[str, float]] = {
    "compiled": {"dispatch_ratio": 0.5, "cold_read_fetch_ratio": 0.8, "cold_read_api_ratio": 0.3,
                 "put_ratio": 0.5, "put_reput_msgs_per_s": 50_000},
    "pure-python": {"dispatch_ratio": 0.25, "cold_read_api_ratio": 0.14},
}

# RocketMQ message header up to the body (88 bytes): totalSize, magic, bodyCRC, queueId,
# flag, queueOffset, physicalOffset, sysFlag, bornTimestamp, bornHost (ip4, port),
# storeTimestamp, storeHost (ip4, port), reconsumeTimes, preparedTransactionOffset, bodyLength.
_HEADER = struct.Struct(">iIiiiqqiq4siq4siiqi")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_CQ_UNIT = struct.Struct(">qiq")
_MAGIC_V1 = 0xDAA320A7
_PHYSICAL_OFFSET_POS = 28
_BODY_LENGTH_POS = 84


# -- helpers ----------------------------------------------------------------------------


def parse_options(pairs: list[str]) -> dict[str, str]:
    """``key=value`` pairs of ``--option``."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"--option wants key=value, got {pair!r}")
        out[key] = value
    return out


def body_of(queue_id: int, seq: int, size: int) -> bytes:
    """A recognisable body of ``size`` bytes."""
    stamp = f"{queue_id}/{seq}|".encode()
    return (stamp * (size // len(stamp) + 1))[:size]


def implementation() -> str:
    """``compiled`` when ``tiered_core._speedups`` imports and ``TIERED_PURE_PYTHON`` is not
    ``1``; otherwise ``pure-python``."""
    if os.environ.get(PURE_ENV) == "1":
        return "pure-python"
    try:
        importlib.import_module("tiered_core._speedups")
    except ImportError:
        return "pure-python"
    return "compiled"


def open_store(base: StoreConfig, workdir: str, **changes: Any) -> TieredMessageStore:
    """A store on a fresh local directory and a fresh tiered location (a broker name of its own)."""
    tag = uuid.uuid4().hex[:10]
    return TieredMessageStore.open(base.replace(store_path=os.path.join(workdir, f"store-{tag}"),
                                                broker=f"bench-{tag}", **changes))


def build_messages(messages: int, size: int, queues: int) -> list[tuple[Message, int]]:
    """``(message, queue id)`` round-robin over ``queues`` (built before any timed loop)."""
    return [(Message(topic=TOPIC, body=body_of(seq % queues, seq, size), keys=[f"k-{seq}"], tags=f"t{seq % 8}"),
             seq % queues) for seq in range(messages)]


def wait_reput(store: TieredMessageStore, timeout_s: float = 600.0) -> None:
    """Until the local reput has consumed every appended message."""
    deadline = time.monotonic() + timeout_s
    local = store.local
    while _value(local.reput_offset) < local.get_commit_log_max_offset():
        if time.monotonic() > deadline:
            raise RuntimeError("the local reput did not catch up")
        time.sleep(0.0005)


def _value(attr: Any) -> Any:
    """A property's value or a method's result (either spelling of a getter)."""
    return attr() if callable(attr) else attr


@contextmanager
def reput_paused(store: TieredMessageStore) -> Iterator[bool]:
    """Hold the local store's reput lock, so its background reput waits (True), or run as
    is (False) when this store has no such lock."""
    lock = getattr(store.local, "_reput_lock", None)
    if lock is None:
        yield False
        return
    with lock:
        yield True


# -- put ----------------------------------------------------------------------------------


def time_put(store: TieredMessageStore, batch: list[tuple[Message, int]]) -> float:
    """Seconds to ``put_message`` every prebuilt message."""
    put = store.put_message
    start = time.perf_counter()
    for msg, qid in batch:
        put(msg, qid)
    return time.perf_counter() - start


def put_floor_inputs(batch: list[tuple[Message, int]]) -> list[tuple[bytes, bytes, int, int, int]]:
    """Per message ``(body, topic+properties tail, queue id, flag, sys flag)`` as the floor copies them."""
    out = []
    for msg, qid in batch:
        topic = msg.topic.encode()
        props = "".join(f"{k}\x01{v}\x02" for k, v in msg.all_properties().items()).encode()
        tail = bytes([len(topic)]) + topic + len(props).to_bytes(2, "big") + props
        out.append((msg.body, tail, qid, msg.flag, msg.sys_flag))
    return out


def time_put_floor(inputs: list[tuple[bytes, bytes, int, int, int]], path: str) -> float:
    """Seconds for the put floor: CRC + header pack + memcpy into a 4 MiB buffer, written
    and fsynced whenever it is full (and at the end)."""
    cap = 4 * MiB
    buf = bytearray(cap + 64 * 1024 + max((len(b) + len(t) for b, t, *_ in inputs), default=0))
    view = memoryview(buf)
    pack = _HEADER.pack_into
    crc32 = zlib.crc32
    host = b"\x7f\x00\x00\x01"
    offsets: dict[int, int] = {}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        pos = physical = 0
        for body, tail, qid, flag, sys_flag in inputs:
            n = 88 + len(body) + len(tail)
            if pos + n > cap:
                os.write(fd, view[:pos])
                os.fsync(fd)
                pos = 0
            qoff = offsets.get(qid, 0)
            offsets[qid] = qoff + 1
            now = time.time_ns() // 1_000_000
            pack(buf, pos, n, _MAGIC_V1, crc32(body) & 0x7FFFFFFF, qid, flag, qoff, physical, sys_flag,
                 now, host, 50000, now, host, 10911, 0, 0, len(body))
            end = pos + 88 + len(body)
            buf[pos + 88:end] = body
            buf[end:end + len(tail)] = tail
            pos += n
            physical += n
        os.write(fd, view[:pos])
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return elapsed


# -- dispatch -------------------------------------------------------------------------------


@dataclass
class FloorGroup:
    """One dispatch group of one queue: the local commit-log span holding it and its messages."""

    queue_id: int
    file_path: str
    file_pos: int
    length: int
    items: list[tuple[int, int, int]]  # (position in the span, size, tags code)
    size: int


def dispatch_groups(store: TieredMessageStore, queues: int) -> list[FloorGroup]:
    """The groups the dispatcher makes (``group_commit_count`` / ``group_commit_size``), from
    the local consume queues (built before the timed floor)."""
    count_limit = store.dispatcher.group_commit_count
    size_limit = store.dispatcher.group_commit_size
    files = sorted(_value(store.local.commit_log.files), key=lambda mf: mf.start)
    groups: list[FloorGroup] = []
    for qid in range(queues):
        total = store.local.get_max_offset_in_queue(TOPIC, qid)
        units = store.local.get_consume_queue_units(TOPIC, qid, 0, total)
        i = 0
        while i < len(units):
            group = [units[i]]
            size = units[i].size
            mf = next(f for f in files if f.start <= units[i].commitlog_offset < f.start + f.capacity)
            while (i + len(group) < len(units) and len(group) < count_limit
                   and size + units[i + len(group)].size <= size_limit
                   and units[i + len(group)].commitlog_offset < mf.start + mf.capacity):
                size += units[i + len(group)].size
                group.append(units[i + len(group)])
            first = group[0].commitlog_offset
            length = group[-1].commitlog_offset + group[-1].size - first
            groups.append(FloorGroup(qid, mf.path, first - mf.start, length,
                                     [(u.commitlog_offset - first, u.size, u.tags_code) for u in group], size))
            i += len(group)
    return groups


def time_dispatch(store: TieredMessageStore, expected: int) -> tuple[float, int, int]:
    """Seconds of one forced dispatch round (after reput and flush), the bytes it copied and
    the groups it made."""
    store.local.reput()
    store.local.flush()
    start = time.perf_counter()
    stats = store.dispatcher.dispatch(force=True)
    elapsed = time.perf_counter() - start
    if stats.errors or stats.messages != expected:
        raise RuntimeError(f"dispatch copied {stats.messages} of {expected} messages: {stats.errors}")
    return elapsed, stats.bytes, stats.groups


def time_dispatch_floor(groups: list[FloorGroup], workdir: str) -> float:
    """Seconds for the dispatch floor over ``groups`` (see the module docstring)."""
    fds: dict[str, int] = {}
    outs: dict[int, tuple[int, int]] = {}
    try:
        for g in groups:
            if g.file_path not in fds:
                fds[g.file_path] = os.open(g.file_path, os.O_RDONLY)
            if g.queue_id not in outs:
                cl = os.open(os.path.join(workdir, f"floor-cl-{g.queue_id}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                cq = os.open(os.path.join(workdir, f"floor-cq-{g.queue_id}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                outs[g.queue_id] = (cl, cq)
        positions = dict.fromkeys(outs, 0)
        patch = _I64.pack_into
        unit = _CQ_UNIT.pack_into
        start = time.perf_counter()
        for g in groups:
            data = memoryview(os.pread(fds[g.file_path], g.length, g.file_pos))
            out = bytearray(g.size)
            cq = bytearray(CQ_UNIT_SIZE * len(g.items))
            base = positions[g.queue_id]
            o = u = 0
            for pos, size, tags in g.items:
                out[o:o + size] = data[pos:pos + size]
                patch(out, o + _PHYSICAL_OFFSET_POS, base + o)
                unit(cq, u, base + o, size, tags)
                o += size
                u += CQ_UNIT_SIZE
            cl_fd, cq_fd = outs[g.queue_id]
            os.write(cl_fd, out)
            os.write(cq_fd, cq)
            os.fdatasync(cl_fd)
            os.fdatasync(cq_fd)
            positions[g.queue_id] = base + o
        elapsed = time.perf_counter() - start
    finally:
        for fd in fds.values():
            os.close(fd)
        for qid, (cl, cq) in outs.items():
            os.close(cl)
            os.close(cq)
            os.unlink(os.path.join(workdir, f"floor-cl-{qid}"))
            os.unlink(os.path.join(workdir, f"floor-cq-{qid}"))
    return elapsed


# -- reads ---------------------------------------------------------------------------------


def read_ahead(store: TieredMessageStore) -> tuple[int, int]:
    """The fetcher's read-ahead batch: (messages, bytes)."""
    return (getattr(store.fetcher, "read_ahead_count", 4096), getattr(store.fetcher, "read_ahead_bytes", 16 * MiB))


@dataclass
class ReadBatch:
    """One read-ahead batch as the floor reads it: a tiered commit-log span and its messages."""

    path: str
    pos: int
    length: int
    items: list[tuple[int, int, int, int]]  # (position, size, body position, body length)


def read_batches(store: TieredMessageStore, counts: list[int]) -> list[ReadBatch]:
    """Every tiered message in the fetcher's read-ahead batches (count and byte budget), cut
    where a commit-log segment ends (built, and the bytes read once, before the timed floor)."""
    count_limit, bytes_limit = read_ahead(store)
    out: list[ReadBatch] = []
    for qid, count in enumerate(counts):
        flat = store.flat_files.get(TOPIC, qid)
        raw = b"".join(flat.get_consume_queue(s, min(1024, count - s)) for s in range(0, count, 1024))
        units = [decode_cq_unit(raw, i * CQ_UNIT_SIZE) for i in range(count)]
        segments = flat.commit_log.segments
        i = 0
        while i < count:
            seg = next(s for s in segments if s.base_offset <= units[i].commitlog_offset < s.commit_offset)
            first = units[i].commitlog_offset
            j = i
            while (j < count and j - i < count_limit and units[j].commitlog_offset + units[j].size <= seg.commit_offset
                   and (j == i or units[j].commitlog_offset + units[j].size - first <= bytes_limit)):
                j += 1
            length = units[j - 1].commitlog_offset + units[j - 1].size - first
            data = store.driver.read(seg.path, first - seg.base_offset, length)
            items = []
            for u in units[i:j]:
                p = u.commitlog_offset - first
                body_len = _I32.unpack_from(data, p + _BODY_LENGTH_POS)[0]
                items.append((p, u.size, p + _BODY_LENGTH_POS + 4, body_len))
            out.append(ReadBatch(seg.path, first - seg.base_offset, length, items))
            i = j
    return out


def time_read_floor(store: TieredMessageStore, batches: list[ReadBatch]) -> float:
    """Seconds for the read floor: ``driver.read`` of each batch, CRC32 of every body, a
    ``bytes`` slice per message."""
    read = store.driver.read
    crc32 = zlib.crc32
    start = time.perf_counter()
    for b in batches:
        data = read(b.path, b.pos, b.length)
        view = memoryview(data)
        for pos, size, body, body_len in b.items:
            crc32(view[body:body + body_len])
            data[pos:pos + size]
    return time.perf_counter() - start


def _batch_len(batch: Any) -> int:
    """Messages in what a batch read returned (a list, or an object with ``messages``)."""
    try:
        return len(batch)
    except TypeError:
        return len(batch.messages)


def time_fetch(store: TieredMessageStore, counts: list[int]) -> float:
    """Seconds for the fetcher's read-ahead reads (consume-queue read, commit-log read, split +
    validate) of every message: ``fetcher.read``, or the flat file's ``read_batch`` where the
    fetcher has no such method."""
    fetcher = store.fetcher
    count, max_bytes = read_ahead(store)
    start = time.perf_counter()
    for qid, total in enumerate(counts):
        flat = store.flat_files.get(TOPIC, qid)
        if hasattr(fetcher, "read"):
            def read(offset: int, flat=flat) -> Any:
                return fetcher.read(flat, offset, count)
        else:
            def read(offset: int, flat=flat) -> Any:
                return flat.read_batch(offset, count, max_bytes)
        offset = 0
        while offset < total:
            got = _batch_len(read(offset))
            if got <= 0:
                raise RuntimeError(f"{TOPIC}/{qid}@{offset}: the fetcher read nothing")
            offset += got
    return time.perf_counter() - start


def time_read_api(store: TieredMessageStore, counts: list[int], batch: int = 32) -> float:
    """Seconds to read every message through ``get_message`` (``batch`` at a time)."""
    start = time.perf_counter()
    for qid, count in enumerate(counts):
        offset = 0
        while offset < count:
            got = store.get_message("bench", TOPIC, qid, offset, batch)
            if got.status is not GetMessageStatus.FOUND or got.tier is not StoreTier.TIERED:
                raise RuntimeError(f"{TOPIC}/{qid}@{offset}: {got.status.name} from {got.tier}")
            offset = got.next_begin_offset
    return time.perf_counter() - start


# -- one implementation ------------------------------------------------------------------------


def run_rounds(args: argparse.Namespace) -> dict[str, Any]:
    """Every round of the bench in this process; the medians as a flat dict."""
    workdir = tempfile.mkdtemp(prefix="tiered-bench-store-", dir=args.workdir)
    if args.driver == "gcs":  # gcsfs probes HNS buckets, which the emulator lacks
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    cls = driver_class(args.driver)
    n = args.messages
    counts = [len(range(q, n, args.queues)) for q in range(args.queues)]
    batch = build_messages(n, args.size, args.queues)
    floor_inputs = put_floor_inputs(batch)
    single = build_messages(args.single_messages, args.size, args.queues)
    fig: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        fig.setdefault(name, []).append(value)

    paused = True
    try:
        with conformance_environment(args.driver, workdir) as env_options:
            options = cls.coerce_options({**env_options, **parse_options(args.option)})
            base = StoreConfig(store_path=workdir, driver=args.driver, driver_options=options, metadata="sqlite",
                               local_commit_log_file_size=256 * MiB,
                               read_ahead_cache_bytes=max(256 * MiB, 2 * n * (args.size + 256)))
            for _ in range(args.rounds):
                # put alone (reput paused), next to its floor
                with open_store(base, workdir) as store:
                    with reput_paused(store) as was_paused:
                        put_s = time_put(store, batch)
                    paused = paused and was_paused
                    put_path = store.config.store_path
                floor_s = time_put_floor(floor_inputs, os.path.join(workdir, "floor-put"))
                shutil.rmtree(put_path, ignore_errors=True)
                add("put", put_s / n)
                add("put_floor", floor_s / n)
                add("put_ratio", floor_s / put_s)
                # put + background reput end to end, then dispatch next to its floor
                with open_store(base, workdir) as store:
                    start = time.perf_counter()
                    time_put(store, batch)
                    wait_reput(store)
                    add("put_reput_msgs_per_s", n / (time.perf_counter() - start))
                    store.local.flush()
                    groups = dispatch_groups(store, args.queues)
                    floor_s = time_dispatch_floor(groups, workdir)
                    dispatch_s, dispatched, dispatch_groups_made = time_dispatch(store, n)
                    store.index.compact_and_upload()
                    config = store.config
                add("dispatch", dispatch_s / n)
                add("dispatch_floor", floor_s / n)
                add("dispatch_ratio", floor_s / dispatch_s)
                add("dispatch_bytes_per_s", dispatched / dispatch_s)
                add("dispatch_groups", dispatch_groups_made)
                add("dispatch_floor_groups", len(groups))
                # cold reads (fetch level, API level) next to their floor, then warm reads
                with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
                    batches = read_batches(store, counts)
                    floor_s = time_read_floor(store, batches)
                    fetch_s = time_fetch(store, counts)
                    store.cache.clear()
                    api_s = time_read_api(store, counts)
                    floor2_s = time_read_floor(store, batches)
                    warm_s = time_read_api(store, counts)
                    if store.cache.stats.hits == 0:
                        raise RuntimeError("the warm read never hit the cache")
                shutil.rmtree(config.store_path, ignore_errors=True)
                add("cold_read_fetch", fetch_s / n)
                add("cold_read_api", api_s / n)
                add("cold_read_floor", (floor_s + floor2_s) / 2 / n)
                add("cold_read_fetch_ratio", floor_s / fetch_s)
                add("cold_read_api_ratio", floor2_s / api_s)
                add("warm_read_msgs_per_s", n / warm_s)
                # one commit per message
                with open_store(base, workdir, group_commit_count=1) as store:
                    time_put(store, single)
                    single_s, _, _ = time_dispatch(store, args.single_messages)
                    single_path = store.config.store_path
                shutil.rmtree(single_path, ignore_errors=True)
                add("group_commit_speedup", (n / dispatch_s) / (args.single_messages / single_s))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in fig.items()}
    us = 1e6
    return {
        "implementation": implementation(),
        "driver": args.driver,
        "messages": n,
        "body_bytes": args.size,
        "queues": args.queues,
        "rounds": args.rounds,
        "put_us_per_msg": round(med["put"] * us, 2),
        "put_floor_us_per_msg": round(med["put_floor"] * us, 2),
        "put_ratio": round(med["put_ratio"], 3),
        "put_msgs_per_s": round(1 / med["put"]),
        "put_reput_paused": paused,
        "put_reput_msgs_per_s": round(med["put_reput_msgs_per_s"]),
        "dispatch_us_per_msg": round(med["dispatch"] * us, 2),
        "dispatch_floor_us_per_msg": round(med["dispatch_floor"] * us, 2),
        "dispatch_ratio": round(med["dispatch_ratio"], 3),
        "dispatch_msgs_per_s": round(1 / med["dispatch"]),
        "dispatch_mib_s": round(med["dispatch_bytes_per_s"] / MiB, 2),
        "dispatch_groups": round(med["dispatch_groups"]),  # group commits made (the floor fsyncs as many)
        "dispatch_floor_groups": round(med["dispatch_floor_groups"]),
        "cold_read_fetch_us_per_msg": round(med["cold_read_fetch"] * us, 2),
        "cold_read_api_us_per_msg": round(med["cold_read_api"] * us, 2),
        "cold_read_floor_us_per_msg": round(med["cold_read_floor"] * us, 2),
        "cold_read_fetch_ratio": round(med["cold_read_fetch_ratio"], 3),
        "cold_read_api_ratio": round(med["cold_read_api_ratio"], 3),
        "cold_read_api_msgs_per_s": round(1 / med["cold_read_api"]),
        "warm_read_msgs_per_s": round(med["warm_read_msgs_per_s"]),
        "group_commit_speedup": round(med["group_commit_speedup"], 1),
    }


def with_checks(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` plus ``checks``: each target of its implementation, the figure, PASS/FAIL."""
    targets = dict(TARGETS.get(result.get("implementation", ""), {}))
    targets["group_commit_speedup"] = 3  # seed 000
    result["checks"] = {name: {"value": result[name], "target": f">= {target}",
                               "result": "PASS" if result[name] >= target else "FAIL"}
                        for name, target in targets.items() if name in result}
    return result


# -- children per implementation ----------------------------------------------------------------


def run_child(impl: str, argv: list[str]) -> dict[str, Any]:
    """This bench in a child process for ``impl`` (``compiled`` or ``pure``); its JSON result."""
    env = dict(os.environ)
    if impl == "pure":
        env[PURE_ENV] = "1"
    else:
        env.pop(PURE_ENV, None)
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--impl", impl, "--json", "--in-process"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"bench for {impl} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def strip_impl(argv: list[str]) -> list[str]:
    """``argv`` without ``--impl``/``--json``/``--in-process`` (the child gets its own)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--impl":
            skip = True
        elif arg.startswith("--impl=") or arg in ("--json", "--in-process"):
            continue
        else:
            out.append(arg)
    return out


def print_text(results: list[dict[str, Any]]) -> None:
    """One block per implementation: every figure, then the targets with PASS/FAIL."""
    for result in results:
        print(f"== {result['implementation']}")
        if not result.get("available", True):
            print(f"   unavailable: {result['reason']}")
            continue
        for key, value in result.items():
            if key != "checks":
                print(f"   {key:34} {value}")
        print("   targets:")
        for name, check in result["checks"].items():
            print(f"   {check['result']:4}  {name:30} {check['value']:>12}  (target {check['target']})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
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
    ap.add_argument("--impl", choices=("both", "compiled", "pure"), default="both",
                    help="implementation(s) to measure, each in a child process (pure: TIERED_PURE_PYTHON=1)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if min(args.messages, args.size, args.queues, args.single_messages, args.rounds) <= 0:
        sys.exit("--messages, --size, --queues, --single-messages and --rounds must be > 0")

    if args.in_process:  # a child: this process's environment decides the implementation
        if args.impl == "compiled" and implementation() != "compiled":
            why = (f"{PURE_ENV}=1 is set" if os.environ.get(PURE_ENV) == "1"
                   else "tiered_core._speedups is not importable (not built)")
            result = {"implementation": "compiled", "available": False, "reason": why}
        else:
            result = with_checks(run_rounds(args))
        print(json.dumps(result, indent=2))
        return 0

    impls = ("compiled", "pure") if args.impl == "both" else (args.impl,)
    results = [run_child(impl, strip_impl(argv)) for impl in impls]
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else {"impl": "both", "results": results}, indent=2))
    else:
        print_text(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
