"""The writer session of the jobs that write a store without opening it (Spark import,
reindex, the streaming sink, migrate's target): what it holds, what it refuses, and that a
refusal leaves nothing held. Real parts: the memory driver, SQLite metadata, the flock."""

from __future__ import annotations

import os
import threading
import time

import pytest

from store_workload import memory_options, small_config
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.access.writer_session import WriterSession, open_staged_queue, queue_outcome, record_outcome
from tiered_core.codec.message import Message
from tiered_core.errors import PrefixOwned, StateConflict
from tiered_core.local.local_store import acquire_store_lock, release_store_lock
from tiered_core.spark.appender import QueueAppender


@pytest.fixture
def options(request):
    return memory_options(request)


def test_it_holds_the_lock_and_the_prefix_and_opens_metadata_only_when_used(tmp_path, options):
    config = small_config(tmp_path, "memory", options)
    with WriterSession(config) as session:
        assert session.owner.epoch == 1 and session.driver is not None
        with pytest.raises(StateConflict, match="open in another process"):
            acquire_store_lock(config.store_path)  # flock: another descriptor is refused too
        assert not os.path.exists(config.effective_metadata_path())  # not touched until used
    assert not os.path.exists(config.effective_metadata_path())
    release_store_lock(acquire_store_lock(config.store_path))  # released at exit
    with WriterSession(config) as again:  # the same store again: the same owner
        assert again.owner.epoch == 1
        assert again.metadata.get_queue("orders", 0) is None
    assert os.path.exists(config.effective_metadata_path())


def test_a_held_lock_is_refused_at_once_or_after_the_timeout(tmp_path, options):
    config = small_config(tmp_path, "memory", options)
    os.makedirs(config.store_path)
    lock = acquire_store_lock(config.store_path)
    try:
        with pytest.raises(StateConflict, match="open in another process"):
            WriterSession(config).__enter__()
        started = time.monotonic()
        with pytest.raises(StateConflict, match="stayed locked by another process for 0s") as info:
            WriterSession(config, lock_timeout=0.3, writer="streaming sink").__enter__()
        assert time.monotonic() - started >= 0.3
        assert "only by this streaming sink" in str(info.value) and info.value.context["path"] == config.store_path
        # A writer that waits gets the lock once it is released.
        threading.Timer(0.2, release_store_lock, args=(lock,)).start()
        lock = None
        with WriterSession(config, lock_timeout=5):
            pass
    finally:
        if lock is not None:
            release_store_lock(lock)


def test_a_prefix_another_store_owns_is_refused_and_nothing_stays_held(tmp_path, options):
    first = small_config(tmp_path / "a", "memory", options)
    second = small_config(tmp_path / "b", "memory", options)  # same cluster, broker and backend
    with TieredMessageStore.open(first):
        pass
    with pytest.raises(PrefixOwned):
        WriterSession(second).__enter__()
    release_store_lock(acquire_store_lock(second.store_path))  # the lock was given back
    assert not os.path.exists(second.effective_metadata_path())


def test_a_staged_queue_is_readable_only_after_its_outcome_is_recorded(tmp_path, options):
    config = small_config(tmp_path, "memory", options)
    with WriterSession(config) as session:
        with open_staged_queue(session.driver, config, session.seed("orders", 0),
                               str(tmp_path / "scratch.db")) as (flat, scratch):
            appender = QueueAppender(flat)
            for i in range(5):
                appender.append(i, Message(topic="orders", body=b"m%d" % i), 1_700_000_000_000 + i)
            outcome = queue_outcome(scratch, flat, appender.finish())
        assert outcome["appended"] == 5 and outcome["segments"]
        assert session.metadata.get_queue("orders", 0) is None  # uploaded, not recorded
        with session.metadata.transaction():
            assert record_outcome(session.metadata, [outcome]) == len(outcome["segments"])
    with TieredMessageStore.open(config) as store:
        got = store.get_message("g", "orders", 0, 0, 10)
    assert [bytes(m.body) for m in got.messages] == [b"m%d" % i for i in range(5)]
