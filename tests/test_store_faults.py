"""Dispatch through a backend that fails 10 % of writes, on every driver.

Writes fail before landing, after landing (the answer is lost) or partially (a prefix
lands). Dispatch rounds are repeated until everything is tiered; then, reopened on the
plain driver with FORCE, every message must be readable exactly once, in queue order,
with its body intact.
"""

from __future__ import annotations

import random

import pytest

from store_faults import FAULT_KINDS, SPEC, flaky_of
from store_workload import (
    DRIVERS,
    Workload,
    assert_exactly_once,
    backend_options,
    dispatch_until_tiered,
    small_config,
)
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore

MESSAGES = 10_000
FAILURE_RATE = 0.10


@pytest.fixture(params=DRIVERS)
def driver_setup(request, tmp_path):
    return request.param, backend_options(request, request.param, tmp_path)


def test_ten_percent_failed_writes_lose_and_duplicate_nothing(driver_setup, tmp_path):
    driver, options = driver_setup
    flaky = {"inner": driver, "inner_options": options, "write_failure_rate": FAILURE_RATE, "seed": 10}
    # small groups and segments: hundreds of writes, rolls of both tiered files
    config = small_config(tmp_path, SPEC, flaky, local_commit_log_file_size=2 << 20,
                          group_commit_count=64, commit_log_max_size=128 << 10)
    workload = Workload(topics=("orders", "audit"), queues=2, min_size=20, max_size=300, seed=3)

    with TieredMessageStore.open(config) as store:
        workload.put(store, MESSAGES)
        rounds = dispatch_until_tiered(store, workload, max_rounds=2000)
        flaky = flaky_of(store.driver)
        writes, faults = flaky.calls["write"], flaky.faults.counts
        assert writes > 200, writes
        assert set(faults) == set(FAULT_KINDS), faults  # every kind happened
        # about the configured share failed (a loose bound: the point is that many did)
        assert sum(faults.values()) > writes * FAILURE_RATE / 2, (faults, writes)
        assert rounds > 1

    plain = config.replace(driver=driver, driver_options=options, storage_level="FORCE")
    with TieredMessageStore.open(plain) as store:
        assert store.flat_files.failures == []
        assert workload.count == MESSAGES
        assert_exactly_once(store, workload, tier=StoreTier.TIERED, contiguous=False)
        # the tiered index was written through the same faults: keys still find their message once
        rng = random.Random(4)
        for (topic, qid), sent in workload.sent.items():
            for offset in rng.sample(range(len(sent)), 10):
                found = store.query_message(topic, sent[offset].key, max_count=4).messages
                assert [(m.queue_id, m.queue_offset) for m in found] == [(qid, offset)], (topic, sent[offset].key)
