"""Soak: a TieredMessageStore under load, SIGKILLed and restarted every ``--kill-every`` seconds,
with lost local disks and restored old directories among the faults.

    python bench/soak.py --minutes 10 --json            # the acceptance run (POSIX, SQLite metadata)
    python bench/soak.py --minutes 1 --kill-every 5     # a short development run
    python bench/soak.py --driver s3 --minutes 5 --json # the tier on S3 (moto's server)

The harness (this process) starts a child process that opens the store with
``TieredMessageStore.open(config, background=True)`` (POSIX driver, SQLite metadata,
small local commit-log files, local retention at 0 hours, small tiered segments, a
short group-commit interval) in a work directory (``--dir``, or a temporary one) and runs

* producer threads: ``put_message`` of messages with unique keys (``r{run}p{thread}n{seq}``)
  to every queue of ``--topics`` x ``--queues``; the body carries the key, the sequence
  number and filler derived from the key. After each put that returned PUT_OK the child
  appends ``topic queue offset key time_ms`` to its ack log with one plain ``write()`` (the
  page cache survives SIGKILL; a record torn by the kill counts as not acknowledged);
* consumer threads: read every queue forward with ``get_message`` from the offset they
  committed before the last kill, check order (queue offsets contiguous, ``next_begin_offset``)
  and contents (body derived from the key, topic and queue), and log what they saw. An
  ``OFFSET_TOO_SMALL`` answer moves the consumer to its ``next_begin_offset`` (as a RocketMQ
  client does) and is logged as a skip: the verifier checks that no skipped offset holds a
  message;
* a maintenance thread: local retention (``delete_expired_local``), key-index roll and
  ``index.compact_and_upload()``, and ``query_message`` lookups of random acknowledged keys
  (of this run, aged a little, and of earlier runs that no fault can have taken);
* the background dispatcher and index service of the store itself.

The harness SIGKILLs the child after ``--kill-every`` seconds of uptime (+- ``--jitter``;
``--kill-during-open`` of the kills land while it is still starting) and starts a new one,
until ``--minutes`` are over (or ``--max-kills`` kills happened); the last child is
SIGKILLed too. Some kills are followed by a
fault (counted by kill; 0 turns one off):

* every ``--lose-disk-every``-th kill, a **lost local disk with a failover to a new
  store_path**: the harness deletes the killed child's whole ``store_path`` (local store,
  metadata database, store id) and starts the next child on a new one with
  ``take_over=True``, as an operator runs ``tiered takeover``;
* every ``--restore-every``-th kill, a **restore of an old directory**: ``--copy-age`` kills
  earlier the harness copied the killed child's ``store_path`` aside; now it replaces the
  current ``store_path`` with that copy and starts the next child on it with
  ``metadata_recovery = "rebuild"`` (its metadata is older than the tier), and with
  ``take_over=True`` when the copy's store id is not the owner's (a failover came between).
  A kill due for both restores.

Before a fault (and before taking a copy) the harness takes a read-only look at the tier
(``bench/soak.py --role look``: a :class:`~tiered_core.static_topic.tiered_broker_reader.TieredBrokerReader`,
which rebuilds a private view of the tier and never writes to it, and a copy of the killed
child's metadata database): each queue's *tier end*, the larger of the two. What was
acknowledged at or past it is genuinely gone with the disk (unless a trusted copy brings it
back, see below); consumer offsets past it are rewound to it (the consumers' offsets live
outside the store, in the work directory).

Then a verifier process opens the store, dispatches everything (``dispatch(force=True)``),
deletes every local commit-log file that is tiered (retention with a far-future clock),
reopens it with storage level FORCE and reads every queue from offset 0, which must be
served by the tiered store, and compares with the ack logs and the consumer logs. It
replays the history (acks by run, copies, faults) through a model of what the store must
hold: a fault takes every message at or past the tier end; a restore whose copy the store
trusts (no take-over; the copy's ownership epoch is the owner's, the rule of
``tiered_core.access.continuity``) brings back what the copy held at or past the tier end.

Figures (``--json`` prints them as one object):

* ``acknowledged``: puts answered PUT_OK whose ack record was written; ``read_back``: of
  those, found at the offset the put returned; ``lost``: acknowledged, still held by the
  model (tiered at every fault, or on a disk that survived) and found nowhere;
  ``lost_with_disk``: acknowledged, taken by a fault (not tiered when the disk was lost or
  replaced) and not found, with ``faults.details[].lost_with_disk`` per fault;
  ``returned_after_loss``: taken by a fault but found anyway; ``misplaced``: found at
  another offset; ``duplicated``: keys found at two offsets or more; ``corrupted``: messages
  read back whose topic, queue, offset, key or body is wrong; ``unacknowledged_found``:
  messages whose ack record the kill prevented (not a loss);
* ``offsets_reused``: a (topic, queue, offset) acknowledged for a second message while the
  first was still held (tiered, or on a disk no fault took); ``offsets_reassigned_after_loss``
  (informational): offsets handed out again after a fault took their first message;
* ``max_untiered_age_s``: the longest store uptime an acknowledged message taken by a fault
  had spent untiered; ``tier_lag_violations``: such messages older than ``--max-tier-lag``
  seconds of uptime (a dispatcher that stopped would otherwise hide behind the faults);
* ``consumed_records``: records the consumers and replayers logged reading (their logs; the
  run's ``consumed`` is from the children's stats lines, which a kill can cut short);
  ``consumed_vanished``: (queue, offset, key) a consumer read during the run that the model
  still holds but the final store does not; ``consumed_lost_with_disk`` (informational):
  read, then taken by a fault; ``consumer_offset_conflicts``: a consumer read key K1 at an
  offset and later K2 at the same offset although no fault took K1 in between;
  ``consumer_rereads_after_loss`` (informational): the same after a fault took K1;
  ``order_violations``: consumer reads out of order or with a gap; ``consumer_told_to_skip``:
  OFFSET_OVERFLOW_BADLY answers or skips that jumped over messages the store holds;
  ``skipped_given_up_offsets`` (informational): offsets skipped that hold nothing;
* ``unreadable_offsets``: offsets below a queue's end the tiered store does not serve,
  except ``given_up_offsets`` (informational): offsets a restore gave up (at or past the
  tier end at the fault and below where the next child continued the queue);
* ``faults``: how many of each ran (``details`` per fault: kill, kind, take-over, trusted,
  ``lost_at_fault``: the acknowledged messages the harness found untiered at the fault, from
  the tier end and the acks so far, ``lost_with_disk``: of those, not found at the end, and
  how many consumer offsets were rewound);
* ``key_lookups``: ``query_message`` results during the run and in the final verify
  (a sample of ``--verify-lookups`` acknowledged keys, or every key with ``all``); a key
  not found whose store time lies in a key-index gap a recovery reported
  (``TieredMessageStore.key_index_gap_since`` up to that open: the index file being filled
  was lost with the disk or replaced by the copy's) counts as ``missing_in_key_index_gap``,
  not as failed (``tiered spark reindex`` rebuilds those keys);
* ``restarts`` (SIGKILL + restart), ``put_msgs_per_s`` (acknowledged puts per second of child
  uptime), ``final_verify_s``, and the maintenance the run did (local files deleted,
  index files uploaded, dispatch and log errors);
* ``tier_verify``: ``tiered verify --deep`` of the final store (its exit code, the messages
  it read, its findings of warning or worse: there must be none).

Exit code 0 only when nothing was lost, duplicated, misplaced or corrupted, no offset was
reused, no consumer saw a message vanish, an offset change its message, a skip over a
message or an order violation, no message stayed untiered too long, every key lookup
succeeded, the final verify completed and ``tiered verify --deep`` found nothing; 1 otherwise; 2 when the store refused to open
(printed as ``open_failed``: a finding, the soak stops there) or a child died by itself.
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
from collections import Counter, defaultdict
from typing import Any, Iterator

FAR_FUTURE_MS = 1 << 50
SETTINGS_FILE = "soak.json"
CONFIG_FILE = "tiered.toml"
#: One JSON object a line: the harness's record of runs, copies and faults (see the module doc).
HISTORY_FILE = "history.jsonl"
GROUP = "soak"
EXIT_FINDING = 2
#: Child exit code when TieredMessageStore.open raised a typed error.
CHILD_OPEN_FAILED = 3
#: Event kinds that fail the soak (see the module doc).
FAILING_EVENTS = ("order_violation", "corrupt_read", "duplicate_read", "told_to_skip", "max_went_back",
                  "lookup_failed")
LOST_DISK, RESTORE = "lost_disk", "restore"


# -- messages -------------------------------------------------------------------------


def body_of(key: str, min_size: int, max_size: int) -> bytes:
    """The body of the message with ``key`` (``r{run}p{thread}n{seq}``): the key, the
    sequence number, then the key repeated, to a size derived from the key."""
    seq = key.rsplit("n", 1)[1]
    head = f"{key}|{seq}|".encode()
    size = min_size + zlib.crc32(key.encode()) % (max_size - min_size + 1)
    fill = (key + "/").encode()
    return (head + fill * (size // len(fill) + 1))[:max(size, len(head))]


def run_of_key(key: str) -> int | None:
    """The child run that put the message with ``key``; None for a key this soak does not make."""
    try:
        return int(key[1:key.index("p")]) if key.startswith("r") else None
    except ValueError:
        return None


def queue_list(settings: dict[str, Any]) -> list[tuple[str, int]]:
    return [(f"soak-{t}", q) for t in range(settings["topics"]) for q in range(settings["queues"])]


def queue_name(topic: str, queue_id: int) -> str:
    """How history records and start files name a queue."""
    return f"{topic} {queue_id}"


def store_config(work: str, settings: dict[str, Any], store_path: str, *, rebuild: bool = False):
    from tiered_core import StoreConfig

    return StoreConfig(
        store_path=store_path,
        driver=settings.get("driver", "posix"),
        driver_options=settings.get("driver_options") or {"root": os.path.join(work, "tiered")},
        metadata="sqlite",
        metadata_recovery="rebuild" if rebuild else "refuse",
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
    """Whole records of an ack, consumer or skip log; a line the kill tore is skipped."""
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


def run_of_log(path: str) -> int:
    """``run-0012-p0.log`` -> 12."""
    return int(os.path.basename(path).split("-")[1])


def read_history(work: str) -> list[dict[str, Any]]:
    path = os.path.join(work, HISTORY_FILE)
    out = []
    if os.path.exists(path):
        with open(path, "rb") as fh:
            for raw in fh:
                try:
                    out.append(json.loads(raw))
                except ValueError:
                    continue
    return out


def append_history(work: str, record: dict[str, Any]) -> None:
    with open(os.path.join(work, HISTORY_FILE), "a") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")


def may_be_gone(faults: list[dict[str, Any]], run: int, name: str, offset: int) -> bool:
    """Whether a fault after ``run`` may have taken the message acknowledged at ``offset`` of
    queue ``name`` in ``run``: it lay at or past that fault's tier end."""
    return any(f["after_run"] >= run and offset >= f["tier_end"].get(name, 0) for f in faults)


