"""Helpers of the streaming tests: a producer process feeding a store, the `tiered spark
stream` CLI as a subprocess, and reading a store's queues back (flat API) for the
exactly-once check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: The producer, run as ``python -c PRODUCER config total rounds_pause topics queues``: it puts
#: ``total`` messages round-robin over topics x queues, bodies ``topic/queue/seq``, and
#: dispatches to the tier after every round of 100 (so the tier grows while a query reads it).
PRODUCER = r"""
import sys, time
from tiered_core import Message, StoreConfig, TieredMessageStore
config, total, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
topics, queues = sys.argv[4].split(","), int(sys.argv[5])
store = TieredMessageStore.open(StoreConfig.load(config))
seq = {}
try:
    for i in range(total):
        topic, queue = topics[i % len(topics)], (i // len(topics)) % queues
        n = seq.get((topic, queue), 0)
        seq[(topic, queue)] = n + 1
        r = store.put_message(Message(topic=topic, body=f"{topic}/{queue}/{n}".encode(), keys=[f"k{i}"],
                                      tags="t%d" % (i % 3), properties={"p": str(i)}), queue_id=queue)
        if (i + 1) % 100 == 0:
            store.dispatch(force=True)
            time.sleep(pause)
    store.dispatch(force=True)
finally:
    store.close()
print("produced", total, flush=True)
"""


def start_producer(config: str, total: int, *, pause: float = 0.2, topics=("orders", "audit"),
                   queues: int = 2, timeout: float = 120) -> subprocess.Popen:
    """:data:`PRODUCER` in a process, returned once the store exists (its metadata file):
    a stream started before would rightly refuse a source store that is not there yet."""
    from tiered_core import StoreConfig

    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, config, str(total), str(pause), ",".join(topics),
                             str(queues)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metadata = StoreConfig.load(config).effective_metadata_path()
    deadline = time.monotonic() + timeout
    while not os.path.exists(metadata):
        if proc.poll() is not None:
            raise AssertionError(f"the producer exited with {proc.returncode} before creating the store: "
                                 f"{proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the producer created no store at {metadata!r} in {timeout} s")
        time.sleep(0.05)
    return proc


def expected_bodies(total: int, topics=("orders", "audit"), queues: int = 2) -> dict[tuple[str, int], list[bytes]]:
    """What :data:`PRODUCER` puts, per queue in order."""
    out: dict[tuple[str, int], list[bytes]] = {}
    for i in range(total):
        topic, queue = topics[i % len(topics)], (i // len(topics)) % queues
        seq = len(out.setdefault((topic, queue), []))
        out[(topic, queue)].append(f"{topic}/{queue}/{seq}".encode())
    return out


CLI = "import sys; from tiered_core.cli import main; sys.exit(main())"


def stream_cli(source: str, target: str, checkpoint: str, *extra: str, log=None) -> subprocess.Popen:
    """``tiered spark stream`` in its own process group (so a kill takes Spark's JVM and Python workers too)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               TIERED_SPARK_MASTER="local[2]")
    return subprocess.Popen([sys.executable, "-c", CLI, "spark", "stream", "--config", source,
                             "--to-config", target, "--checkpoint", checkpoint, *extra],
                            stdout=subprocess.PIPE, stderr=log if log is not None else subprocess.PIPE, text=True,
                            env=env, start_new_session=True)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process and everything it started, as a machine crash would: its process
    group (the CLI, Spark's JVM) and every descendant (PySpark's daemon and workers run in
    process groups of their own, and a commit worker would otherwise finish its commit)."""
    pids = descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)


def queue_messages(config_path: str, topic: str | None = None, queue_id: int | None = None) -> dict:
    """Every message the store's metadata records as committed, per queue in offset order,
    read as the streaming source reads (metadata views with closed ends, then the executors'
    validated read path, here in-process): nothing beyond the metadata, nothing written."""
    from tiered_core.config import StoreConfig
    from tiered_core.spark.config_source import ConfigSource
    from tiered_core.spark.source.options import ReadOptions
    from tiered_core.spark.source.stream_offsets import queue_views
    from tiered_core.spark.source.partition_reader import read_messages

    source, read = ConfigSource.from_file(config_path), ReadOptions()
    config = StoreConfig.load(config_path)
    metadata = config.open_metadata()
    try:
        views = queue_views(config, metadata)
    finally:
        metadata.close()
    out: dict = {}
    for key, view in sorted(views.items()):
        if (topic is not None and key[0] != topic) or (queue_id is not None and key[1] != queue_id):
            continue
        rows = out.setdefault(key, [])
        for part in view.partitions(view.min_offset, view.end_offset):
            for messages in read_messages(source, part, read):
                rows.extend(messages)
    return out


def queue_bodies(config_path: str) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """:func:`queue_messages` as ``(queue_offset, body)`` per queue."""
    return {k: [(m.queue_offset, bytes(m.body)) for m in v] for k, v in queue_messages(config_path).items()}


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")


def run_available_now_into(df, sink, checkpoint):
    """Run streaming DataFrame ``df`` into foreachBatch ``sink`` with ``trigger(availableNow=True)``
    from ``checkpoint`` until it ends; its exception fails the test. Returns ``sink``."""
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert not query.isActive
    if query.exception() is not None:
        raise AssertionError(str(query.exception()))
    return sink
