"""Soak: a TieredMessageStore under load, SIGKILLed and restarted every ``--kill-every`` seconds.

    python bench/soak.py --minutes 10 --json            # the acceptance run (POSIX, SQLite metadata)
    python bench/soak.py --minutes 1 --kill-every 5     # a short development run

The harness (this process) starts a child process that opens the store with
``TieredMessageStore.open(config, background=True)`` (POSIX driver, SQLite metadata,
small local commit-log files, local retention at 0 hours, small tiered segments, a
short group-commit interval) in a work directory (``--dir``, or a temporary one) and runs

* producer threads: ``put_message`` of messages with unique keys (``r{run}p{thread}n{seq}``)
  to every queue of ``--topics`` x ``--queues``; the body carries the key, the sequence
  number and filler derived from the key. After each put that returned PUT_OK the child
  appends ``topic queue offset key`` to its ack log with one plain ``write()`` (the page
  cache survives SIGKILL; a record torn by the kill counts as not acknowledged);
* consumer threads: read every queue forward with ``get_message`` from the offset they
  committed before the last kill, check order (queue offsets contiguous, ``next_begin_offset``)
  and contents (body derived from the key, topic and queue), and log what they saw;
* a maintenance thread: local retention (``delete_expired_local``), key-index roll and
  ``index.compact_and_upload()``, and ``query_message`` lookups of random acknowledged keys
  (of this run, aged a little, and of earlier runs);
* the background dispatcher and index service of the store itself.

The harness SIGKILLs the child after ``--kill-every`` seconds of uptime (+- ``--jitter``;
``--kill-during-open`` of the kills land while it is still starting) and starts a new one
on the same directories, until ``--minutes`` are over; the last child is SIGKILLed too.
Then a verifier process opens the store, dispatches everything (``dispatch(force=True)``),
deletes every local commit-log file that is tiered (retention with a far-future clock),
reopens it with storage level FORCE and reads every queue from offset 0, which must be
served by the tiered store, and compares with the ack logs and the consumer logs.

Figures (``--json`` prints them as one object):

* ``acknowledged``: puts answered PUT_OK whose ack record was written; ``read_back``: of
  those, found at the offset the put returned; ``lost``: acknowledged, found nowhere;
  ``misplaced``: found at another offset; ``duplicated``: keys found at two offsets or
  more; ``corrupted``: messages read back whose topic, queue, offset, key or body is wrong;
  ``unacknowledged_found``: messages whose ack record the kill prevented (not a loss);
* ``consumed_vanished``: (queue, offset, key) a consumer read during the run that the final
  store does not hold; ``order_violations``: consumer reads out of order or with a gap;
  ``consumer_told_to_skip``: OFFSET_TOO_SMALL / OFFSET_OVERFLOW_BADLY answers at offsets the
  store holds;
* ``key_lookups``: ``query_message`` results during the run and in the final verify
  (a sample of ``--verify-lookups`` acknowledged keys, or every key with ``all``);
* ``restarts`` (SIGKILL + restart), ``put_msgs_per_s`` (acknowledged puts per second of child
  uptime), ``final_verify_s``, and the maintenance the run did (local files deleted,
  index files uploaded, dispatch and log errors).

Exit code 0 only when nothing was lost, duplicated, misplaced or corrupted, no consumer
saw a message vanish or an order violation, every key lookup succeeded and the final
verify completed; 1 otherwise; 2 when the store refused to open (printed as
``open_failed``: a finding, the soak stops there) or a child died by itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib
from collections import Counter
from typing import Any, Iterator

FAR_FUTURE_MS = 1 << 50
SETTINGS_FILE = "soak.json"
CONFIG_FILE = "tiered.toml"
GROUP = "soak"
EXIT_FINDING = 2
#: Child exit code when TieredMessageStore.open raised a typed error.
CHILD_OPEN_FAILED = 3
#: Event kinds that fail the soak (see the module doc).
FAILING_EVENTS = ("order_violation", "corrupt_read", "duplicate_read", "told_to_skip", "max_went_back",
                  "lookup_failed")


# -- messages -------------------------------------------------------------------------


def body_of(key: str, min_size: int, max_size: int) -> bytes:
    """The body of the message with ``key`` (``r{run}p{thread}n{seq}``): the key, the
    sequence number, then the key repeated, to a size derived from the key."""
    seq = key.rsplit("n", 1)[1]
    head = f"{key}|{seq}|".encode()
    size = min_size + zlib.crc32(key.encode()) % (max_size - min_size + 1)
    fill = (key + "/").encode()
    return (head + fill * (size // len(fill) + 1))[:max(size, len(head))]


def queue_list(settings: dict[str, Any]) -> list[tuple[str, int]]:
    return [(f"soak-{t}", q) for t in range(settings["topics"]) for q in range(settings["queues"])]


def store_config(work: str, settings: dict[str, Any]):
    from tiered_core import StoreConfig

    return StoreConfig(
        store_path=os.path.join(work, "store"),
        driver="posix",
        driver_options={"root": os.path.join(work, "tiered")},
        metadata="sqlite",
        local_commit_log_file_size=settings["local_file_size"],
        local_retention_hours=0,  # every tiered, non-active local file may go at once
        commit_log_max_size=settings["tiered_segment_size"],
        consume_queue_max_size=20 * settings["tiered_cq_units"],
        rolling_min_size=0,
        group_commit_count=settings["group_commit_count"],
        group_commit_interval_ms=settings["group_commit_interval_ms"],
        read_ahead_cache_bytes=32 << 20,
    )


# -- logs the child writes and the verifier reads -------------------------------------


class AppendLog:
    """A file written with one ``os.write`` per record (O_APPEND): what a write returned for
    is in the page cache and survives SIGKILL."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]


