"""(d) CompositeAccess over the driver: a queue's tiered commit log + consume queue.

Every test works in its own cluster directory (a unique cluster name), with a SQLite
metadata store in a temporary directory, and exercises ``FlatMessageFile`` exactly as the
dispatcher and fetcher do: append commit log + consume queue, commit, read by queue
offset and by time, expire, reopen from metadata, rebuild metadata from the listing.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from tiered_core.codec.message import Message, decode_message, encode_message
from tiered_core.codec.naming import cluster_dir
from tiered_core.flat import FlatFileConfig, FlatMessageFile
from tiered_core.ops.rebuild import rebuild_metadata
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.common import AppendResult, BoundaryType
from tiered_core.spi.access import ConsumeQueueRequest
from tiered_core.spi.driver import SegmentDriver
from tiered_conformance.areas import COMPOSITE_ACCESS
from tiered_conformance.requirements import requires
from tiered_conformance.suite.base import ConformanceBase

TOPIC = "conformance-topic"
BROKER = "broker-c"


def _message(queue_offset: int, store_ts: int) -> bytes:
    return encode_message(Message(topic=TOPIC, body=f"body-{queue_offset}".encode() * 8,
                                  keys=[f"k{queue_offset}"], tags="t"),
                          queue_id=1, queue_offset=queue_offset, store_timestamp=store_ts)


class CompositeAccessTests(ConformanceBase):
    """FlatMessageFile (RIP-65 CompositeAccess) semantics over the driver."""

    tiered_area = COMPOSITE_ACCESS

    @pytest.fixture
    def cluster(self, driver: SegmentDriver, capabilities) -> Iterator[str]:
        name = f"conf{uuid.uuid4().hex[:12]}"
        yield name
        if capabilities.list:
            try:
                for path, _ in list(driver.list(cluster_dir(name) + "/")):
                    driver.delete(path)
            except Exception:  # cleanup must not hide the test's own outcome
                pass

    @pytest.fixture
    def config(self, cluster: str) -> FlatFileConfig:
        # Small segments, so that every test rolls both files several times.
        return FlatFileConfig(cluster=cluster, broker=BROKER, commit_log_max_size=1200,
                              consume_queue_max_size=100)

    @pytest.fixture
    def metadata(self, tmp_path) -> Iterator[SqliteMetadataStore]:
        store = SqliteMetadataStore(str(tmp_path / f"meta-{uuid.uuid4().hex}.db"))
        yield store
        store.close()

    def _open(self, driver, metadata, config) -> FlatMessageFile:
        return FlatMessageFile(driver, metadata, TOPIC, 1, config)

    def _fill(self, flat: FlatMessageFile, start: int, times: list[int]) -> None:
        flat.init_offset(start)
        for i, ts in enumerate(times):
            raw = _message(start + i, ts)
            offset = flat.commit_log.append_offset
            assert flat.append_commit_log(raw) is AppendResult.SUCCESS
            assert flat.append_consume_queue(
                ConsumeQueueRequest(start + i, offset, len(raw), 0, ts)) is AppendResult.SUCCESS
        assert flat.commit() is True

    def _assert_readable(self, flat: FlatMessageFile, start: int, end: int) -> None:
        for q in range(start, end):
            msg = decode_message(flat.get_message(q))
            assert msg.queue_offset == q and msg.body == f"body-{q}".encode() * 8
            assert msg.keys == [f"k{q}"]

    def test_append_commit_and_read_by_queue_offset(self, driver, metadata, config):
        flat = self._open(driver, metadata, config)
        self._fill(flat, 100, [1000 + i for i in range(30)])
        assert (flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()) == (100, 130)
        assert len(flat.commit_log.segments) > 1 and len(flat.consume_queue.segments) > 1
        self._assert_readable(flat, 100, 130)
        # Each message names its tiered commit-log offset (rewritten on upload).
        first = decode_message(flat.get_message(100))
        assert first.commitlog_offset == 0
        second = decode_message(flat.get_message(101))
        assert second.commitlog_offset == first.store_size

    def test_uncommitted_data_is_not_readable_and_commit_order_holds(self, driver, metadata, config):
        flat = self._open(driver, metadata, config)
        self._fill(flat, 0, [10, 11])
        raw = _message(2, 12)
        offset = flat.commit_log.append_offset
        flat.append_commit_log(raw)
        flat.append_consume_queue(ConsumeQueueRequest(2, offset, len(raw), 0, 12))
        assert flat.consume_queue_commit_offset() == 2
        with pytest.raises(Exception):
            flat.get_message(2)
        assert flat.commit_commit_log() is True
        assert flat.consume_queue_commit_offset() == 2  # the queue waits for its own commit
        assert flat.commit() is True
        self._assert_readable(flat, 0, 3)

    @pytest.mark.parametrize("ts,lower,upper", [(0, 50, 50), (1000, 50, 50), (1001, 51, 51),
                                                (1100, 51, 53), (1101, 54, 54), (1201, 55, 55)])
    def test_offset_by_time(self, driver, metadata, config, ts, lower, upper):
        flat = self._open(driver, metadata, config)
        self._fill(flat, 50, [1000, 1100, 1100, 1100, 1200])
        assert flat.get_offset_in_consume_queue_by_time(ts, BoundaryType.LOWER) == lower
        assert flat.get_offset_in_consume_queue_by_time(ts, BoundaryType.UPPER) == upper

    def test_expiry_deletes_the_consume_queue_then_the_commit_log(self, driver, metadata, config, capabilities):
        flat = self._open(driver, metadata, config)
        self._fill(flat, 0, [1000 + i for i in range(40)])
        cl_before = len(flat.commit_log.segments)
        flat.destroy_expired_file(1020)
        assert len(flat.commit_log.segments) < cl_before
        low = flat.consume_queue_min_offset()
        assert 0 < low <= 20 and flat.consume_queue_commit_offset() == 40
        self._assert_readable(flat, low, 40)
        for seg in flat.commit_log.segments + flat.consume_queue.segments:
            assert driver.exists(seg.path) or seg.commit_position == 0
        if capabilities.list:
            listed = {p for p, _ in driver.list(cluster_dir(config.cluster) + "/")}
            live = {s.path for s in flat.commit_log.segments + flat.consume_queue.segments}
            assert listed <= live  # the expired objects are gone from the backend

    @requires.persistent
    def test_reopen_from_metadata_sees_the_same_queue(self, driver, metadata, config):
        flat = self._open(driver, metadata, config)
        self._fill(flat, 7, [2000 + i for i in range(25)])
        flat.shutdown()
        again = self._open(driver.reopen(), metadata, config)
        assert (again.consume_queue_min_offset(), again.consume_queue_commit_offset()) == (7, 32)
        self._assert_readable(again, 7, 32)
        self._fill(again, 32, [3000, 3001])  # and it goes on where it stopped
        self._assert_readable(again, 7, 34)

    @requires.list
    @requires.persistent
    def test_metadata_rebuilt_from_the_listing(self, driver, metadata, config, tmp_path):
        flat = self._open(driver, metadata, config)
        self._fill(flat, 3, [4000 + i for i in range(25)])
        flat.shutdown()
        fresh = SqliteMetadataStore(str(tmp_path / f"rebuilt-{uuid.uuid4().hex}.db"))
        try:
            rebuild_metadata(driver, fresh, cluster=config.cluster, broker=config.broker)
            queue = fresh.get_queue(TOPIC, 1)
            assert queue is not None and (queue.min_offset, queue.max_offset) == (3, 28)
            rebuilt = self._open(driver.reopen(), fresh, config)
            assert (rebuilt.consume_queue_min_offset(), rebuilt.consume_queue_commit_offset()) == (3, 28)
            self._assert_readable(rebuilt, 3, 28)
        finally:
            fresh.close()
