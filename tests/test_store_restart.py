"""Restart in the middle of dispatch, then finish: every message exactly once, in order.

* In process, on every driver: queues tiered fully, partly, not at all, and a group
  whose commit failed (still buffered) when the store is closed.
* A child process dispatching is killed with SIGKILL at a chosen write, twice, on every
  driver whose bytes outlive a process; the parent reopens and finishes.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time

import pytest

from store_faults import SPEC
from store_workload import (
    DRIVERS,
    PERSISTENT_DRIVERS,
    Workload,
    assert_exactly_once,
    backend_options,
    dispatch_until_tiered,
    small_config,
    tiered_commit,
)
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

CHILD = """
import sys
from tiered_core import StoreConfig
from tiered_core.access.tiered_store import TieredMessageStore

store = TieredMessageStore.open(StoreConfig.load(sys.argv[1], environ={}))
print("ready", flush=True)
while store.dispatch(force=True).messages:
    pass
print("done", flush=True)
store.close()
"""


@pytest.fixture(params=DRIVERS)
def driver_setup(request, tmp_path):
    return request.param, backend_options(request, request.param, tmp_path)


@pytest.fixture(params=PERSISTENT_DRIVERS)
def persistent_setup(request, tmp_path):
    return request.param, backend_options(request, request.param, tmp_path)


def finish_and_verify(config, workload: Workload) -> None:
    """Reopen, dispatch until everything is tiered, reopen with FORCE and check everything."""
    with TieredMessageStore.open(config) as store:
        assert store.flat_files.failures == []
        dispatch_until_tiered(store, workload)
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED, contiguous=False)


def test_close_with_queues_tiered_fully_partly_not_at_all_and_a_failed_group(driver_setup, tmp_path):
    driver, options = driver_setup
    config = small_config(tmp_path, driver, options, group_commit_count=50)
    workload = Workload(topics=("orders", "audit"), queues=2)
    full, part, failed, untouched = workload.queue_keys

    with TieredMessageStore.open(config) as store:
        workload.put(store, 1600)
        store.local.reput()
        store.local.flush()
        assert store.dispatcher.dispatch_queue(*full, force=True).messages == 400
        assert store.dispatcher.dispatch_queue(*part, force=True).messages == 400
        workload.put(store, 1600)  # more for every queue: `part` is now half tiered
    with TieredMessageStore.open(config) as store:
        assert tiered_commit(store, *full) == tiered_commit(store, *part) == 400
        assert tiered_commit(store, *untouched) == 0
        store.local.reput()
        store.local.flush()
        assert store.dispatcher.dispatch_queue(*full, force=True).messages == 400

    # a group appended to the tiered files whose commit failed, then the store closes
    flaky = {"inner": driver, "inner_options": options, "write_failure_rate": 0.999, "seed": 1}
    with TieredMessageStore.open(config.replace(driver=SPEC, driver_options=flaky)) as store:
        stats = store.dispatcher.dispatch_queue(*failed, force=True)
        assert stats.failed_commits >= 1 and stats.messages > 0
        flat = store.flat_files.get(*failed)
        assert flat.consume_queue_max_offset() > flat.consume_queue_commit_offset()
    finish_and_verify(config, workload)


def read_line(proc: subprocess.Popen, deadline: float) -> str:
    """The child's next stdout line ('' at its exit); fails the test past ``deadline``."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            proc.kill()
            pytest.fail("the dispatching child did not make progress in time")
        ready, _, _ = select.select([proc.stdout], [], [], remaining)
        if ready:
            return proc.stdout.readline()


def test_sigkill_while_dispatching_then_finish(persistent_setup, tmp_path):
    driver, options = persistent_setup
    config = small_config(tmp_path, driver, options, group_commit_count=64, local_commit_log_file_size=2 << 20)
    workload = Workload(topics=("orders", "audit"), queues=2, min_size=20, max_size=400, seed=9)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 4000)

    # the child dispatches through a wrapper that reports each completed driver write
    announce = {"inner": driver, "inner_options": options, "announce_writes": True}
    child_config = tmp_path / "child.toml"
    child_config.write_text(config.replace(driver=SPEC, driver_options=announce).to_toml())
    os.chmod(child_config, 0o600)  # it holds the driver options
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p)}
    rng = random.Random(f"{driver}-kill")
    progress = []
    # A group is two writes (commit log, then consume queue) and 4 queues dispatch at once:
    # after 9 writes some queue surely committed a group. 4000 messages in groups of 64
    # make over 120 writes, so two kills after at most 40 each leave the dispatch unfinished.
    for kill_after in (rng.randint(9, 40), rng.randint(9, 40)):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(child_config)], env=env,
                                stdout=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            writes = 0
            while writes < kill_after:
                line = read_line(proc, deadline)
                assert line and line != "done\n", f"the child finished before write {kill_after}"
                if line.startswith("write "):
                    writes += 1
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=60) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        with TieredMessageStore.open(config) as store:  # what survived the kill
            progress.append(sum(tiered_commit(store, *k) for k in workload.sent))
    assert 0 < progress[-1] < workload.count, progress  # killed mid-dispatch, after some progress
    finish_and_verify(config, workload)