class Events:
    """Anomalies, one JSON line each, written at once (they must survive the kill)."""

    def __init__(self, path: str) -> None:
        self.log = AppendLog(path)
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def emit(self, kind: str, **fields: Any) -> None:
        with self._lock:
            self.counts[kind] += 1
            if self.counts[kind] <= 200:  # details of the first ones; the count is in the stats
                self.log.write((json.dumps({"kind": kind, "t": time.time(), **fields}, default=str) + "\n").encode())


def parse_lines(path: str, fields: int) -> Iterator[list[str]]:
    """Whole records of an ack or consumer log; a line the kill tore is skipped."""
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                continue  # torn by SIGKILL
            parts = raw.decode(errors="replace").split()
            if len(parts) == fields:
                yield parts


def log_files(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log"))


# -- the child: load, maintenance, lookups ----------------------------------------------


class Child:
    def __init__(self, work: str, run: int, settings: dict[str, Any]) -> None:
        self.work, self.run, self.s = work, run, settings
        self.queues = queue_list(settings)
        self.stop = threading.Event()
        self.events = Events(os.path.join(work, "events", f"run-{run:04d}.log"))
        self.counters: Counter[str] = Counter()
        self._counter_lock = threading.Lock()
        # acknowledged puts of this run, for lookups: a ring of (topic, qid, offset, key, monotonic)
        self._recent: list[tuple[str, int, int, str, float]] = []
        self._recent_next = 0
        self._recent_lock = threading.Lock()
        self.store = None

    def count(self, name: str, n: int = 1) -> None:
        with self._counter_lock:
            self.counters[name] += n

    def body(self, key: str) -> bytes:
        return body_of(key, self.s["min_size"], self.s["max_size"])

    # -- producers ----------------------------------------------------------------

    def producer(self, index: int) -> None:
        from tiered_core import Message
        from tiered_core.access.results import PutMessageStatus

        rng = random.Random(f"{self.s['seed']}-{self.run}-p{index}")
        acks = AppendLog(os.path.join(self.work, "acks", f"run-{self.run:04d}-p{index}.log"))
        per_thread = self.s["rate"] / self.s["producers"] if self.s["rate"] > 0 else 0
        next_at = time.monotonic()
        seq = 0
        while not self.stop.is_set():
            if per_thread:
                next_at += 1.0 / per_thread
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -1.0:
                    next_at = time.monotonic()  # fell behind: do not burst to catch up
            topic, qid = rng.choice(self.queues)
            key = f"r{self.run}p{index}n{seq}"
            seq += 1
            msg = Message(topic=topic, body=self.body(key), keys=[key], tags=f"t{seq % 4}")
            try:
                res = self.store.put_message(msg, qid)
            except Exception as exc:  # noqa: BLE001 - reported, the soak goes on
                self.events.emit("put_error", key=key, error=repr(exc))
                self.count("put_errors")
                time.sleep(0.1)
                continue
            if res.status is not PutMessageStatus.PUT_OK:
                self.events.emit("put_not_ok", key=key, status=res.status.name)
                self.count("put_not_ok")
                continue
            acks.write(f"{topic} {qid} {res.queue_offset} {key}\n".encode())
            self.count("acked")
            with self._recent_lock:
                item = (topic, qid, res.queue_offset, key, time.monotonic())
                if len(self._recent) < 50_000:
                    self._recent.append(item)
                else:
                    self._recent[self._recent_next] = item
                    self._recent_next = (self._recent_next + 1) % len(self._recent)

    # -- consumers ----------------------------------------------------------------

    def _check_batch(self, q: tuple[str, int], offset: int, got: Any, seen: dict[str, tuple[str, int, int]],
                     once: Any, log: AppendLog) -> int:
        """Check a FOUND answer for ``offset`` of queue ``q`` and log what was read; returns
        the offset to read next."""
        topic, qid = q
        expect = offset
        lines = []
        for m in got.messages:
            if m.queue_offset != expect:
                once("order_violation", q, expect, got=m.queue_offset, requested=offset)
            key = m.keys[0] if m.keys else ""
            if (m.topic, m.queue_id) != q or not key or m.body != self.body(key):
                once("corrupt_read", q, m.queue_offset, key=key, topic_read=m.topic,
                     queue_read=m.queue_id, tier=getattr(got.tier, "value", None))
            where = (topic, qid, m.queue_offset)
            prev = seen.get(key)
            if prev is not None and prev != where:
                once("duplicate_read", q, m.queue_offset, key=key, first=prev)
            seen[key] = where
            lines.append(f"{topic} {qid} {m.queue_offset} {key}\n")
            expect = m.queue_offset + 1
        log.write("".join(lines).encode())
        self.count("consumed", len(got.messages))
        self.count(f"consumed_{getattr(got.tier, 'value', 'unknown')}", len(got.messages))
        if got.next_begin_offset != expect:
            once("order_violation", q, offset, next_begin_offset=got.next_begin_offset, expected=expect)
        return max(expect, offset + 1)

    def _reporter(self) -> Any:
        reported: set[tuple[str, tuple[str, int], int]] = set()

        def once(kind: str, q: tuple[str, int], offset: int, **fields: Any) -> None:
            if (kind, q, offset) not in reported:
                reported.add((kind, q, offset))
                self.events.emit(kind, topic=q[0], queue=q[1], offset=offset, **fields)
        return once

    def _read(self, q: tuple[str, int], offset: int, once: Any) -> Any:
        from tiered_core.access.results import GetMessageStatus

        try:
            got = self.store.get_message(GROUP, q[0], q[1], offset, 32)
        except Exception as exc:  # noqa: BLE001
            once("read_error", q, offset, error=repr(exc))
            self.count("read_errors")
            return None
        if got.status is GetMessageStatus.OFFSET_TOO_SMALL:
            # never right here: nothing expires from the tiered store during the soak
            once("told_to_skip", q, offset, status=got.status.name, next_begin_offset=got.next_begin_offset,
                 min_offset=got.min_offset)
            self.count("told_to_skip")
        elif got.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY:
            # the queue ends before what this consumer (or its predecessor) already read
            once("max_went_back", q, offset, max_offset=got.max_offset)
            self.count("max_went_back")
        elif got.status is GetMessageStatus.OFFSET_FOUND_NULL:
            self.count("found_null")  # "try again": transient
        return got if got.status is GetMessageStatus.FOUND and got.messages else None

    def consumer(self, index: int) -> None:
        """Read my queues forward from the committed offsets, committing as I go."""
        mine = self.queues[index::self.s["consumers"]]
        log = AppendLog(os.path.join(self.work, "consumed", f"run-{self.run:04d}-c{index}.log"))
        offsets = {q: self._committed_offset(*q) for q in mine}
        offset_fds = {q: os.open(self._offset_path(*q), os.O_RDWR | os.O_CREAT, 0o644) for q in mine}
        seen: dict[str, tuple[str, int, int]] = {}
        once = self._reporter()
        while not self.stop.is_set():
            busy = False
            for q in mine:
                got = self._read(q, offsets[q], once)
                if got is None:
                    continue
                busy = True
                offsets[q] = self._check_batch(q, offsets[q], got, seen, once, log)
                # the consumer's committed offset: one small pwrite, survives the kill
                os.pwrite(offset_fds[q], b"%020d\n" % offsets[q], 0)
            if not busy:
                time.sleep(0.05)

    def replayer(self, index: int) -> None:
        """Re-read history: a random queue from a random offset, a few batches at a time
        (most of it is only in the tiered store once local retention ran)."""
        rng = random.Random(f"{self.s['seed']}-{self.run}-replay{index}")
        log = AppendLog(os.path.join(self.work, "consumed", f"run-{self.run:04d}-r{index}.log"))
        seen: dict[str, tuple[str, int, int]] = {}
        once = self._reporter()
        while not self.stop.is_set():
            q = rng.choice(self.queues)
            try:
                lo = self.store.get_min_offset_in_queue(*q)
                hi = self.store.get_max_offset_in_queue(*q)
            except Exception as exc:  # noqa: BLE001
                once("read_error", q, -1, error=repr(exc))
                time.sleep(0.1)
                continue
            if hi <= lo:
                time.sleep(0.1)
                continue
            offset = rng.randrange(lo, hi)
            for _ in range(self.s["replay_batches"]):
                got = self._read(q, offset, once)
                if got is None or self.stop.is_set():
                    break
                offset = self._check_batch(q, offset, got, seen, once, log)
            if len(seen) > 200_000:
                seen.clear()
            time.sleep(0.01)

    def _offset_path(self, topic: str, qid: int) -> str:
        return os.path.join(self.work, "consumer-offsets", f"{topic}-{qid}")

    def _committed_offset(self, topic: str, qid: int) -> int:
        try:
            with open(self._offset_path(topic, qid), "rb") as fh:
                return int(fh.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    # -- maintenance --------------------------------------------------------------

    def earlier_keys(self, n: int) -> list[tuple[str, int, int, str]]:
        """Up to ``n`` acknowledged keys of earlier runs (random seeks into their ack logs)."""
        rng = random.Random(f"{self.s['seed']}-{self.run}-earlier")
        files = [f for f in log_files(os.path.join(self.work, "acks"))
                 if not os.path.basename(f).startswith(f"run-{self.run:04d}-")]
        sizes = [os.path.getsize(f) for f in files]
        out = []
        if not files or not sum(sizes):
            return out
        handles = {}
        try:
            for _ in range(n * 2):
                path = rng.choices(files, weights=sizes)[0]
                fh = handles.get(path) or handles.setdefault(path, open(path, "rb"))
                fh.seek(rng.randrange(max(1, os.path.getsize(path))))
                fh.readline()  # the rest of a line
                parts = fh.readline().split()
                if len(parts) == 4:
                    out.append((parts[0].decode(), int(parts[1]), int(parts[2]), parts[3].decode()))
                if len(out) >= n:
                    break
        finally:
            for fh in handles.values():
                fh.close()
        return out

    def lookup(self, topic: str, qid: int, offset: int, key: str, source: str) -> None:
        self.count(f"lookups_{source}")
        try:
            found = self.store.query_message(topic, key, 4).messages
        except Exception as exc:  # noqa: BLE001
            self.events.emit("lookup_failed", topic=topic, queue=qid, offset=offset, key=key, source=source,
                             error=repr(exc))
            self.count("lookups_failed")
            return
        hits = [m for m in found if key in m.keys]
        if (len(hits) == 1 and hits[0].queue_id == qid and hits[0].queue_offset == offset
                and hits[0].body == self.body(key)):
            self.count("lookups_ok")
        else:
            self.events.emit("lookup_failed", topic=topic, queue=qid, offset=offset, key=key, source=source,
                             found=[(m.queue_id, m.queue_offset, m.keys) for m in found])
            self.count("lookups_failed")

    def maintenance(self) -> None:
        rng = random.Random(f"{self.s['seed']}-{self.run}-m")
        earlier = self.earlier_keys(self.s["lookups_per_s"] * 30)
        now = time.monotonic()
        next_retention = now + self.s["retention_every"]
        next_index = now + self.s["index_roll_every"]
        while not self.stop.wait(0.25):
            now = time.monotonic()
            try:
                if now >= next_retention:
                    next_retention = now + self.s["retention_every"]
                    self.count("local_files_deleted", self.store.delete_expired_local(time.time_ns() // 1_000_000))
                    self.count("retention_rounds")
                if now >= next_index:
                    next_index = now + self.s["index_roll_every"]
                    self.store.index.roll_file()
                    self.count("index_uploads", self.store.index.compact_and_upload())
                    self.count("index_rolls")
            except Exception as exc:  # noqa: BLE001
                self.events.emit("maintenance_error", error=repr(exc), trace=traceback.format_exc())
                self.count("maintenance_errors")
            for _ in range(max(1, self.s["lookups_per_s"] // 4)):
                if earlier and rng.random() < 0.5:
                    self.lookup(*earlier.pop(rng.randrange(len(earlier))), source="earlier_run")
                    continue
                with self._recent_lock:
                    if not self._recent:
                        break
                    item = self._recent[rng.randrange(len(self._recent))]
                if now - item[4] >= 2.0:  # reput and index have had time
                    self.lookup(*item[:4], source="this_run")

    # -- main -------------------------------------------------------------------------

    def stats_line(self) -> bytes:
        with self._counter_lock:
            counts = dict(self.counters)
        counts.update({f"event_{k}": v for k, v in self.events.counts.items()})
        return b"stats " + json.dumps(counts).encode() + b"\n"

    def main(self) -> int:
        from tiered_core.access.store import TieredMessageStore
        from tiered_core.errors import TieredStoreError

        events, count = self.events, self.count

        class ErrorsToEvents(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                events.emit("log_error", logger=record.name, message=record.getMessage()[:500])
                # grouped by the unformatted message: what kind of error, how often
                count(f"log_error {record.name}: {str(record.msg)[:70]}")

        logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                            format="%(asctime)s %(threadName)s %(levelname)s %(name)s: %(message)s")
        handler = ErrorsToEvents(level=logging.ERROR)
        logging.getLogger().addHandler(handler)

        config = store_config(self.work, self.s)
        os.write(1, b"opening\n")
        t0 = time.perf_counter()
        try:
            self.store = TieredMessageStore.open(config, background=True)
        except TieredStoreError as exc:
            os.write(1, b"open_failed " + json.dumps({
                "run": self.run, "type": type(exc).__name__, "code": exc.code.value, "message": str(exc),
                "context": {k: str(v) for k, v in getattr(exc, "context", {}).items()}}).encode() + b"\n")
            return CHILD_OPEN_FAILED
        open_s = time.perf_counter() - t0
        # Where dispatch resumes after the kill: the groups just below were committed last,
        # so the verifier looks up every key there (see verify()).
        with open(os.path.join(self.work, "starts", f"run-{self.run:04d}.json"), "w") as fh:
            json.dump({f"{r.topic} {r.queue_id}": r.tiered_commit for r in self.store.stat()}, fh)
        os.write(1, b"ready %.3f\n" % open_s)
        threads = [threading.Thread(target=self.producer, args=(i,), name=f"producer-{i}", daemon=True)
                   for i in range(self.s["producers"])]
        threads += [threading.Thread(target=self.consumer, args=(i,), name=f"consumer-{i}", daemon=True)
                    for i in range(self.s["consumers"])]
        threads += [threading.Thread(target=self.replayer, args=(i,), name=f"replayer-{i}", daemon=True)
                    for i in range(self.s["replayers"])]
        threads.append(threading.Thread(target=self.maintenance, name="maintenance", daemon=True))
        for t in threads:
            t.start()
        while True:  # until SIGKILL
            time.sleep(1.0)
            os.write(1, self.stats_line())


# -- the verifier -------------------------------------------------------------------------


def verify(work: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Open after the last kill, tier everything, delete the local copy, read every queue
    from the tiered store and compare with the ack and consumer logs."""
    from tiered_core.access.results import GetMessageStatus
    from tiered_core.access.store import TieredMessageStore
    from tiered_core.errors import TieredStoreError

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    t_start = time.perf_counter()
    out: dict[str, Any] = {}
    config = store_config(work, settings)

    def body(key: str) -> bytes:
        return body_of(key, settings["min_size"], settings["max_size"])

    # 1. everything acknowledged, from the ack logs
    acked: dict[str, tuple[str, int, int]] = {}
    for path in log_files(os.path.join(work, "acks")):
        for topic, qid, offset, key in parse_lines(path, 4):
            acked[key] = (topic, int(qid), int(offset))

    # 2. open, tier everything, delete every tiered local file
    try:
        store = TieredMessageStore.open(config)
    except TieredStoreError as exc:
        return {"open_failed": {"phase": "verify", "type": type(exc).__name__, "code": exc.code.value,
                                "message": str(exc)}}
    try:
        dispatch_errors: list[str] = []
        rounds = 0
        for rounds in range(1, 201):
            stats = store.dispatch(force=True)
            dispatch_errors += stats.errors
            if not stats.messages and not stats.failed_commits:
                break
        deleted = 0
        while True:
            n = store.delete_expired_local(FAR_FUTURE_MS)
            deleted += n
            if not n:
                break
        stat = store.stat()
        out["final_dispatch"] = {"rounds": rounds, "errors": dispatch_errors[:20], "error_count": len(dispatch_errors),
                                 "local_files_deleted": deleted}
        out["untiered_queues"] = [f"{r.topic}/{r.queue_id}: tiered {r.tiered_commit} < local {r.local_max}"
                                  for r in stat if r.tiered_commit < r.local_max]
        out["local_messages_left"] = sum(max(0, r.local_max - r.local_min) for r in stat)
        queues = sorted({(r.topic, r.queue_id) for r in stat} | {(t, q) for t, q, _ in acked.values()})
    finally:
        store.close()

    # 3. read every queue from 0 through the tiered store only
    found_at: dict[tuple[str, int, int], str] = {}
    stored_at: dict[str, int] = {}
    key_at: dict[str, tuple[str, int, int]] = {}
    duplicated: list[dict[str, Any]] = []
    corrupted: list[dict[str, Any]] = []
    gaps: list[dict[str, Any]] = []
    tiers: Counter[str] = Counter()
    duplicate_count = corrupt_count = gap_count = 0
    t_read = time.perf_counter()
    try:
        store = TieredMessageStore.open(config.replace(storage_level="FORCE"))
    except TieredStoreError as exc:
        return {"open_failed": {"phase": "verify-reopen", "type": type(exc).__name__, "code": exc.code.value,
                                "message": str(exc)}}
    try:
        for topic, qid in queues:
            end = store.get_max_offset_in_queue(topic, qid)
            offset = 0
            while offset < end:
                got = store.get_message("verify", topic, qid, offset, 64)
                if got.status is not GetMessageStatus.FOUND or not got.messages:
                    gap_count += 1
                    if len(gaps) < 20:
                        gaps.append({"queue": f"{topic}/{qid}", "offset": offset, "status": got.status.name})
                    offset += 1
                    continue
                tiers[getattr(got.tier, "value", "unknown")] += len(got.messages)
                expect = offset
                for m in got.messages:
                    key = m.keys[0] if m.keys else ""
                    where = (topic, qid, m.queue_offset)
                    ok = (m.queue_offset == expect and (m.topic, m.queue_id) == (topic, qid) and key
                          and m.body == body(key))
                    if not ok:
                        corrupt_count += 1
                        if len(corrupted) < 20:
                            corrupted.append({"queue": f"{topic}/{qid}", "offset": expect, "read_offset": m.queue_offset,
                                              "key": key, "topic": m.topic, "queue_id": m.queue_id})
                    if key in key_at:
                        duplicate_count += 1
                        if len(duplicated) < 20:
                            duplicated.append({"key": key, "first": key_at[key], "again": where})
                    else:
                        key_at[key] = where
                    found_at.setdefault(where, key)
                    stored_at.setdefault(key, m.store_timestamp)
                    expect = m.queue_offset + 1
                offset = max(expect, offset + 1)
            past = store.get_message("verify", topic, qid, end, 1)
            if past.status is not GetMessageStatus.OFFSET_OVERFLOW_ONE and end > 0:
                gaps.append({"queue": f"{topic}/{qid}", "offset": end, "status": past.status.name,
                             "note": "reading past the end"})
        read_s = time.perf_counter() - t_read

        # 4. compare with the ack logs
        lost: list[dict[str, Any]] = []
        misplaced: list[dict[str, Any]] = []
        lost_count = misplaced_count = read_back = 0
        for key, where in acked.items():
            at = key_at.get(key)
            if at is None:
                lost_count += 1
                if len(lost) < 20:
                    lost.append({"key": key, "acked_at": where})
            elif at != where and found_at.get(where) != key:
                misplaced_count += 1
                if len(misplaced) < 20:
                    misplaced.append({"key": key, "acked_at": where, "found_at": at})
            else:
                read_back += 1
        unacked = sum(1 for k in key_at if k not in acked)

        # 5. what consumers saw during the run must still be there
        consumed = vanished = 0
        vanished_examples: list[dict[str, Any]] = []
        for path in log_files(os.path.join(work, "consumed")):
            for topic, qid, offset, key in parse_lines(path, 4):
                consumed += 1
                where = (topic, int(qid), int(offset))
                if found_at.get(where) != key:
                    vanished += 1
                    if len(vanished_examples) < 20:
                        vanished_examples.append({"consumed": [*where, key], "now": found_at.get(where)})

        # 6. key lookups, from the tiered index only (storage level FORCE; the local copy is gone):
        #    a random sample over the whole time range, and every key of the last groups
        #    dispatched before each kill (dispatch resumes at the tiered commit offset the
        #    child found at open), in a window around the message's store time
        rng = random.Random(f"{settings['seed']}-verify")
        keys = sorted(k for k in acked if k in key_at)
        n = len(keys) if settings["verify_lookups"] < 0 else min(settings["verify_lookups"], len(keys))
        sample = keys if n == len(keys) else rng.sample(keys, n)
        at_restart: set[str] = set()
        starts = os.path.join(work, "starts")
        for path in sorted(os.path.join(starts, f) for f in os.listdir(starts) if f.endswith(".json")):
            try:
                with open(path) as fh:
                    points = json.load(fh)
            except ValueError:
                continue  # the kill tore it
            for name, commit in points.items():
                topic, qid = name.split()
                for off in range(max(0, commit - settings["group_commit_count"]), commit):
                    key = found_at.get((topic, int(qid), off))
                    if key is not None:
                        at_restart.add(key)

        def lookups(keys: list[str], window: bool) -> dict[str, Any]:
            t0 = time.perf_counter()
            ok = failed = 0
            failures: list[dict[str, Any]] = []
            for key in keys:
                topic, qid, offset = key_at[key]
                if window:
                    ts = stored_at[key]
                    found = store.query_message(topic, key, 4, begin=ts - 1000, end=ts + 1000).messages
                else:
                    found = store.query_message(topic, key, 4).messages
                hits = [m for m in found if key in m.keys]
                if len(hits) == 1 and (hits[0].queue_id, hits[0].queue_offset) == (qid, offset) \
                        and hits[0].body == body(key):
                    ok += 1
                else:
                    failed += 1
                    if len(failures) < 20:
                        failures.append({"key": key, "at": [topic, qid, offset],
                                         "found": [(m.queue_id, m.queue_offset) for m in hits]})
            return {"ok": ok, "failed": failed, "seconds": round(time.perf_counter() - t0, 2),
                    "failures": failures}

        lookup_sample = lookups(sample, window=False)
        lookup_restart = lookups(sorted(at_restart), window=True)
    finally:
        store.close()

    out.update({
        "queues": len(queues),
        "acknowledged": len(acked),
        "read_back": read_back,
        "lost": lost_count,
        "misplaced": misplaced_count,
        "duplicated": duplicate_count,
        "corrupted": corrupt_count,
        "unreadable_offsets": gap_count,
        "unacknowledged_found": unacked,
        "messages_in_store": len(found_at),
        "served_by_tier": dict(tiers),
        "consumed_records": consumed,
        "consumed_vanished": vanished,
        "key_lookups": {"sample": {k: v for k, v in lookup_sample.items() if k != "failures"},
                        "at_restart_points": {k: v for k, v in lookup_restart.items() if k != "failures"}},
        "read_s": round(read_s, 2),
        "verify_s": round(time.perf_counter() - t_start, 2),
        "examples": {k: v for k, v in {"lost": lost, "misplaced": misplaced, "duplicated": duplicated,
                                       "corrupted": corrupted, "unreadable": gaps,
                                       "consumed_vanished": vanished_examples,
                                       "lookup_failed": lookup_sample["failures"] + lookup_restart["failures"],
                                       }.items() if v},
    })
    return out


# -- the harness --------------------------------------------------------------------------


class ChildProcess:
    """One child: its stdout lines arrive on a queue (``ready``, ``stats``, ``open_failed``)."""

    def __init__(self, work: str, run: int) -> None:
        self.run = run
        self.stderr_path = os.path.join(work, "logs", f"run-{run:04d}.stderr")
        self.stderr = open(self.stderr_path, "wb")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "child", "--dir", work,
                                      "--run", str(run)], stdout=subprocess.PIPE, stderr=self.stderr, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.opening_at: float | None = None
        self.ready_at: float | None = None
        self.open_s: float | None = None
        self.stats: dict[str, int] = {}
        self.open_failed: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)

    def poll_lines(self, timeout: float) -> bool:
        """Handle the lines that arrive within ``timeout``; False once stdout closed."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return True
            if line is None:
                return False
            word, _, rest = line.partition(" ")
            if word == "opening":
                self.opening_at = time.monotonic()
            elif word == "ready":
                self.ready_at = time.monotonic()
                self.open_s = float(rest)
            elif word == "stats":
                self.stats = json.loads(rest)
            elif word == "open_failed":
                self.open_failed = json.loads(rest)
            if time.monotonic() >= deadline:
                return True

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        code = self.proc.wait()
        self._reader.join(timeout=10)
        self.poll_lines(0)
        self.stderr.close()
        return code

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            with open(self.stderr_path, "rb") as fh:
                return fh.read()[-n:].decode(errors="replace")
        except OSError:
            return ""


def say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(f"[soak {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def harness(args: argparse.Namespace) -> int:
    settings = {k: getattr(args, k) for k in (
        "topics", "queues", "producers", "consumers", "rate", "min_size", "max_size", "seed",
        "local_file_size", "tiered_segment_size", "tiered_cq_units", "group_commit_count",
        "group_commit_interval_ms", "retention_every", "index_roll_every", "lookups_per_s",
        "replayers", "replay_batches")}
    settings["verify_lookups"] = -1 if args.verify_lookups == "all" else int(args.verify_lookups)
    if args.dir:
        work = os.path.abspath(args.dir)
        if os.path.exists(work) and os.listdir(work):
            print(f"soak: --dir {work} is not empty (every run starts from an empty store)", file=sys.stderr)
            return EXIT_FINDING
        os.makedirs(work, exist_ok=True)
    else:
        work = tempfile.mkdtemp(prefix="tiered-soak-")
    for sub in ("acks", "consumed", "consumer-offsets", "events", "logs", "starts"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    with open(os.path.join(work, SETTINGS_FILE), "w") as fh:
        json.dump(settings, fh, indent=1)
    with open(os.path.join(work, CONFIG_FILE), "w") as fh:
        fh.write(store_config(work, settings).to_toml())  # for inspection: the children build the same
    say(args, f"work directory {work}; {args.minutes} min, SIGKILL every {args.kill_every} s")

    rng = random.Random(f"{args.seed}-harness")
    t_begin = time.monotonic()
    deadline = t_begin + args.minutes * 60
    runs: list[dict[str, Any]] = []
    totals: Counter[str] = Counter()
    finding: dict[str, Any] | None = None
    kills = kills_before_ready = 0
    uptime = 0.0
    run = 0
    child: ChildProcess | None = None
    try:
        while time.monotonic() < deadline and finding is None:
            child = ChildProcess(work, run)
            during_open = rng.random() < args.kill_during_open
            while (child.ready_at is None and not (during_open and child.opening_at is not None)
                   and time.monotonic() - child.started < args.open_timeout):
                if not child.poll_lines(0.01) or child.proc.poll() is not None:
                    break
            if during_open and child.opening_at is not None and child.ready_at is None:
                # inside TieredMessageStore.open (recovery): somewhere in a typical open's time
                typical = sorted(r["open_s"] for r in runs if r["open_s"] is not None)
                span = typical[len(typical) // 2] if typical else 0.1
                kill_at = child.opening_at + rng.uniform(0.0, 1.5 * span)
            else:
                if child.ready_at is None:
                    child.kill()
                    finding = {"run": run, "problem": "the child did not open the store",
                               "exit_code": child.proc.returncode, "open_failed": child.open_failed,
                               "stderr_tail": child.stderr_tail()}
                    break
                span = args.kill_every * rng.uniform(1 - args.jitter, 1 + args.jitter)
                kill_at = min(child.ready_at + span, deadline)
            alive = True
            while time.monotonic() < kill_at:
                alive = child.poll_lines(min(0.5, max(0.0, kill_at - time.monotonic())))
                if not alive or child.proc.poll() is not None:
                    break
            exited_by_itself = child.proc.poll() is not None
            code = child.kill()
            if exited_by_itself or code != -signal.SIGKILL:
                finding = {"run": run, "problem": "the child stopped by itself", "exit_code": code,
                           "open_failed": child.open_failed, "stderr_tail": child.stderr_tail()}
                break
            kills += 1
            if child.ready_at is None:
                kills_before_ready += 1
            else:
                uptime += time.monotonic() - child.ready_at
            totals.update(child.stats)
            runs.append({"run": run, "open_s": child.open_s, "acked": child.stats.get("acked", 0),
                         "killed_before_ready": child.ready_at is None})
            say(args, f"kill #{kills}: run {run} {'(while opening) ' if child.ready_at is None else ''}"
                      f"open {child.open_s if child.open_s is not None else '-'} s, "
                      f"acked ~{child.stats.get('acked', 0):,}, consumed ~{child.stats.get('consumed', 0):,}, "
                      f"local files deleted {child.stats.get('local_files_deleted', 0)}, "
                      f"index uploads {child.stats.get('index_uploads', 0)}, "
                      f"events {({k[6:]: v for k, v in child.stats.items() if k.startswith('event_')})}")
            run += 1
            child = None
    finally:
        if child is not None and child.proc.poll() is None:
            child.kill()
    run_s = time.monotonic() - t_begin

    events: Counter[str] = Counter()
    event_examples: dict[str, list[dict[str, Any]]] = {}
    for path in log_files(os.path.join(work, "events")):
        with open(path, "rb") as fh:
            for raw in fh:
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue  # torn by the kill
                events[ev["kind"]] += 1
                if len(event_examples.setdefault(ev["kind"], [])) < 5:
                    event_examples[ev["kind"]].append(ev)
    # the counts in the stats lines run up to one second before each kill; the event logs
    # hold every event written before it: take the larger
    for kind in list(events):
        events[kind] = max(events[kind], totals.get(f"event_{kind}", 0))

    result: dict[str, Any] = {
        "minutes": args.minutes, "kill_every_s": args.kill_every, "run_s": round(run_s, 1),
        "restarts": kills, "kills_while_opening": kills_before_ready, "child_runs": len(runs),
        "topics": args.topics, "queues": args.queues, "work_dir": work,
    }
    verified: dict[str, Any] = {}
    if finding is None:
        say(args, "final verify: dispatch everything, delete the local copy, read back from the tiered store")
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--role", "verify", "--dir", work],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("result ")), None)
        if proc.returncode != 0 or line is None:
            finding = {"problem": "the final verify failed", "exit_code": proc.returncode,
                       "stderr_tail": proc.stderr[-3000:]}
        else:
            verified = json.loads(line[len("result "):])
            if "open_failed" in verified:
                finding = {"problem": "the store refused to open for the final verify", **verified}
                verified = {}
    open_times = [r["open_s"] for r in runs if r["open_s"] is not None]
    lookups_run = {"ok": totals.get("lookups_ok", 0),
                   "failed": max(totals.get("lookups_failed", 0), events.get("lookup_failed", 0)),
                   "of_this_run_keys": totals.get("lookups_this_run", 0),
                   "of_earlier_run_keys": totals.get("lookups_earlier_run", 0)}
    if verified:
        result.update({k: verified[k] for k in ("acknowledged", "read_back", "lost", "duplicated", "corrupted",
                                                "misplaced", "unreadable_offsets", "unacknowledged_found",
                                                "messages_in_store", "consumed_vanished", "served_by_tier")})
        result["key_lookups"] = {"during_run": lookups_run, "final": verified["key_lookups"]}
        result["put_msgs_per_s"] = round(verified["acknowledged"] / uptime, 1) if uptime else 0.0
        result["final_verify_s"] = verified["verify_s"]
        result["final_dispatch"] = verified["final_dispatch"]
        result["untiered_queues"] = verified["untiered_queues"]
    else:
        result["key_lookups"] = {"during_run": lookups_run}
    result.update({
        "consumed": totals.get("consumed", 0),
        "consumed_by_tier": {k[9:]: v for k, v in totals.items() if k.startswith("consumed_")},
        "order_violations": events.get("order_violation", 0),
        "consumer_told_to_skip": events.get("told_to_skip", 0) + events.get("max_went_back", 0),
        "consumer_duplicate_reads": events.get("duplicate_read", 0),
        "consumer_corrupt_reads": events.get("corrupt_read", 0),
        "local_files_deleted": totals.get("local_files_deleted", 0),
        "index_uploads": totals.get("index_uploads", 0),
        "open_s": {"median": round(sorted(open_times)[len(open_times) // 2], 3) if open_times else None,
                   "max": round(max(open_times), 3) if open_times else None},
        "events": dict(events),
        "log_errors": {k[len("log_error "):]: v for k, v in totals.items() if k.startswith("log_error ")},
    })
    failures = []
    if finding is not None:
        failures.append(finding.get("problem", "finding"))
    for name in ("lost", "duplicated", "corrupted", "misplaced", "unreadable_offsets", "consumed_vanished"):
        if result.get(name):
            failures.append(f"{name}: {result[name]}")
    if verified:
        if verified["untiered_queues"]:
            failures.append(f"not tiered after the final dispatch: {verified['untiered_queues'][:3]}")
        if verified["served_by_tier"].get("local"):
            failures.append(f"{verified['served_by_tier']['local']} messages read back from the local store")
        for kind, res in verified["key_lookups"].items():
            if res["failed"]:
                failures.append(f"final key lookups ({kind}) failed: {res['failed']} of {res['ok'] + res['failed']}")
    for kind in FAILING_EVENTS:
        if events.get(kind):
            failures.append(f"{kind}: {events[kind]}")
    result["ok"] = not failures
    result["failures"] = failures
    if finding is not None:
        result["finding"] = finding
    examples = dict(verified.get("examples", {}))
    examples.update({f"event_{k}": v for k, v in event_examples.items() if k in FAILING_EVENTS or k.endswith("error")})
    if examples:
        result["examples"] = examples

    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print_table(result)
    if result["ok"] and not args.dir and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    elif not result["ok"]:
        say(args, f"kept the work directory for inspection: {work}")
    if finding is not None:
        return EXIT_FINDING
    return 0 if result["ok"] else 1


def print_table(r: dict[str, Any]) -> None:
    lookups = r.get("key_lookups", {})

    def n(name: str) -> str:
        value = r.get(name)
        return "-" if value is None else f"{value:,}"

    rows = [
        ("duration", f"{r['minutes']} min ({r['run_s']} s), SIGKILL every ~{r['kill_every_s']} s"),
        ("restarts", f"{r['restarts']} ({r['kills_while_opening']} while opening)"),
        ("acknowledged", n("acknowledged")),
        ("read back", n("read_back")),
        ("lost", n("lost")),
        ("duplicated", n("duplicated")),
        ("corrupted", n("corrupted")),
        ("misplaced / unreadable", f"{n('misplaced')} / {n('unreadable_offsets')}"),
        ("unacknowledged found", n("unacknowledged_found")),
        ("consumed (run)", f"{r['consumed']:,}, vanished since: {r.get('consumed_vanished', '-')}, "
                           f"order violations {r['order_violations']}"),
        ("key lookups", f"run {lookups.get('during_run')}, final {lookups.get('final', '-')}"),
        ("put msgs/s", f"{r.get('put_msgs_per_s', '-')}"),
        ("local files deleted", f"{r['local_files_deleted']}, index uploads {r['index_uploads']}"),
        ("final verify", f"{r.get('final_verify_s', '-')} s"),
        ("result", "OK" if r["ok"] else "FAILED: " + "; ".join(r["failures"])),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    if r.get("finding"):
        print(json.dumps(r["finding"], indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="how long to run before the final verify")
    ap.add_argument("--kill-every", type=float, default=30.0, help="seconds of child uptime between SIGKILLs")
    ap.add_argument("--jitter", type=float, default=0.2, help="kill time varies by +- this fraction")
    ap.add_argument("--kill-during-open", type=float, default=0.1,
                    help="fraction of the kills that land while the child is still starting")
    ap.add_argument("--open-timeout", type=float, default=120.0, help="seconds a child may take to open")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument("--dir", help="work directory (empty or new; kept); default: a temporary one, "
                                  "removed after a successful run")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--topics", type=int, default=3)
    ap.add_argument("--queues", type=int, default=2, help="queues per topic")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--replayers", type=int, default=1,
                    help="threads re-reading history from random offsets (the tiered read path)")
    ap.add_argument("--replay-batches", type=int, default=16, help="batches of 32 a replayer reads per pick")
    ap.add_argument("--rate", type=int, default=1500, help="puts per second in all (0: as fast as possible)")
    ap.add_argument("--min-size", type=int, default=64, help="smallest body")
    ap.add_argument("--max-size", type=int, default=1024, help="largest body")
    ap.add_argument("--local-file-size", type=int, default=2 << 20, help="local commit-log file bytes")
    ap.add_argument("--tiered-segment-size", type=int, default=1 << 20, help="tiered commit-log segment bytes")
    ap.add_argument("--tiered-cq-units", type=int, default=2000, help="units per tiered consume-queue segment")
    ap.add_argument("--group-commit-count", type=int, default=512)
    ap.add_argument("--group-commit-interval-ms", type=int, default=1000)
    ap.add_argument("--retention-every", type=float, default=2.0, help="seconds between local retention runs")
    ap.add_argument("--index-roll-every", type=float, default=15.0,
                    help="seconds between key-index rolls (each followed by compact_and_upload)")
    ap.add_argument("--lookups-per-s", type=int, default=20, help="query_message lookups per second in the child")
    ap.add_argument("--verify-lookups", default="5000",
                    help="acknowledged keys looked up in the final verify ('all' for every one)")
    ap.add_argument("--role", choices=("harness", "child", "verify"), default="harness", help=argparse.SUPPRESS)
    ap.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.role != "harness":
        with open(os.path.join(args.dir, SETTINGS_FILE)) as fh:
            settings = json.load(fh)
        if args.role == "child":
            return Child(args.dir, args.run, settings).main()
        result = verify(args.dir, settings)
        print("result " + json.dumps(result, default=str), flush=True)
        return 0
    if os.name != "posix":
        print("soak: needs POSIX (SIGKILL, the posix driver)", file=sys.stderr)
        return EXIT_FINDING
    problems = [f"--{n.replace('_', '-')} must be > 0" for n in ("minutes", "kill_every", "topics", "queues",
                                                                   "producers", "consumers", "min_size")
                if getattr(args, n) <= 0]
    if args.max_size < args.min_size:
        problems.append("--max-size must be >= --min-size")
    if not 0 <= args.jitter < 1 or not 0 <= args.kill_during_open <= 1:
        problems.append("--jitter must be in [0, 1) and --kill-during-open in [0, 1]")
    if args.verify_lookups != "all" and not args.verify_lookups.isdigit():
        problems.append("--verify-lookups must be a number or 'all'")
    if problems:
        ap.error("; ".join(problems))
    return harness(args)


if __name__ == "__main__":
    sys.exit(main())