def read_starts(work: str) -> dict[int, dict[str, Any]]:
    """What each child that opened the store found, by run: ``queues`` (per queue, the tiered
    commit offset and where the queue continues), ``key_index_gap_since`` (the store time
    from which keys of tiered messages may be missing from the key index, or None) and
    ``opened_ms`` (when the open returned)."""
    starts: dict[int, dict[str, Any]] = {}
    directory = os.path.join(work, "starts")
    for fname in os.listdir(directory) if os.path.isdir(directory) else ():
        if fname.endswith(".json"):
            try:
                with open(os.path.join(directory, fname)) as fh:
                    starts[int(fname.split("-")[1].split(".")[0])] = json.load(fh)
            except ValueError:
                continue  # the kill tore it
    return starts


def key_index_gaps(starts: dict[int, dict[str, Any]]) -> list[tuple[int, int]]:
    """Store-time ranges ``[since, opened)`` whose keys a recovery may have lost from the key
    index (the store reports the start, ``TieredMessageStore.key_index_gap_since``; what it
    dispatches after the open it indexes again). ``tiered spark reindex`` rebuilds them."""
    return [(s["key_index_gap_since"], s["opened_ms"]) for s in starts.values()
            if s.get("key_index_gap_since") is not None]


def in_gap(gaps: list[tuple[int, int]], store_ms: int) -> bool:
    return any(a <= store_ms < b for a, b in gaps)


# -- the child: load, maintenance, lookups ----------------------------------------------


