"""The mirror pipeline: a streaming query that copies topics from one tiered store to another.

``readStream.format("tiered")`` over store A (its metadata-committed messages), the sink
columns with A's queue offsets and times, ``writeStream.format("tiered")`` into store B
with a checkpoint. B ends up holding A's messages at the same queue offsets, each once
(the sink's exactly-once contract, :mod:`tiered_core.spark.sink`), whatever
happens to the process running the query: a restart resumes from the checkpoint.
``tiered spark stream`` runs it until SIGTERM/SIGINT (or, with ``available_now``, until
everything A holds at the start is copied).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from tiered_core.errors import ConfigError

#: Seconds between micro-batches by default.
DEFAULT_TRIGGER_SECONDS = 1.0
#: How the progress output starts the line that says the query runs.
STARTED_LINE = "tiered spark stream: query started"


@dataclass(frozen=True)
class StreamResult:
    """Totals of one run of the pipeline (this process only; a restart counts afresh).

    ``rows``: messages read from the source in ``batches`` micro-batches; of them
    ``mirrored`` were written to the target, ``skipped`` were already there at their queue
    offsets (stored before this run, or by an interrupted attempt of the same micro-batch),
    and ``replayed`` belonged to micro-batches the target had committed before (Spark
    re-runs the last one after a restart), so nothing was done for them.
    """

    batches: int
    rows: int
    seconds: float
    stopped: str  # "signal", "available-now" or "stop-event"
    mirrored: int = 0
    skipped: int = 0
    replayed: int = 0

    def summary(self) -> str:
        parts = [f"mirrored {self.mirrored}"]
        if self.skipped:
            parts.append(f"skipped {self.skipped} already in the target at their queue offsets (stored there "
                         "before this run: the target's queues were ahead of this checkpoint)")
        if self.replayed:
            parts.append(f"{self.replayed} in micro-batches the target had committed before (a replay after a "
                         "restart; nothing written)")
        return (f"read {self.rows} messages from the source in {self.batches} micro-batches: "
                f"{', '.join(parts)}; in {self.seconds:.1f}s (stopped by {self.stopped})")


def check_mirror(source_config: str | os.PathLike, target_config: str | os.PathLike,
                 checkpoint: str | os.PathLike | None) -> None:
    """Refuse a pipeline that would write into its source or into a store: the target is the
    source (:func:`check_stores`, :class:`ConfigError`), the target's ``store_path``, tier
    root or metadata file is, contains or lies inside the source's, or the checkpoint is
    empty or is, contains or lies inside a location of either store
    (:class:`~tiered_core.errors.InvalidPath` naming ``--to-config`` / ``--checkpoint``)."""
    from tiered_core.config import StoreConfig
    from tiered_core.ops.output_paths import check_output_path, check_separate_stores

    check_stores(source_config, target_config)
    a, b = StoreConfig.load(source_config), StoreConfig.load(target_config)
    check_separate_stores(b, [a], option="--to-config")
    check_output_path(checkpoint, [a, b], option="--checkpoint", what="checkpoint")
    check_checkpoint_target(target_config, checkpoint)


def mirror_sink_id(target_config: str | os.PathLike, checkpoint: str | os.PathLike) -> str:
    """The sink id the mirror's sink records its ledger under in the target (its checkpoint's)."""
    from tiered_core.spark.sink import parse_sink_options

    return parse_sink_options({"config": os.fspath(target_config),
                               "checkpointLocation": os.path.abspath(os.fspath(checkpoint))}).sink_id


def check_checkpoint_target(target_config: str | os.PathLike, checkpoint: str | os.PathLike | None) -> None:
    """Refuse a checkpoint that committed micro-batches into another target: the sink records
    each batch in the target's ledger before Spark writes the checkpoint's commit of it, so a
    target whose ledger for this checkpoint is behind the checkpoint's last commit never got
    those batches (:class:`StateConflict` naming both). A query resumed there would start past
    what that target holds: a silent partial mirror, and the first target's pipeline broken."""
    from tiered_core.errors import StateConflict
    from tiered_core.spark.sink import read_ledger

    if checkpoint is None or "://" in os.fspath(checkpoint):
        return
    commits = os.path.join(os.fspath(checkpoint), "commits")
    try:
        done = [int(name) for name in os.listdir(commits) if name.isdigit()]
    except OSError:
        return  # a new checkpoint
    if not done:
        return
    ledger = read_ledger(target_config, mirror_sink_id(target_config, checkpoint))
    if ledger.committed < max(done):
        held = "no record of it" if ledger.committed < 0 else f"a record up to micro-batch {ledger.committed} only"
        raise StateConflict(
            f"checkpoint {os.fspath(checkpoint)!r} committed micro-batches up to {max(done)} into a target, and "
            f"{os.fspath(target_config)} holds {held}: it is not the target this checkpoint mirrored into (or it "
            "lost them). Resumed here, the query would start past what it holds. Give a new target a new "
            "--checkpoint, or run this one against its own target", checkpoint=os.fspath(checkpoint),
            target=os.fspath(target_config), committed=max(done), ledger=ledger.committed)


def check_stores(source_config: str | os.PathLike, target_config: str | os.PathLike) -> None:
    """Refuse a pipeline whose target is its source (same local store or same tier prefix)."""
    from tiered_core.config import StoreConfig

    a, b = StoreConfig.load(source_config), StoreConfig.load(target_config)
    same_root = os.path.realpath(a.store_path) == os.path.realpath(b.store_path)
    same_tier = (a.driver == b.driver and a.effective_driver_options() == b.effective_driver_options()
                 and (a.cluster, a.broker) == (b.cluster, b.broker))
    if same_root or same_tier:
        raise ConfigError(f"{b.source or 'target config'}: the target store is the source store "
                          f"({'store_path' if same_root else 'tier prefix'}); mirror into another store",
                          key="store_path" if same_root else "driver", source=b.source)


