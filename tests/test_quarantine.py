"""The quarantine of ``tiered repair`` (``{prefix}.quarantine/``): it never counts as a store
object (open, rebuild, listing), a move copies, checks the copy and records it in the
manifest before the original goes, a crash in between is finished by the next run, and
``purge`` deletes only manifest-listed copies older than the limit."""

from __future__ import annotations

import json
import zlib

import pytest

from tiered_core import Message, StoreConfig
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.codec.naming import segment_path
from tiered_core.common import FileSegmentType
from tiered_core.flat.ownership import (
    is_owner_record,
    is_reserved_path,
    quarantine_prefix,
    segment_objects,
    tier_prefix,
)
from tiered_core.ops.rebuild import rebuild_metadata


def write_config(tmp_path, extra: str = "") -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "posix"\n'
                    f'local_commit_log_file_size = "1MiB"\ncommit_log_max_size = 4000\n{extra}'
                    f'[tiered.options]\nroot = "{tmp_path / "tiered"}"\n')
    return str(path)


def make_store(conf: str, messages: int = 30) -> dict[int, bytes]:
    """A store with ``messages`` tiered messages on orders/0; returns offset -> body."""
    config = StoreConfig.load(conf, environ={})
    bodies = {}
    with TieredMessageStore.open(config) as store:
        for i in range(messages):
            body = f"message {i} ".encode() * 8
            result = store.put_message(Message(topic="orders", body=body, keys=[f"k{i}"]), 0)
            bodies[result.queue_offset] = body
        store.dispatch()
    return bodies


def read_all(config: StoreConfig) -> dict[int, bytes]:
    """Every message of orders/0 as the store serves it."""
    out = {}
    with TieredMessageStore.open(config) as store:
        offset = store.get_min_offset_in_queue("orders", 0)
        end = store.get_max_offset_in_queue("orders", 0)
        while offset < end:
            got = store.get_message("g", "orders", 0, offset, 32)
            assert got.messages, (offset, got.status)
            for msg in got.messages:
                out[msg.queue_offset] = msg.body
            offset = max(out) + 1
    return out


# -- reserved paths ------------------------------------------------------------------------


def test_reserved_paths_are_the_owner_records_and_the_quarantine():
    prefix = tier_prefix("c1", "broker-a")
    assert is_reserved_path(f"{prefix}.tiered-owner/{1:020d}")
    assert is_reserved_path(f"{quarantine_prefix('c1', 'broker-a')}r1/orders/0/COMMIT_LOG/x")
    assert not is_reserved_path(segment_path("c1", "broker-a", "orders", 0, FileSegmentType.COMMIT_LOG, 0))
    # only a directory directly under the prefix is reserved, not a dot further down
    assert not is_reserved_path(f"{prefix}orders/.quarantine/x")
    assert is_owner_record(f"{prefix}.tiered-owner/{1:020d}")


def test_a_store_with_a_quarantine_opens_rebuilds_and_lists_as_before(tmp_path, capsys):
    conf = write_config(tmp_path)
    bodies = make_store(conf)
    config = StoreConfig.load(conf, environ={})
    driver = config.open_driver()
    try:
        before = sorted(segment_objects(driver, config.cluster, config.broker))
        # A quarantined copy of a segment, under a path that ends like a segment path, and
        # its manifest: neither is a store object.
        seg = segment_path(config.cluster, config.broker, "orders", 0, FileSegmentType.COMMIT_LOG, 0)
        copy = f"{quarantine_prefix(config.cluster, config.broker)}r-test/{seg[len(tier_prefix(config.cluster, config.broker)):]}"
        size = driver.size(seg)
        driver.create(copy)
        driver.write(copy, 0, driver.read(seg, 0, size))
        driver.seal(copy)
        assert driver.write_if_absent(f"{quarantine_prefix(config.cluster, config.broker)}r-test/manifest.json",
                                      b'{"entries": []}\n')
        assert sorted(segment_objects(driver, config.cluster, config.broker)) == before
    finally:
        driver.close()
    # The store opens (the reconcile at open does not call the copy an unknown object) and
    # serves every message.
    assert read_all(config) == bodies
    # The metadata rebuilt from the listing sees no stray and the same segments.
    metadata = config.open_metadata()
    driver = config.open_driver()
    try:
        recorded = sorted((m.type, m.path, m.base_offset, m.size) for m in metadata.iterate_file_segments())
        stats = rebuild_metadata(driver, metadata, cluster=config.cluster, broker=config.broker, force=True)
        assert stats.strays == 0
        rebuilt = sorted((m.type, m.path, m.base_offset, m.size) for m in metadata.iterate_file_segments())
        assert rebuilt == recorded
    finally:
        metadata.close()
        driver.close()
    assert read_all(config) == bodies
    # `tiered stat` opens the store too, and counts only the queue.
    assert main(["stat", "--config", conf, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["topic"], r["tiered_commit"]) for r in rows] == [("orders", len(bodies))]