class Child:
    def __init__(self, work: str, run: int, settings: dict[str, Any], store_path: str, *,
                 take_over: bool = False, rebuild: bool = False) -> None:
        self.work, self.run, self.s = work, run, settings
        self.store_path, self.take_over, self.rebuild = store_path, take_over, rebuild
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
            acks.write(f"{topic} {qid} {res.queue_offset} {key} {time.time_ns() // 1_000_000}\n".encode())
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

    def _read(self, q: tuple[str, int], offset: int, once: Any, skips: AppendLog) -> tuple[Any, int]:
        """``(a FOUND answer or None, the offset to read next)``."""
        from tiered_core.access.results import GetMessageStatus

        try:
            got = self.store.get_message(GROUP, q[0], q[1], offset, 32)
        except Exception as exc:  # noqa: BLE001
            once("read_error", q, offset, error=repr(exc))
            self.count("read_errors")
            return None, offset
        if got.status is GetMessageStatus.FOUND and got.messages:
            return got, offset
        if got.status is GetMessageStatus.OFFSET_TOO_SMALL and got.next_begin_offset > offset:
            # Nothing expires from the tiered store during the soak: the only offsets a store may
            # skip are ones a restore gave up. Follow the store (as a RocketMQ client does) and
            # log the range: the verifier checks that none of it holds a message.
            skips.write(f"{q[0]} {q[1]} {offset} {got.next_begin_offset}\n".encode())
            once("skipped", q, offset, next_begin_offset=got.next_begin_offset, min_offset=got.min_offset)
            self.count("skipped_offsets", got.next_begin_offset - offset)
            return None, got.next_begin_offset
        if got.status is GetMessageStatus.OFFSET_TOO_SMALL:
            once("told_to_skip", q, offset, status=got.status.name, next_begin_offset=got.next_begin_offset,
                 min_offset=got.min_offset)
            self.count("told_to_skip")
        elif got.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY:
            # the queue ends before what this consumer (or its predecessor) already read; the
            # harness rewinds consumer offsets to the tier end at every fault
            once("max_went_back", q, offset, max_offset=got.max_offset)
            self.count("max_went_back")
        elif got.status is GetMessageStatus.OFFSET_FOUND_NULL:
            self.count("found_null")  # "try again": transient
        return None, offset

    def consumer(self, index: int) -> None:
        """Read my queues forward from the committed offsets, committing as I go."""
        mine = self.queues[index::self.s["consumers"]]
        log = AppendLog(os.path.join(self.work, "consumed", f"run-{self.run:04d}-c{index}.log"))
        skips = AppendLog(os.path.join(self.work, "skips", f"run-{self.run:04d}-c{index}.log"))
        offsets = {q: self._committed_offset(*q) for q in mine}
        offset_fds = {q: os.open(self._offset_path(*q), os.O_RDWR | os.O_CREAT, 0o644) for q in mine}
        seen: dict[str, tuple[str, int, int]] = {}
        once = self._reporter()
        while not self.stop.is_set():
            busy = False
            for q in mine:
                got, at = self._read(q, offsets[q], once, skips)
                if got is not None:
                    busy = True
                    at = self._check_batch(q, at, got, seen, once, log)
                if at != offsets[q]:
                    offsets[q] = at
                    # the consumer's committed offset: one small pwrite, survives the kill
                    os.pwrite(offset_fds[q], b"%020d\n" % at, 0)
            if not busy:
                time.sleep(0.05)

    def replayer(self, index: int) -> None:
        """Re-read history: a random queue from a random offset, a few batches at a time
        (most of it is only in the tiered store once local retention ran)."""
        rng = random.Random(f"{self.s['seed']}-{self.run}-replay{index}")
        log = AppendLog(os.path.join(self.work, "consumed", f"run-{self.run:04d}-r{index}.log"))
        skips = AppendLog(os.path.join(self.work, "skips", f"run-{self.run:04d}-r{index}.log"))
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
                got, offset = self._read(q, offset, once, skips)
                if got is None or self.stop.is_set():
                    break
                offset = self._check_batch(q, offset, got, seen, once, log)
            if len(seen) > 200_000:
                seen.clear()
            time.sleep(0.01)

    def _offset_path(self, topic: str, qid: int) -> str:
        return consumer_offset_path(self.work, topic, qid)

    def _committed_offset(self, topic: str, qid: int) -> int:
        return committed_offset(self.work, topic, qid)

    # -- maintenance --------------------------------------------------------------

    def earlier_keys(self, n: int) -> list[tuple[str, int, int, str]]:
        """Up to ``n`` acknowledged keys of earlier runs (random seeks into their ack logs) that
        no fault can have taken."""
        rng = random.Random(f"{self.s['seed']}-{self.run}-earlier")
        faults = [h for h in read_history(self.work) if h["event"] == "fault"]
        gaps = key_index_gaps({r: s for r, s in read_starts(self.work).items() if r <= self.run})
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
                if len(parts) == 5:
                    topic, qid, offset, key = parts[0].decode(), int(parts[1]), int(parts[2]), parts[3].decode()
                    # the put's store time is at most the ack's: a margin for the put's duration
                    if not may_be_gone(faults, run_of_log(path), queue_name(topic, qid), offset) and \
                            not in_gap([(a - 5000, b) for a, b in gaps], int(parts[4])):
                        out.append((topic, qid, offset, key))
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
        from tiered_core.access.tiered_store import TieredMessageStore
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

        config = store_config(self.work, self.s, self.store_path, rebuild=self.rebuild)
        os.write(1, b"opening\n")
        t0 = time.perf_counter()
        try:
            self.store = TieredMessageStore.open(config, background=True, take_over=self.take_over)
        except TieredStoreError as exc:
            os.write(1, b"open_failed " + json.dumps({
                "run": self.run, "type": type(exc).__name__, "code": exc.code.value, "message": str(exc),
                "context": {k: str(v) for k, v in getattr(exc, "context", {}).items()}}).encode() + b"\n")
            return CHILD_OPEN_FAILED
        open_s = time.perf_counter() - t0
        # Where dispatch resumes after the kill: the groups just below were committed last,
        # so the verifier looks up every key there (see verify()); and where each queue
        # continues (after a restore, the verifier tells offsets it gave up from lost ones).
        with open(os.path.join(self.work, "starts", f"run-{self.run:04d}.json"), "w") as fh:
            commits = {queue_name(r.topic, r.queue_id): r.tiered_commit for r in self.store.stat()}
            json.dump({"queues": {queue_name(t, q): [commits.get(queue_name(t, q), -1),
                                                     self.store.get_max_offset_in_queue(t, q)]
                                  for t, q in self.queues},
                       "key_index_gap_since": self.store.key_index_gap_since,
                       "opened_ms": time.time_ns() // 1_000_000}, fh)
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


def consumer_offset_path(work: str, topic: str, qid: int) -> str:
    return os.path.join(work, "consumer-offsets", f"{topic}-{qid}")


def committed_offset(work: str, topic: str, qid: int) -> int:
    try:
        with open(consumer_offset_path(work, topic, qid), "rb") as fh:
            return int(fh.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


# -- the harness's read-only look at the tier -------------------------------------------


def look(work: str, settings: dict[str, Any], store_path: str) -> dict[str, Any]:
    """What the tier and a killed child's ``store_path`` hold, read without writing either:

    * ``tier``: per queue, the offset past the last tiered message, from a
      :class:`~tiered_core.static_topic.tiered_broker_reader.TieredBrokerReader` (a view rebuilt from the
      backend listing into a private database, through a driver that refuses every write);
    * ``metadata``: per queue, the tiered commit offset the store's own metadata database
      records (read from a copy of the database and its WAL);
    * ``tier_end``: the larger of the two (what a fault cannot take); ``owner``: the newest
      owner record of the tier prefix; ``store_id`` and ``history_epoch`` of ``store_path``.
    """
    from tiered_core.access.continuity import read_history_epoch
    from tiered_core.flat.ownership import STORE_ID_FILE, PrefixOwnership
    from tiered_core.metadata.sqlite import SqliteMetadataStore
    from tiered_core.static_topic.tiered_broker_reader import TieredBrokerReader

    config = store_config(work, settings, store_path)
    names = [queue_name(t, q) for t, q in queue_list(settings)]
    reader = TieredBrokerReader(config, config.broker)
    try:
        tier = {queue_name(t, q): reader.max_offset(t, q) for t, q in queue_list(settings)}
        record = PrefixOwnership(reader.driver, config.cluster, config.broker, "(soak look)").current()
    finally:
        reader.close()
    metadata: dict[str, int] = {}
    db = config.effective_metadata_path()
    if os.path.exists(db):
        tmp = tempfile.mkdtemp(prefix="soak-look-")
        try:
            for suffix in ("", "-wal"):
                if os.path.exists(db + suffix):
                    shutil.copyfile(db + suffix, os.path.join(tmp, "metadata.db" + suffix))
            meta = SqliteMetadataStore(os.path.join(tmp, "metadata.db"))
            try:
                metadata = {queue_name(m.topic, m.queue_id): m.max_offset for m in meta.iterate_queues()
                            if queue_name(m.topic, m.queue_id) in tier}
            finally:
                meta.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    try:
        with open(os.path.join(store_path, STORE_ID_FILE), encoding="ascii") as fh:
            store_id: str | None = fh.read().strip() or None
    except OSError:
        store_id = None
    return {"tier": tier, "metadata": metadata,
            "tier_end": {n: max(tier.get(n, 0), metadata.get(n, 0)) for n in names},
            "owner": None if record is None else {"store_id": record.store_id, "epoch": record.epoch},
            "store_id": store_id,
            "history_epoch": read_history_epoch(store_path) if os.path.isdir(store_path) else None}


# -- the verifier -------------------------------------------------------------------------


class Model:
    """What the store must hold, replayed from the history: acks by run, copies, faults.

    ``expected[queue][offset]`` is the key the store must serve there. A fault takes every
    entry at or past its tier end (``removed[key]``: the runs after which faults took it);
    a restore the store trusts puts back the copy's entries at or past it. An ack at an
    offset that holds another key is a reuse (the first key is *displaced*); at an offset a
    fault emptied, a reassignment.
    """

    def __init__(self) -> None:
        self.expected: dict[str, dict[int, str]] = defaultdict(dict)
        self.removed: dict[str, list[int]] = defaultdict(list)
        self.fate: dict[str, str] = {}  # "removed" or "displaced": why a key is no longer expected
        self.emptied: dict[str, set[int]] = defaultdict(set)
        self.snapshots: dict[int, dict[str, dict[int, str]]] = {}
        self.reused = 0
        self.reused_examples: list[dict[str, Any]] = []
        self.reassigned = 0
        self.taken: Counter[int] = Counter()  # messages each fault took (by after_run)

    def ack(self, name: str, offset: int, key: str) -> None:
        held = self.expected[name]
        current = held.get(offset)
        if current is not None and current != key:
            self.reused += 1
            if len(self.reused_examples) < 20:
                self.reused_examples.append({"queue": name, "offset": offset, "first": current, "then": key})
            self.fate[current] = "displaced"
        elif current is None and offset in self.emptied[name]:
            self.reassigned += 1
        held[offset] = key
        self.fate.pop(key, None)

    def copy(self, copy_id: int, tier_end: dict[str, int]) -> None:
        self.snapshots[copy_id] = {name: {o: k for o, k in held.items() if o >= tier_end.get(name, 0)}
                                   for name, held in self.expected.items()}

    def fault(self, after_run: int, tier_end: dict[str, int], restored_copy: int | None) -> None:
        snapshot = self.snapshots.get(restored_copy, {}) if restored_copy is not None else {}
        for name, held in self.expected.items():
            end = tier_end.get(name, 0)
            back = {o: k for o, k in snapshot.get(name, {}).items() if o >= end}
            for offset in [o for o in held if o >= end]:
                key = held.pop(offset)
                if back.get(offset) != key:
                    self.removed[key].append(after_run)
                    self.fate[key] = "removed"
                    self.emptied[name].add(offset)
                    self.taken[after_run] += 1
            for offset, key in back.items():
                held[offset] = key
                self.fate.pop(key, None)

    def holds(self, name: str, offset: int, key: str) -> bool:
        return self.expected.get(name, {}).get(offset) == key

    def taken_between(self, key: str, first_run: int, last_run: int) -> bool:
        """Whether a fault after a run in ``[first_run, last_run)`` took ``key``."""
        return any(first_run <= r < last_run for r in self.removed.get(key, ()))


def ready_seconds(intervals: list[tuple[float, float]], begin: float, end: float) -> float:
    """Seconds of ``[begin, end]`` during which a child had the store open (ready to killed)."""
    return sum(max(0.0, min(b, end) - max(a, begin)) for a, b in intervals)


def verify(work: str, settings: dict[str, Any], store_path: str, *, take_over: bool = False,
           rebuild: bool = False) -> dict[str, Any]:
    """Open after the last kill, tier everything, delete the local copy, read every queue
    from the tiered store and compare with what the history says it must hold."""
    from tiered_core.access.results import GetMessageStatus
    from tiered_core.access.tiered_store import TieredMessageStore
    from tiered_core.errors import TieredStoreError

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    t_start = time.perf_counter()
    out: dict[str, Any] = {}
    config = store_config(work, settings, store_path, rebuild=rebuild)

    def body(key: str) -> bytes:
        return body_of(key, settings["min_size"], settings["max_size"])

    # 1. everything acknowledged, from the ack logs
    acked: dict[str, tuple[str, int, int]] = {}
    ack_ms: dict[str, int] = {}
    for path in log_files(os.path.join(work, "acks")):
        for topic, qid, offset, key, ms in parse_lines(path, 5):
            acked[key] = (topic, int(qid), int(offset))
            ack_ms[key] = int(ms)

    # 2. open, tier everything, delete every tiered local file
    try:
        store = TieredMessageStore.open(config, take_over=take_over)
    except TieredStoreError as exc:
        return {"open_failed": {"phase": "verify", "type": type(exc).__name__, "code": exc.code.value,
                                "message": str(exc)}}
    verify_gap = ([(store.key_index_gap_since, time.time_ns() // 1_000_000)]
                  if store.key_index_gap_since is not None else [])
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
    gaps: list[tuple[str, int, str]] = []  # (queue name, offset, status)
    tiers: Counter[str] = Counter()
    duplicate_count = corrupt_count = 0
    t_read = time.perf_counter()
    try:
        store = TieredMessageStore.open(config.replace(storage_level="FORCE", metadata_recovery="refuse"))
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
                    gaps.append((queue_name(topic, qid), offset, got.status.name))
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
                gaps.append((queue_name(topic, qid), end, f"{past.status.name} (reading past the end)"))
        read_s = time.perf_counter() - t_read

        # 4. what consumers read during the run: per offset, the keys in the order of the runs
        #    that read them, as [key, first run, last run] segments
        reads: dict[str, dict[int, list[list[Any]]]] = defaultdict(dict)
        consumed = 0
        for path in sorted(log_files(os.path.join(work, "consumed")), key=run_of_log):
            run = run_of_log(path)
            for topic, qid, offset, key in parse_lines(path, 4):
                consumed += 1
                segs = reads[queue_name(topic, qid)].setdefault(int(offset), [])
                if segs and segs[-1][0] == key:
                    segs[-1][2] = run
                else:
                    segs.append([key, run, run])

        # 5. the model: acks (and messages consumers saw whose ack the kill tore) by run, then
        #    the copy and the fault after each run
        history = read_history(work)
        runs = [h for h in history if h["event"] == "run"]
        copies = {h["after_run"]: h for h in history if h["event"] == "copy"}
        faults = {h["after_run"]: h for h in history if h["event"] == "fault"}
        by_run: dict[int, list[tuple[str, int, str]]] = defaultdict(list)
        for key, (topic, qid, offset) in acked.items():
            by_run[run_of_key(key) or 0].append((queue_name(topic, qid), offset, key))
        observed: set[str] = set()
        for name, per_offset in reads.items():
            for offset, segs in per_offset.items():
                for key, _first, _last in segs:
                    run = run_of_key(key)
                    if key not in acked and key not in observed and run is not None:
                        observed.add(key)
                        by_run[run].append((name, offset, key))
        model = Model()
        last_run = max([h["run"] for h in runs] + list(by_run) + [0])
        for run in range(last_run + 1):
            for name, offset, key in by_run.get(run, ()):
                model.ack(name, offset, key)
            if run in copies:
                model.copy(copies[run]["copy"], copies[run]["tier_end"])
            if run in faults:
                f = faults[run]
                model.fault(run, f["tier_end"], f["copy"] if f["kind"] == RESTORE and f["trusted"] else None)

        # 6. compare the acks with the store
        lost: list[dict[str, Any]] = []
        misplaced: list[dict[str, Any]] = []
        lost_count = misplaced_count = read_back = lost_with_disk = returned = 0
        lost_by_fault: Counter[int] = Counter()
        for key, where in acked.items():
            topic, qid, offset = where
            at = key_at.get(key)
            here = at == where or found_at.get(where) == key
            if model.holds(queue_name(topic, qid), offset, key):
                if here:
                    read_back += 1
                elif at is None:
                    lost_count += 1
                    if len(lost) < 20:
                        lost.append({"key": key, "acked_at": where})
                else:
                    misplaced_count += 1
                    if len(misplaced) < 20:
                        misplaced.append({"key": key, "acked_at": where, "found_at": at})
            elif here:
                if model.fate.get(key) == "removed":
                    returned += 1  # a fault took it, by the model; the store has it anyway
                read_back += 1  # (or a later ack reused its offset: counted in offsets_reused)
            elif at is not None:
                misplaced_count += 1
                if len(misplaced) < 20:
                    misplaced.append({"key": key, "acked_at": where, "found_at": at, "taken_by_fault": True})
            elif model.fate.get(key) == "removed":
                lost_with_disk += 1
                lost_by_fault[model.removed[key][-1]] += 1
            else:  # displaced by an offset reused (counted there) and gone
                lost_count += 1
                if len(lost) < 20:
                    lost.append({"key": key, "acked_at": where, "displaced": True})
        unacked = sum(1 for k in key_at if k not in acked)

        # how long messages a fault took had been waiting to be tiered (store uptime)
        intervals = [(h["ready"], h["killed"]) for h in runs if h.get("ready") is not None]
        killed_at = {h["run"]: h["killed"] for h in runs}
        max_tier_lag = settings.get("max_tier_lag", 0)
        max_age = 0.0
        lag_violations = 0
        lag_examples: list[dict[str, Any]] = []
        for key, fault_runs in model.removed.items():
            if key not in ack_ms:
                continue
            for r in fault_runs:
                age = ready_seconds(intervals, ack_ms[key] / 1000.0, killed_at.get(r, 0.0))
                max_age = max(max_age, age)
                if max_tier_lag and age > max_tier_lag:
                    lag_violations += 1
                    if len(lag_examples) < 20:
                        lag_examples.append({"key": key, "acked_at": acked[key], "fault_after_run": r,
                                             "untiered_for_s": round(age, 1)})

        # 7. what consumers saw: still there, or taken by a fault after they read it; a second
        #    key at one offset only after a fault took the first
        vanished = lost_consumed = conflicts = rereads = 0
        vanished_examples: list[dict[str, Any]] = []
        conflict_examples: list[dict[str, Any]] = []
        for name, per_offset in reads.items():
            topic, qid = name.split()
            for offset, segs in per_offset.items():
                where = (topic, int(qid), offset)
                for i, (key, first, last) in enumerate(segs):
                    if found_at.get(where) == key:
                        pass
                    elif not model.holds(name, offset, key) and model.taken_between(key, last, last_run + 1):
                        lost_consumed += 1
                    else:
                        vanished += 1
                        if len(vanished_examples) < 20:
                            vanished_examples.append({"consumed": [*where, key], "now": found_at.get(where),
                                                      "fate": model.fate.get(key)})
                    if i:
                        prev_key, _prev_first, prev_last = segs[i - 1]
                        if prev_last < first and model.taken_between(prev_key, prev_last, first):
                            rereads += 1
                        else:
                            conflicts += 1
                            if len(conflict_examples) < 20:
                                conflict_examples.append({"queue": name, "offset": offset,
                                                          "first": [prev_key, prev_last], "then": [key, first]})

        # 8. offsets the tiered store does not serve, and offsets consumers were told to skip:
        #    only ones a restore gave up (at or past the tier end at the fault, below where the
        #    next child continued the queue) may hold nothing
        starts = read_starts(work)
        given_up: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for after_run, f in faults.items():
            nxt = next((starts[r]["queues"] for r in sorted(starts) if r > after_run), None)
            if nxt is None:
                continue
            for name, end in f["tier_end"].items():
                if name in nxt and nxt[name][1] > end:
                    given_up[name].append((end, nxt[name][1]))

        def is_given_up(name: str, offset: int) -> bool:
            return any(a <= offset < b for a, b in given_up.get(name, ()))

        unreadable: list[dict[str, Any]] = []
        unreadable_count = given_up_count = 0
        for name, offset, status in gaps:
            if is_given_up(name, offset) and offset not in model.expected.get(name, {}):
                given_up_count += 1
            else:
                unreadable_count += 1
                if len(unreadable) < 20:
                    unreadable.append({"queue": name, "offset": offset, "status": status})
        skipped_given_up = skipped_messages = 0
        skip_examples: list[dict[str, Any]] = []
        for path in log_files(os.path.join(work, "skips")):
            for topic, qid, begin, end in parse_lines(path, 4):
                name = queue_name(topic, int(qid))
                held = model.expected.get(name, {})
                for offset in range(int(begin), int(end)):
                    if offset in held or (topic, int(qid), offset) in found_at:
                        skipped_messages += 1
                        if len(skip_examples) < 20:
                            skip_examples.append({"queue": name, "offset": offset, "skip": [int(begin), int(end)],
                                                  "holds": held.get(offset) or found_at.get((topic, int(qid), offset))})
                    else:
                        skipped_given_up += 1

        # 9. key lookups, from the tiered index only (storage level FORCE; the local copy is gone):
        #    a random sample over the whole time range, and every key of the last groups
        #    dispatched before each kill (dispatch resumes at the tiered commit offset the
        #    child found at open), in a window around the message's store time
        rng = random.Random(f"{settings['seed']}-verify")
        keys = sorted(k for k in acked if k in key_at)
        n = len(keys) if settings["verify_lookups"] < 0 else min(settings["verify_lookups"], len(keys))
        sample = keys if n == len(keys) else rng.sample(keys, n)
        at_restart: set[str] = set()
        for points in starts.values():
            for name, (commit, _end) in points["queues"].items():
                topic, qid = name.split()
                for off in range(max(0, commit - settings["group_commit_count"]), commit):
                    key = found_at.get((topic, int(qid), off))
                    if key is not None and key in acked:
                        at_restart.add(key)

        def lookups(keys: list[str], window: bool) -> dict[str, Any]:
            t0 = time.perf_counter()
            ok = failed = missing_in_gap = 0
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
                elif not hits and in_gap(gaps, stored_at[key]):
                    missing_in_gap += 1  # a recovery reported these keys may be missing (reindex finds them)
                else:
                    failed += 1
                    if len(failures) < 20:
                        failures.append({"key": key, "at": [topic, qid, offset],
                                         "found": [(m.queue_id, m.queue_offset) for m in hits]})
            return {"ok": ok, "failed": failed, "missing_in_key_index_gap": missing_in_gap,
                    "seconds": round(time.perf_counter() - t0, 2), "failures": failures}

        gaps = key_index_gaps(starts) + verify_gap
        lookup_sample = lookups(sample, window=False)
        lookup_restart = lookups(sorted(at_restart), window=True)
    finally:
        store.close()

    fault_details = []
    for after_run, f in sorted(faults.items()):
        fault_details.append({"kill": f["kill"], "kind": f["kind"], "after_run": after_run,
                              "take_over": f["take_over"], "trusted": f.get("trusted"),
                              "lost_at_fault": f["lost_at_fault"],
                              "lost_with_disk": lost_by_fault[after_run],
                              "consumer_offsets_rewound": len(f["consumer_rewinds"])})
    out.update({
        "queues": len(queues),
        "acknowledged": len(acked),
        "read_back": read_back,
        "lost": lost_count,
        "lost_with_disk": lost_with_disk,
        "returned_after_loss": returned,
        "misplaced": misplaced_count,
        "duplicated": duplicate_count,
        "corrupted": corrupt_count,
        "offsets_reused": model.reused,
        "offsets_reassigned_after_loss": model.reassigned,
        "unreadable_offsets": unreadable_count,
        "given_up_offsets": given_up_count,
        "unacknowledged_found": unacked,
        "messages_in_store": len(found_at),
        "served_by_tier": dict(tiers),
        "consumed_records": consumed,
        "consumed_vanished": vanished,
        "consumed_lost_with_disk": lost_consumed,
        "consumer_offset_conflicts": conflicts,
        "consumer_rereads_after_loss": rereads,
        "consumer_skipped_messages": skipped_messages,
        "skipped_given_up_offsets": skipped_given_up,
        "max_untiered_age_s": round(max_age, 1),
        "tier_lag_violations": lag_violations,
        "fault_details": fault_details,
        "key_lookups": {"sample": {k: v for k, v in lookup_sample.items() if k != "failures"},
                        "at_restart_points": {k: v for k, v in lookup_restart.items() if k != "failures"}},
        "read_s": round(read_s, 2),
        "verify_s": round(time.perf_counter() - t_start, 2),
        "examples": {k: v for k, v in {"lost": lost, "misplaced": misplaced, "duplicated": duplicated,
                                       "corrupted": corrupted, "unreadable": unreadable,
                                       "consumed_vanished": vanished_examples,
                                       "offsets_reused": model.reused_examples,
                                       "consumer_offset_conflicts": conflict_examples,
                                       "consumer_skipped_messages": skip_examples,
                                       "tier_lag": lag_examples,
                                       "lookup_failed": lookup_sample["failures"] + lookup_restart["failures"],
                                       }.items() if v},
    })
    # 4. the tier as `tiered verify --deep` sees it: kills, lost disks and restores must
    # leave nothing it reports (its info findings are states, not faults)
    from tiered_core.ops.verify import verify_store

    report = verify_store(config, deep=True)
    out["tier_verify"] = {"exit_code": report.exit_code, "messages_read": report.stats.messages_read,
                          "findings": [f.describe() for f in report.findings if f.severity.rank > 0][:20]}
    return out


# -- the harness --------------------------------------------------------------------------


class ChildProcess:
    """One child: its stdout lines arrive on a queue (``ready``, ``stats``, ``open_failed``)."""

    def __init__(self, work: str, run: int, store_path: str, *, take_over: bool, rebuild: bool) -> None:
        self.run = run
        self.stderr_path = os.path.join(work, "logs", f"run-{run:04d}.stderr")
        self.stderr = open(self.stderr_path, "wb")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        self.started = time.monotonic()
        argv = [sys.executable, os.path.abspath(__file__), "--role", "child", "--dir", work, "--run", str(run),
                "--store-path", store_path]
        argv += ["--take-over"] if take_over else []
        argv += ["--rebuild"] if rebuild else []
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.stderr, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.opening_at: float | None = None
        self.ready_at: float | None = None
        self.ready_wall: float | None = None
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
                self.ready_wall = time.time()
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


class RoleFailed(Exception):
    """A ``--role look`` or ``--role verify`` process failed."""

    def __init__(self, finding: dict[str, Any]) -> None:
        super().__init__(finding.get("problem", "role failed"))
        self.finding = finding


def run_role(work: str, role: str, store_path: str, *extra: str) -> dict[str, Any]:
    """Run this script as ``--role ROLE`` and return the object it printed after ``result``."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--role", role, "--dir", work,
                           "--store-path", store_path, *extra],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("result ")), None)
    if proc.returncode != 0 or line is None:
        raise RoleFailed({"problem": f"the {role} process failed", "exit_code": proc.returncode,
                          "stderr_tail": proc.stderr[-3000:]})
    return json.loads(line[len("result "):])


def rewind_consumers(work: str, settings: dict[str, Any], tier_end: dict[str, int]) -> dict[str, list[int]]:
    """Move every consumer offset past the tier end back to it (what was read past it may be
    gone with the disk); returns ``{queue: [old, new]}``."""
    moved = {}
    for topic, qid in queue_list(settings):
        name = queue_name(topic, qid)
        old, end = committed_offset(work, topic, qid), tier_end.get(name, 0)
        if old > end:
            fd = os.open(consumer_offset_path(work, topic, qid), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, b"%020d\n" % end, 0)
            finally:
                os.close(fd)
            moved[name] = [old, end]
    return moved


def feed_acks(model: "Model", work: str, runs: range) -> None:
    """Give ``model`` the acks of ``runs``, in run order."""
    by_run: dict[int, list[str]] = defaultdict(list)
    for path in log_files(os.path.join(work, "acks")):
        if run_of_log(path) in runs:
            by_run[run_of_log(path)].append(path)
    for run in runs:
        for path in by_run.get(run, ()):
            for topic, qid, offset, key, _ms in parse_lines(path, 5):
                model.ack(queue_name(topic, int(qid)), int(offset), key)


class Faults:
    """The fault schedule and what it did: copies taken, lost disks, restores (module doc)."""

    def __init__(self, args: argparse.Namespace, work: str, settings: dict[str, Any]) -> None:
        self.args, self.work, self.settings = args, work, settings
        self.store_path = os.path.join(work, "store-0")
        self.paths = 1
        self.copies: dict[int, dict[str, Any]] = {}  # by the kill they were taken at, until restored
        self.counts: Counter[str] = Counter()
        self.records: list[dict[str, Any]] = []
        # what the store must hold, from the acks so far: it says at each fault which
        # acknowledged messages go with the disk (the verifier replays the same model)
        self.model = Model()
        self.fed = 0  # runs given to the model

    def after_kill(self, kill: int, run: int) -> dict[str, bool]:
        """Take a copy and/or inject the fault due after kill number ``kill`` (of run ``run``);
        returns the open options the next child needs (``take_over``, ``rebuild``)."""
        # Copies keep the holes of the local index files (a plain copy writes ~400 MiB of zeros each).
        from tiered_conformance.drills import copy_sparse

        a = self.args
        # (a child killed early in its open may not have made its store_path yet: nothing to copy)
        take_copy = (a.restore_every > 0 and (kill + a.copy_age) % a.restore_every == 0
                     and os.path.isdir(self.store_path))
        restore = a.restore_every > 0 and kill % a.restore_every == 0 and (kill - a.copy_age) in self.copies
        lose = a.lose_disk_every > 0 and kill % a.lose_disk_every == 0 and not restore
        if not (take_copy or restore or lose):
            return {}
        look_now = run_role(self.work, "look", self.store_path)
        feed_acks(self.model, self.work, range(self.fed, run + 1))
        self.fed = run + 1
        if take_copy:
            dest = os.path.join(self.work, "copies", f"copy-{kill:04d}")
            shutil.copytree(self.store_path, dest, symlinks=True, copy_function=copy_sparse)
            rec = {"event": "copy", "copy": kill, "after_run": run, "path": dest, "store_path": self.store_path,
                   "store_id": look_now["store_id"], "history_epoch": look_now["history_epoch"],
                   "tier_end": look_now["tier_end"]}
            self.copies[kill] = rec
            self.model.copy(kill, rec["tier_end"])
            self.counts["copies"] += 1
            append_history(self.work, rec)
            say(a, f"  copied {self.store_path} aside (copy of kill #{kill})")
        if not (restore or lose):
            return {}
        tier, metadata = look_now["tier"], look_now["metadata"]
        rec = {"event": "fault", "kind": RESTORE if restore else LOST_DISK, "kill": kill, "after_run": run,
               "at": time.time(), "store_path": self.store_path, "tier": tier, "metadata": metadata,
               "tier_end": look_now["tier_end"], "owner": look_now["owner"],
               "tier_behind_metadata": {n: [tier.get(n, 0), m] for n, m in metadata.items() if m > tier.get(n, 0)}}
        if lose:
            self.model.fault(run, rec["tier_end"], None)
            rec["lost_at_fault"] = self.model.taken[run]
            if os.path.exists(self.store_path):
                shutil.rmtree(self.store_path)
            self.store_path = os.path.join(self.work, f"store-{self.paths}")
            self.paths += 1
            rec.update(take_over=True, trusted=None)
            opts = {"take_over": True}
            say(a, f"  lost the local disk: {rec['store_path']} deleted, with {rec['lost_at_fault']:,} acknowledged "
                   f"messages not tiered; failover to {self.store_path} with take_over=True")
        else:
            copy = self.copies.pop(kill - a.copy_age)
            owner = look_now["owner"]
            take_over = owner is not None and copy["store_id"] != owner["store_id"]
            # the rule of tiered_core.access.continuity: the copy's local history is trusted when
            # no take-over happens and it is in step with the owner's epoch
            trusted = not take_over and (copy["history_epoch"] is None
                                         or owner is None or copy["history_epoch"] == owner["epoch"])
            if os.path.exists(self.store_path):
                shutil.rmtree(self.store_path)
            shutil.copytree(copy["path"], self.store_path, symlinks=True, copy_function=copy_sparse)
            shutil.rmtree(copy["path"], ignore_errors=True)
            rec.update(copy=copy["copy"], copy_after_run=copy["after_run"], copy_store_id=copy["store_id"],
                       copy_history_epoch=copy["history_epoch"], take_over=take_over, trusted=trusted)
            self.model.fault(run, rec["tier_end"], copy["copy"] if trusted else None)
            rec["lost_at_fault"] = self.model.taken[run]
            opts = {"rebuild": True, "take_over": take_over}
            self.counts["restore_took_over" if take_over else "restore_same_owner"] += 1
            say(a, f"  restored the copy of kill #{copy['copy']} over {self.store_path}, losing "
                   f"{rec['lost_at_fault']:,} acknowledged messages not tiered; metadata rebuilt"
                   f"{', take_over=True' if take_over else ''}, local history "
                   f"{'trusted' if trusted else 'given up'}")
        rec["new_store_path"] = self.store_path
        rec["consumer_rewinds"] = rewind_consumers(self.work, self.settings, look_now["tier_end"])
        self.counts[rec["kind"]] += 1
        self.records.append(rec)
        append_history(self.work, rec)
        with open(os.path.join(self.work, CONFIG_FILE), "w") as fh:
            fh.write(store_config(self.work, self.settings, self.store_path).to_toml())
        return opts


def harness(args: argparse.Namespace) -> int:
    settings = {k: getattr(args, k) for k in (
        "topics", "queues", "producers", "consumers", "rate", "min_size", "max_size", "seed",
        "local_file_size", "tiered_segment_size", "tiered_cq_units", "group_commit_count",
        "group_commit_interval_ms", "retention_every", "index_roll_every", "lookups_per_s",
        "replayers", "replay_batches", "max_tier_lag")}
    settings["verify_lookups"] = -1 if args.verify_lookups == "all" else int(args.verify_lookups)
    settings["driver"] = args.driver
    settings["driver_options"] = getattr(args, "driver_options", None)  # set by main() for an emulator
    if args.dir:
        work = os.path.abspath(args.dir)
        if os.path.exists(work) and os.listdir(work):
            print(f"soak: --dir {work} is not empty (every run starts from an empty store)", file=sys.stderr)
            return EXIT_FINDING
        os.makedirs(work, exist_ok=True)
    else:
        work = tempfile.mkdtemp(prefix="tiered-soak-")
    for sub in ("acks", "consumed", "consumer-offsets", "copies", "events", "logs", "skips", "starts"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    with open(os.path.join(work, SETTINGS_FILE), "w") as fh:
        json.dump(settings, fh, indent=1)
    faults = Faults(args, work, settings)
    with open(os.path.join(work, CONFIG_FILE), "w") as fh:
        fh.write(store_config(work, settings, faults.store_path).to_toml())  # for inspection
    say(args, f"work directory {work}; {args.minutes} min, SIGKILL every {args.kill_every} s; lost disk every "
              f"{args.lose_disk_every or '-'} kills, restore every {args.restore_every or '-'} kills "
              f"(of a copy {args.copy_age} kills old)")

    rng = random.Random(f"{args.seed}-harness")
    t_begin = time.monotonic()
    deadline = t_begin + args.minutes * 60
    runs: list[dict[str, Any]] = []
    totals: Counter[str] = Counter()
    finding: dict[str, Any] | None = None
    kills = kills_before_ready = 0
    uptime = 0.0
    run = 0
    opts: dict[str, bool] = {}  # open options the next child needs, until one is ready
    child: ChildProcess | None = None
    try:
        while time.monotonic() < deadline and finding is None and not (args.max_kills and kills >= args.max_kills):
            child = ChildProcess(work, run, faults.store_path, take_over=opts.get("take_over", False),
                                 rebuild=opts.get("rebuild", False))
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
                               "store_path": faults.store_path, "open_options": opts,
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
            killed_wall = time.time()
            if exited_by_itself or code != -signal.SIGKILL:
                finding = {"run": run, "problem": "the child stopped by itself", "exit_code": code,
                           "open_failed": child.open_failed, "store_path": faults.store_path, "open_options": opts,
                           "stderr_tail": child.stderr_tail()}
                break
            kills += 1
            append_history(work, {"event": "run", "run": run, "store_path": faults.store_path,
                                  "take_over": opts.get("take_over", False), "rebuild": opts.get("rebuild", False),
                                  "ready": child.ready_wall, "killed": killed_wall})
            if child.ready_at is None:
                kills_before_ready += 1
            else:
                uptime += time.monotonic() - child.ready_at
                opts = {}  # the take-over / rebuild is done
            totals.update(child.stats)
            runs.append({"run": run, "open_s": child.open_s, "acked": child.stats.get("acked", 0),
                         "killed_before_ready": child.ready_at is None})
            say(args, f"kill #{kills}: run {run} {'(while opening) ' if child.ready_at is None else ''}"
                      f"open {child.open_s if child.open_s is not None else '-'} s, "
                      f"acked ~{child.stats.get('acked', 0):,}, consumed ~{child.stats.get('consumed', 0):,}, "
                      f"local files deleted {child.stats.get('local_files_deleted', 0)}, "
                      f"index uploads {child.stats.get('index_uploads', 0)}, "
                      f"events {({k[6:]: v for k, v in child.stats.items() if k.startswith('event_')})}")
            child = None
            last = time.monotonic() >= deadline or (args.max_kills and kills >= args.max_kills)
            if not last:  # no fault after the last kill: the verifier opens that store
                try:
                    for key, value in faults.after_kill(kills, run).items():
                        opts[key] = opts.get(key, False) or value
                except RoleFailed as exc:
                    finding = {"run": run, **exc.finding}
                    break
            run += 1
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
        "faults": {"lost_disk": faults.counts[LOST_DISK], "restore": faults.counts[RESTORE],
                   "restore_took_over": faults.counts["restore_took_over"],
                   "restore_same_owner": faults.counts["restore_same_owner"], "copies_taken": faults.counts["copies"],
                   "store_paths": faults.paths},
    }
    verified: dict[str, Any] = {}
    if finding is None:
        say(args, "final verify: dispatch everything, delete the local copy, read back from the tiered store")
        extra = (["--take-over"] if opts.get("take_over") else []) + (["--rebuild"] if opts.get("rebuild") else [])
        try:
            verified = run_role(work, "verify", faults.store_path, *extra)
        except RoleFailed as exc:
            finding = {**exc.finding, "problem": "the final verify failed"}
        if "open_failed" in verified:
            finding = {"problem": "the store refused to open for the final verify", **verified}
            verified = {}
    open_times = [r["open_s"] for r in runs if r["open_s"] is not None]
    lookups_run = {"ok": totals.get("lookups_ok", 0),
                   "failed": max(totals.get("lookups_failed", 0), events.get("lookup_failed", 0)),
                   "of_this_run_keys": totals.get("lookups_this_run", 0),
                   "of_earlier_run_keys": totals.get("lookups_earlier_run", 0)}
    if verified:
        result.update({k: verified[k] for k in (
            "acknowledged", "read_back", "lost", "lost_with_disk", "returned_after_loss", "duplicated",
            "offsets_reused", "offsets_reassigned_after_loss", "corrupted", "misplaced", "unreadable_offsets",
            "given_up_offsets", "unacknowledged_found", "messages_in_store", "consumed_records",
            "consumed_vanished", "consumed_lost_with_disk", "consumer_offset_conflicts", "consumer_rereads_after_loss",
            "consumer_skipped_messages", "skipped_given_up_offsets", "max_untiered_age_s", "tier_lag_violations",
            "served_by_tier")})
        result["faults"]["details"] = verified["fault_details"]
        result["key_lookups"] = {"during_run": lookups_run, "final": verified["key_lookups"]}
        result["put_msgs_per_s"] = round(verified["acknowledged"] / uptime, 1) if uptime else 0.0
        result["final_verify_s"] = verified["verify_s"]
        result["final_dispatch"] = verified["final_dispatch"]
        result["untiered_queues"] = verified["untiered_queues"]
        result["tier_verify"] = verified["tier_verify"]
    else:
        result["key_lookups"] = {"during_run": lookups_run}
    behind = {f"kill {r['kill']}": r["tier_behind_metadata"] for r in faults.records if r["tier_behind_metadata"]}
    result.update({
        "consumed": totals.get("consumed", 0),
        "consumed_by_tier": {k[9:]: v for k, v in totals.items() if k.startswith("consumed_")},
        "order_violations": events.get("order_violation", 0),
        "consumer_told_to_skip": events.get("told_to_skip", 0) + events.get("max_went_back", 0),
        "consumer_duplicate_reads": events.get("duplicate_read", 0),
        "consumer_corrupt_reads": events.get("corrupt_read", 0),
        "consumer_offsets_rewound": sum(len(r["consumer_rewinds"]) for r in faults.records),
        "tier_behind_metadata": behind,
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
    for name in ("lost", "duplicated", "corrupted", "misplaced", "unreadable_offsets", "consumed_vanished",
                 "offsets_reused", "consumer_offset_conflicts", "consumer_skipped_messages", "tier_lag_violations"):
        if result.get(name):
            failures.append(f"{name}: {result[name]}")
    if behind:
        failures.append(f"the tier held less than the store's metadata recorded at a fault: {behind}")
    if verified:
        if verified["untiered_queues"]:
            failures.append(f"not tiered after the final dispatch: {verified['untiered_queues'][:3]}")
        if verified["tier_verify"]["exit_code"]:
            failures.append(f"tiered verify --deep of the final store: {verified['tier_verify']['findings'][:3]}")
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
    f = r["faults"]

    def n(name: str) -> str:
        value = r.get(name)
        return "-" if value is None else f"{value:,}"

    rows = [
        ("duration", f"{r['minutes']} min ({r['run_s']} s), SIGKILL every ~{r['kill_every_s']} s"),
        ("restarts", f"{r['restarts']} ({r['kills_while_opening']} while opening)"),
        ("faults", f"lost disk {f['lost_disk']}, restore {f['restore']} ({f['restore_took_over']} taken over), "
                   f"store paths {f['store_paths']}"),
        ("acknowledged", n("acknowledged")),
        ("read back", n("read_back")),
        ("lost", n("lost")),
        ("lost with the disk", f"{n('lost_with_disk')} (returned anyway {n('returned_after_loss')}; longest untiered "
                               f"{r.get('max_untiered_age_s', '-')} s, over the limit {n('tier_lag_violations')})"),
        ("duplicated", n("duplicated")),
        ("offsets reused", f"{n('offsets_reused')} (reassigned after a loss: {n('offsets_reassigned_after_loss')})"),
        ("corrupted", n("corrupted")),
        ("misplaced / unreadable", f"{n('misplaced')} / {n('unreadable_offsets')} (given up {n('given_up_offsets')})"),
        ("unacknowledged found", n("unacknowledged_found")),
        ("consumed (run)", f"{r['consumed']:,}, vanished since: {r.get('consumed_vanished', '-')}, "
                           f"lost with the disk: {r.get('consumed_lost_with_disk', '-')}, "
                           f"order violations {r['order_violations']}"),
        ("consumer offsets", f"conflicts {n('consumer_offset_conflicts')}, re-read after a loss "
                             f"{n('consumer_rereads_after_loss')}, skipped messages {n('consumer_skipped_messages')}"),
        ("key lookups", f"run {lookups.get('during_run')}, final {lookups.get('final', '-')}"),
        ("put msgs/s", f"{r.get('put_msgs_per_s', '-')}"),
        ("local files deleted", f"{r['local_files_deleted']}, index uploads {r['index_uploads']}"),
        ("final verify", f"{r.get('final_verify_s', '-')} s"),
        ("tiered verify --deep", "-" if "tier_verify" not in r else
         f"exit {r['tier_verify']['exit_code']}, {r['tier_verify']['messages_read']:,} messages read, "
         f"findings {r['tier_verify']['findings'] or 'none'}"),
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
    ap.add_argument("--driver", choices=("posix", "s3"), default="posix",
                    help="the tier's backend: posix (a directory in the work directory) or s3 (moto's S3 "
                         "server, started by the driver's test kit for the whole run; TIERED_S3_ENDPOINT "
                         "names another server)")
    ap.add_argument("--kill-every", type=float, default=30.0, help="seconds of child uptime between SIGKILLs")
    ap.add_argument("--jitter", type=float, default=0.2, help="kill time varies by +- this fraction")
    ap.add_argument("--kill-during-open", type=float, default=0.1,
                    help="fraction of the kills that land while the child is still starting")
    ap.add_argument("--lose-disk-every", type=int, default=5,
                    help="every this-many kills, delete the store_path and fail over to a new one (0: never)")
    ap.add_argument("--restore-every", type=int, default=4,
                    help="every this-many kills, replace the store_path with an old copy of it (0: never)")
    ap.add_argument("--copy-age", type=int, default=2, help="kills between taking a copy and restoring it")
    ap.add_argument("--max-tier-lag", type=float, default=20.0,
                    help="seconds of store uptime an acknowledged message may stay untiered before a fault "
                         "takes it (0: no limit)")
    ap.add_argument("--max-kills", type=int, default=0,
                    help="stop after this many kills even if --minutes are not over (0: no limit)")
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
    ap.add_argument("--role", choices=("harness", "child", "look", "verify"), default="harness",
                    help=argparse.SUPPRESS)
    ap.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--store-path", help=argparse.SUPPRESS)
    ap.add_argument("--take-over", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rebuild", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.role != "harness":
        with open(os.path.join(args.dir, SETTINGS_FILE)) as fh:
            settings = json.load(fh)
        store_path = args.store_path or os.path.join(args.dir, "store-0")
        if args.role == "child":
            return Child(args.dir, args.run, settings, store_path, take_over=args.take_over,
                         rebuild=args.rebuild).main()
        if args.role == "look":
            result = look(args.dir, settings, store_path)
        else:
            result = verify(args.dir, settings, store_path, take_over=args.take_over, rebuild=args.rebuild)
        print("result " + json.dumps(result, default=str), flush=True)
        return 0
    if os.name != "posix":
        print("soak: needs POSIX (SIGKILL, the posix driver)", file=sys.stderr)
        return EXIT_FINDING
    problems = [f"--{n.replace('_', '-')} must be > 0" for n in ("minutes", "kill_every", "topics", "queues",
                                                                   "producers", "consumers", "min_size", "copy_age")
                if getattr(args, n) <= 0]
    problems += [f"--{n.replace('_', '-')} must be >= 0" for n in ("lose_disk_every", "restore_every", "max_tier_lag",
                                                                    "max_kills")
                 if getattr(args, n) < 0]
    if args.max_size < args.min_size:
        problems.append("--max-size must be >= --min-size")
    if not 0 <= args.jitter < 1 or not 0 <= args.kill_during_open <= 1:
        problems.append("--jitter must be in [0, 1) and --kill-during-open in [0, 1]")
    if args.verify_lookups != "all" and not args.verify_lookups.isdigit():
        problems.append("--verify-lookups must be a number or 'all'")
    if problems:
        ap.error("; ".join(problems))
    if args.driver == "posix":
        return harness(args)
    from tiered_core.plugins import conformance_environment

    # The emulator outlives every child (SIGKILLed or not): it is the tier.
    with tempfile.TemporaryDirectory(prefix=f"tiered-soak-{args.driver}-") as scratch, \
            conformance_environment(args.driver, scratch) as options:
        args.driver_options = {**options, "retries": 5}
        return harness(args)


if __name__ == "__main__":
    sys.exit(main())
