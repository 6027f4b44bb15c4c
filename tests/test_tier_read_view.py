"""The tier read view (tiered_core.access.view): the one read stack of the store, the
read-only view of another broker's tier, and tools that read a store's tier without it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tiered_core import Message, StoreConfig
from tiered_core.access.results import GetMessageStatus
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.access.view import TierReadView, broker_disk_cache_path
from tiered_core.errors import StateConflict

sys.path.insert(0, str(Path(__file__).parent / "static_topic"))
from static_topic_helpers import broker_configs  # noqa: E402

from tiered_core.static_topic import Cluster, TieredBrokerReader  # noqa: E402

TOPIC = "view-orders"
BODY = b"v" * 1000


def _tree(root: Path) -> list[tuple[str, int, int]]:
    return sorted((os.path.join(p, f), os.path.getsize(os.path.join(p, f)), os.stat(os.path.join(p, f)).st_mtime_ns)
                  for p, _, fs in os.walk(root) for f in fs)


def _read_all(reader: TieredBrokerReader, queue_id: int) -> list[bytes]:
    out, offset = [], reader.min_offset(TOPIC, queue_id)
    while offset < reader.max_offset(TOPIC, queue_id):
        res = reader.get_message(TOPIC, queue_id, offset, 32)
        assert res.status is GetMessageStatus.FOUND, res
        out.extend(m.body for m in res.messages)
        offset = res.next_begin_offset
    return out


def test_broker_reader_honours_read_ahead_disk_cache_path(tmp_path):
    """The read-only view of a closed broker's tier builds its read-ahead cache like the
    broker's own store: with ``read_ahead_disk_cache_path`` set, what the memory tier evicts
    goes to a disk tier (a directory of its own per viewed broker) and is served from there."""
    disk = tmp_path / "disk-cache"
    # memory budget for about one read-ahead batch of one queue: reading the other queue evicts it
    configs = broker_configs(tmp_path, ("a", "b"), read_ahead_cache_bytes=150_000,
                             read_ahead_disk_cache_path=str(disk))
    with Cluster.open(configs) as cluster:
        cluster.create_static_topic(TOPIC, 2, ["a"])
        for i in range(200):
            cluster.put_message(Message(TOPIC, BODY[:-4] + b"%04d" % i), i % 2)
        cluster.dispatch(force=True)
        cluster.close_broker("a")
    reader = TieredBrokerReader(configs[1], "a")
    try:
        assert reader.view is not None and reader.cache is reader.view.cache
        assert reader.view.disk_cache_path == str(disk / "tier-view-a")
        first = _read_all(reader, 0)
        _read_all(reader, 1)  # evicts queue 0's batches from memory, to the disk tier
        assert _read_all(reader, 0) == first == [BODY[:-4] + b"%04d" % i for i in range(0, 200, 2)]
        assert reader.cache.stats.disk_hits > 0
        assert os.path.isdir(disk / "tier-view-a")
    finally:
        reader.close()


def test_disk_tiers_of_two_brokers_views_are_apart(tmp_path):
    """Cache keys name topic, queue and offset only: two brokers' views never share a directory,
    nor one with the store whose config they borrow."""
    config = StoreConfig.from_mapping({"store_path": str(tmp_path / "a"), "driver": "posix", "broker": "a",
                                       "options": {"root": str(tmp_path / "tier")},
                                       "read_ahead_disk_cache_path": str(tmp_path / "d")})
    paths = {config.read_ahead_disk_cache_path, broker_disk_cache_path(config, "a"),
             broker_disk_cache_path(config, "b")}
    assert len(paths) == 3
    assert broker_disk_cache_path(config.replace(read_ahead_disk_cache_path=None), "a") is None


def test_store_reads_through_its_view(tmp_path):
    """The store's flat files, cache and fetcher are its view's; closing the store closes them."""
    config = StoreConfig.from_mapping({"store_path": str(tmp_path / "s"), "driver": "posix",
                                       "options": {"root": str(tmp_path / "tier")}, "storage_level": "force",
                                       "read_ahead_disk_cache_path": str(tmp_path / "disk")})
    with TieredMessageStore.open(config) as store:
        assert (store.flat_files, store.cache, store.fetcher) == (store.view.flat_files, store.view.cache,
                                                                  store.view.fetcher)
        assert store.view.driver is store.driver and store.view.metadata is store.metadata
        assert store.view.disk_cache_path == str(tmp_path / "disk")
        for i in range(5):
            store.put_message(Message(TOPIC, b"m%d" % i))
        store.dispatch(force=True)
        res = store.get_message("g", TOPIC, 0, 0, 10)
        assert [m.body for m in res.messages] == [b"m%d" % i for i in range(5)]
        assert store.view.queues() == [(TOPIC, 0)]


def test_open_read_only_reads_a_stores_tier_and_writes_nothing(tmp_path):
    """What verify and key queries outside a store use: a view of a store's own tier from its
    metadata, opened read-only; it reads every message and writes nothing anywhere."""
    config = StoreConfig.from_mapping({"store_path": str(tmp_path / "s"), "driver": "posix",
                                       "options": {"root": str(tmp_path / "tier")}})
    with TieredMessageStore.open(config) as store:
        for i in range(40):
            store.put_message(Message(TOPIC, b"m%d" % i), i % 2)
        store.dispatch(force=True)
    before = _tree(tmp_path)
    with TierReadView.open_read_only(config) as view:
        assert sorted(view.queues()) == [(TOPIC, 0), (TOPIC, 1)]
        flat = view.flat_file(TOPIC, 1)
        assert flat is not None and flat.consume_queue_commit_offset() == 20
        assert view.flat_file(TOPIC, 7) is None
        res = view.fetcher.get_message(TOPIC, 1, 0, 32)
        assert [m.body for m in res.messages] == [b"m%d" % i for i in range(1, 40, 2)]
        with pytest.raises(StateConflict):
            view.driver.create("anything")
        assert view.prop_crc is view.fetcher.prop_crc
    assert _tree(tmp_path) == before