def mirror_query(spark, source_config: str | os.PathLike, target_config: str | os.PathLike,
                 checkpoint: str | os.PathLike, *, topics: str | None = None, max_messages: int | None = None,
                 trigger_seconds: float = DEFAULT_TRIGGER_SECONDS, available_now: bool = False,
                 starting_offsets: str | None = None):
    """Start the mirror query and return Spark's ``StreamingQuery``."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format("tiered").option("config", os.fspath(source_config))
    if topics:
        reader = reader.option("topics", topics)
    if max_messages:
        reader = reader.option("maxMessagesPerTrigger", str(max_messages))
    if starting_offsets:
        reader = reader.option("startingOffsets", starting_offsets)
    rows = reader.load().select(
        "topic", "queue_id", "queue_offset",
        F.unix_millis("store_timestamp").alias("store_timestamp"),
        F.unix_millis("born_timestamp").alias("born_timestamp"),
        "keys", "tags", "properties", "body")
    writer = (rows.writeStream.format("tiered").option("config", os.fspath(target_config))
              .option("checkpointLocation", os.path.abspath(os.fspath(checkpoint)))
              .queryName("tiered-mirror"))
    writer = writer.trigger(availableNow=True) if available_now else \
        writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[list[str]]:
    """While inside, SIGTERM and SIGINT set ``stop`` instead of ending the process, and the
    yielded list gets the signal's name; the previous handlers come back on leaving.

    Enter it before anything slow (Spark's start-up takes seconds), so a stop asked for
    during start-up is honoured too. Outside the main thread it changes nothing.
    """
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def on_signal(signum, frame) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def run_mirror(spark, source_config: str | os.PathLike, target_config: str | os.PathLike,
               checkpoint: str | os.PathLike, *, topics: str | None = None, max_messages: int | None = None,
               trigger_seconds: float = DEFAULT_TRIGGER_SECONDS, available_now: bool = False,
               starting_offsets: str | None = None, stop: threading.Event | None = None,
               progress: TextIO | None = sys.stderr, handle_signals: bool = True) -> StreamResult:
    """Run the mirror until ``stop`` is set, SIGTERM/SIGINT arrives (when ``handle_signals``,
    from the main thread), or (``available_now``) A's messages at the start are copied.

    A ``stop`` already set returns at once without starting the query. The query is
    stopped cleanly before returning. A failed query raises the typed error its task or
    commit raised (:func:`~tiered_core.spark.failures.task_error`).
    """
    from tiered_core.spark.sink import read_ledger

    started = time.perf_counter()
    check_mirror(source_config, target_config, checkpoint)
    sink_id = mirror_sink_id(target_config, checkpoint)
    before = read_ledger(target_config, sink_id)
    stop = stop or threading.Event()
    signals = stop_on_signals(stop) if handle_signals else contextlib.nullcontext([])
    with signals as received:
        batches, rows, finished = _run_query(spark, source_config, target_config, checkpoint, stop,
                                             topics=topics, max_messages=max_messages,
                                             trigger_seconds=trigger_seconds, available_now=available_now,
                                             starting_offsets=starting_offsets, progress=progress)
    after = read_ledger(target_config, sink_id)
    mirrored, skipped = after.appended - before.appended, after.skipped - before.skipped
    reason = "signal" if received else "available-now" if finished else "stop-event"
    return StreamResult(batches, rows, time.perf_counter() - started, reason, mirrored, skipped,
                        max(0, rows - mirrored - skipped))


def _run_query(spark, source_config, target_config, checkpoint, stop: threading.Event, *, topics,
               max_messages, trigger_seconds, available_now, starting_offsets,
               progress: TextIO | None) -> tuple[int, int, bool]:
    """Run the query until it ends or ``stop`` is set: (micro-batches, rows, ended by itself)."""
    from tiered_core.spark.failures import task_error

    if stop.is_set():
        return 0, 0, False
    batches = rows = 0
    seen: set[int] = set()

    def report(query) -> None:
        nonlocal batches, rows
        for p in query.recentProgress:
            batch = int(p["batchId"])
            if batch in seen:
                continue
            seen.add(batch)
            n = int(p.get("numInputRows") or 0)
            if n:
                batches += 1
                rows += n
            if n and progress is not None:
                print(f"tiered spark stream: batch {batch}: {n} messages (total {rows} in this run)",
                      file=progress, flush=True)

    try:
        query = mirror_query(spark, source_config, target_config, checkpoint, topics=topics,
                             max_messages=max_messages, trigger_seconds=trigger_seconds,
                             available_now=available_now, starting_offsets=starting_offsets)
    except Exception as exc:  # load()/start() raise Spark's wrapping of the source's or sink's typed error
        error = task_error(exc, "the mirror query could not start", fallback=False)
        if error is None:
            raise
        raise error from None
    if progress is not None:
        print(f"{STARTED_LINE} (id {query.id}, checkpoint {os.fspath(checkpoint)})", file=progress, flush=True)
    try:
        while query.isActive and not stop.is_set():
            stop.wait(0.5)
            report(query)
        finished = not query.isActive and not stop.is_set()
        error = query.exception()
        if error is not None:
            raise task_error(error, "the mirror query failed (restart it: it resumes from its checkpoint)")
    finally:
        if query.isActive:
            query.stop()
    report(query)
    return batches, rows, finished


__all__ = ["DEFAULT_TRIGGER_SECONDS", "STARTED_LINE", "StreamResult", "check_mirror", "check_stores", "mirror_query",
           "run_mirror", "stop_on_signals"]
