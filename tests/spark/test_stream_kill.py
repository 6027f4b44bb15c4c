"""Acceptance of issue 13: the mirror pipeline survives SIGKILL.

A producer process keeps putting into store A and dispatching to its tier while
``tiered spark stream`` (a subprocess in its own process group: the CLI, Spark's JVM and
its Python workers) mirrors A into store B with ``maxMessagesPerTrigger=500``. The whole
process group is SIGKILLed at least three times, each time at a random moment after the
run made progress (so kills land in planning, in tasks, in the sink's commit...; the
second one is aimed inside a commit, after the sink recorded its pending batch), and
restarted from its checkpoint. A last run catches up and is stopped with SIGTERM (exit 0).
B must then hold every produced message exactly once, at A's queue offsets, in per-queue
order. Variants: posix tiers, and both tiers on the GCS emulator (fake-gcs-server).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

from sample_store import SampleSpec, write_sample
from spark_helpers import write_config
from stream_helpers import descendants, expected_bodies, kill_group, queue_bodies, start_producer, stream_cli, wait_for

from tiered_core import StoreConfig, TieredMessageStore
from tiered_core.spark.jobs.mirror import STARTED_LINE
from tiered_core.spark.sink import read_ledger

TOTAL = 4000
KILLS = 3
TOPICS = ("orders", "audit")
QUEUES = 2


def _committed(target: str, sink_id: str) -> int:
    try:
        return read_ledger(target, sink_id).committed
    except Exception:  # the store is not created yet
        return -1


def _wait_pending(target: str, sink_id: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if read_ledger(target, sink_id).pending is not None:
            return True
        time.sleep(0.01)
    return False


def _mirror_with_kills(tmp_path, source: str, target: str) -> None:
    seed = int(os.environ.get("TIERED_KILL_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    checkpoint = str(tmp_path / "checkpoint")
    sink_id = "checkpoint:" + checkpoint
    log_path = tmp_path / "stream.log"
    producer = start_producer(source, TOTAL, pause=0.3, topics=TOPICS, queues=QUEUES)
    kills = []
    try:
        with open(log_path, "a") as log:
            while len(kills) < KILLS:
                before = _committed(target, sink_id)
                proc = stream_cli(source, target, checkpoint, "--max-messages-per-trigger", "500",
                                  "--trigger-interval", "0.5", log=log)
                try:
                    # Let it get going (a batch committed in this run), then kill it at a random moment.
                    wait_for(lambda: _committed(target, sink_id) > before or proc.poll() is not None, 240,
                             f"a micro-batch of run {len(kills) + 1} (seed {seed}; log {log_path})")
                    assert proc.poll() is None, f"the stream exited with {proc.returncode}: see {log_path}"
                    if len(kills) == 1:
                        # This kill aims inside a commit: as soon as the sink records a pending batch.
                        _wait_pending(target, sink_id, 60)
                    else:
                        time.sleep(rng.uniform(0.0, 2.5))
                finally:
                    kill_group(proc)
                kills.append(read_ledger(target, sink_id))
            out, err = producer.communicate(timeout=300)
            assert producer.returncode == 0, err
            assert f"produced {TOTAL}" in out

            # The last run catches up, then stops on SIGTERM, cleanly.
            log.flush()
            logged_before = log_path.stat().st_size
            proc = stream_cli(source, target, checkpoint, "--max-messages-per-trigger", "500",
                              "--trigger-interval", "0.5", "--json", log=log)
            counts: dict = {}

            def caught_up() -> bool:
                counts.clear()
                counts.update({k: len(v) for k, v in queue_bodies(target).items()})
                return sum(counts.values()) >= TOTAL or proc.poll() is not None

            def running() -> bool:  # this run's query started (B may hold everything already)
                with open(log_path, "rb") as f:
                    f.seek(logged_before)
                    return STARTED_LINE.encode() in f.read() or proc.poll() is not None

            try:
                wait_for(running, 240, f"the catch-up run's query to start (seed {seed}; log {log_path})")
                wait_for(caught_up, 240, lambda: f"the catch-up run (seed {seed}; log {log_path}; B holds {counts})")
                assert proc.poll() is None, f"the stream exited with {proc.returncode}: see {log_path}"
                proc.send_signal(signal.SIGTERM)
                out, _ = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    kill_group(proc)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    assert proc.returncode == 0, f"SIGTERM exit status {proc.returncode}; see {log_path}"
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["stopped"] == "signal"
    assert len(kills) >= KILLS
    # The aimed kill interrupted a commit (its batch was pending), so the restart replayed it.
    assert kills[1].pending is not None, f"kills left these ledgers: {kills} (seed {seed})"

    # Every produced message exactly once, at its queue offset, in per-queue order.
    want = expected_bodies(TOTAL, TOPICS, QUEUES)
    got = queue_bodies(target)
    assert sorted(got) == sorted(want)
    for key, bodies in want.items():
        assert got[key] == list(enumerate(bodies)), f"{key} (seed {seed})"
    # ...and B mirrors A message for message.
    assert got == queue_bodies(source)
    assert read_ledger(target, sink_id).pending is None
    # Every 40th message is found on B by its key, once.
    with TieredMessageStore.open(StoreConfig.load(target)) as store:
        for i in range(0, TOTAL, 40):
            topic, queue = TOPICS[i % len(TOPICS)], (i // len(TOPICS)) % QUEUES
            hits = [(m.queue_id, bytes(m.body)) for m in store.query_message(topic, f"k{i}").messages]
            assert len(hits) == 1 and hits[0][0] == queue, f"k{i}: {hits} (seed {seed})"


def test_mirror_survives_sigkill_posix(tmp_path):
    source = write_config(tmp_path / "a.toml", tmp_path / "a", cl_max=64 << 10, cq_max=4000)
    target = write_config(tmp_path / "b.toml", tmp_path / "b", cl_max=64 << 10, cq_max=4000)
    _mirror_with_kills(tmp_path, source, target)


def test_mirror_survives_sigkill_gcs(tmp_path, fake_gcs):
    from tiered_driver_gcs.testing import GCS_BUCKET

    prefix = f"kill-{os.getpid()}-{time.time_ns()}"
    source = write_config(tmp_path / "a.toml", tmp_path / "a", driver="gcs", cl_max=64 << 10, cq_max=4000,
                          options=fake_gcs.driver_options(GCS_BUCKET, prefix + "/a"))
    target = write_config(tmp_path / "b.toml", tmp_path / "b", driver="gcs", cl_max=64 << 10, cq_max=4000,
                          options=fake_gcs.driver_options(GCS_BUCKET, prefix + "/b"))
    _mirror_with_kills(tmp_path, source, target)




def test_sigterm_during_startup_ends_cleanly(tmp_path):
    """A SIGTERM while Spark is still starting (the JVM launched, no query yet) ends the run
    with exit status 0, stopped by "signal", and nothing mirrored: the handlers are in place
    before anything slow starts."""
    source = write_config(tmp_path / "a.toml", tmp_path / "a")
    write_sample(StoreConfig.load(source), SampleSpec(topics=("orders",), queues=1, messages=5))  # it must exist
    target = write_config(tmp_path / "b.toml", tmp_path / "b")
    with open(tmp_path / "stream.log", "a") as log:
        proc = stream_cli(source, target, str(tmp_path / "checkpoint"), "--json", log=log)
        try:
            wait_for(lambda: descendants(proc.pid) or proc.poll() is not None, 60, "Spark's JVM to start")
            assert proc.poll() is None, f"the stream exited with {proc.returncode}: see {tmp_path / 'stream.log'}"
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=120)
        finally:
            kill_group(proc)  # also whatever of Spark outlived the CLI
    assert proc.returncode == 0, f"SIGTERM exit status {proc.returncode}; see {tmp_path / 'stream.log'}"
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["stopped"] == "signal"
    assert summary["rows"] == 0
    assert not (tmp_path / "checkpoint" / "commits").exists()
