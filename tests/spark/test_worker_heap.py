"""What the Spark-facing readers and writers do to a reused Python worker's garbage collector
(tiered_core.spark.worker_heap): the first task calls freeze what is alive, later ones do
not, a forked worker starts counting afresh, and every method Spark runs as a task or a
planning call goes through it. Run in child interpreters: a freeze is for a process's life."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tiered_core.spark import failures


def _child(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_first_calls_freeze_what_is_alive_and_later_ones_do_not():
    got = _child("""
        import gc, json, os
        from tiered_core.spark.worker_heap import FREEZES, freeze_survivors
        counts = [gc.get_freeze_count()]
        kept = [[i] for i in range(1000)]  # alive across the first call
        for _ in range(FREEZES + 2):
            freeze_survivors()
            counts.append(gc.get_freeze_count())
            more = [[i] for i in range(1000)]  # alive when the next call comes
            kept.append(more)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # a forked worker: its first call freezes again
            before = gc.get_freeze_count()
            extra = [[i] for i in range(500)]
            freeze_survivors()
            os.write(w, json.dumps([before, gc.get_freeze_count()]).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(json.dumps({"counts": counts, "freezes": FREEZES, "fork": json.loads(os.read(r, 1000))}))
    """)
    counts, freezes = got["counts"], got["freezes"]
    assert freezes >= 1
    assert all(counts[i + 1] > counts[i] for i in range(freezes)), counts  # each of the first calls froze more
    assert len(set(counts[freezes:])) == 1, counts  # the later ones froze nothing
    before, after = got["fork"]
    assert after > before  # the forked process counted afresh


def test_a_full_collection_after_a_freeze_skips_what_was_frozen():
    got = _child("""
        import gc, json
        from tiered_core.spark.worker_heap import freeze_survivors
        heap = [{"k": [i]} for i in range(200_000)]  # a loaded library's worth of objects
        gc.collect()
        tracked = len(gc.get_objects())
        freeze_survivors()
        print(json.dumps({"before": tracked, "after": len(gc.get_objects())}))
    """)
    assert got["before"] > 400_000 and got["after"] < got["before"] // 10, got


def test_every_method_spark_runs_as_a_task_freezes_first(monkeypatch):
    calls = []
    monkeypatch.setattr(failures, "freeze_survivors", lambda: calls.append("freeze"))

    class Plain:
        def partitions(self):
            calls.append("partitions")
            return []

        def read(self, partition):
            calls.append("read")
            yield partition

        def write(self, iterator):
            calls.append("write")

        def latestOffset(self):  # noqa: N802 (PySpark's name): not a task, no freeze
            calls.append("latestOffset")
            return {}

    facing = failures.spark_facing(Plain, "Facing", __name__)()
    facing.partitions()
    list(facing.read(1))
    facing.write(iter(()))
    facing.latestOffset()
    assert calls == ["freeze", "partitions", "freeze", "read", "freeze", "write", "latestOffset"]
    assert set(failures.TASK_METHODS) <= set(failures.SPARK_METHODS)
