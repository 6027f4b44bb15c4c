"""A tiered message whose bytes fail validation is never served, nor skipped over."""

from __future__ import annotations

import os

import pytest

from tiered_core import Message
from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.codec.consume_queue import decode_cq_unit
from tiered_core.config import StoreConfig

TOPIC = "corrupt"


def config(tmp_path, level: str) -> StoreConfig:
    return StoreConfig(store_path=str(tmp_path / "store"), driver="posix",
                       driver_options={"root": str(tmp_path / "tiered")}, storage_level=level,
                       local_commit_log_file_size=1 << 20, local_retention_hours=0)


def damage(tmp_path, store: TieredMessageStore, queue_offset: int, at: int, data: bytes) -> None:
    """Overwrite bytes of the tiered copy of message ``queue_offset``, ``at`` bytes into it."""
    flat = store.flat_files.get(TOPIC, 0)
    unit = decode_cq_unit(flat.get_consume_queue(queue_offset))
    seg = flat.commit_log.segments[0]
    path = os.path.join(str(tmp_path / "tiered"), seg.path)
    os.chmod(path, 0o644)  # a sealed segment is read-only
    with open(path, "r+b") as fh:
        fh.seek(unit.commitlog_offset - seg.base_offset + at)
        fh.write(data)


@pytest.mark.parametrize("at,data,reason", [
    (90, b"\xff\xfe", "crc_mismatch"),  # a body byte
    (20, (99).to_bytes(8, "big"), "queue_offset_mismatch"),
    (12, (1).to_bytes(4, "big"), "queue_id_mismatch"),  # now reads as a message of queue 1
    (28, (7).to_bytes(8, "big"), "physical_offset_mismatch"),
])
def test_reads_stop_before_a_corrupt_tiered_message(tmp_path, at, data, reason):
    with TieredMessageStore.open(config(tmp_path, "FORCE")) as store:
        for i in range(5):
            store.put_message(Message(topic=TOPIC, body=f"body-{i}".encode() * 8), 0)
        store.dispatch(force=True)
        damage(tmp_path, store, 2, at, data)
    # Only the tiered copy is read (FORCE) and the local copy still exists.
    with TieredMessageStore.open(config(tmp_path, "FORCE")) as store:
        first = store.get_message("g", TOPIC, 0, 0, 5)
        assert first.status is GetMessageStatus.FOUND and first.tier is StoreTier.TIERED
        assert [m.queue_offset for m in first.messages] == [0, 1]  # stops before it, never skips it
        assert first.next_begin_offset == 2
        assert store.fetcher.corrupt_messages >= 1
        assert store.fetcher.last_corruption.reason == reason
        assert (store.fetcher.last_corruption.queue_offset, store.fetcher.last_corruption.topic) == (2, TOPIC)
        # At the damaged offset the fetcher answers OFFSET_FOUND_NULL, so the store serves
        # the intact local copy instead.
        assert store.fetcher.get_message(TOPIC, 0, 2, 5).status is GetMessageStatus.OFFSET_FOUND_NULL
        at_two = store.get_message("g", TOPIC, 0, 2, 5)
        assert at_two.tier is StoreTier.LOCAL
        assert [m.body for m in at_two.messages][:1] == [b"body-2" * 8]


def test_without_a_local_copy_the_consumer_is_told_not_to_skip(tmp_path):
    with TieredMessageStore.open(config(tmp_path, "NOT_IN_DISK")) as store:
        for i in range(3000):  # several local files, so retention can delete the head
            store.put_message(Message(topic=TOPIC, body=b"x" * 500), 0)
        store.dispatch(force=True)
        assert store.delete_expired_local() > 0
        assert store.local.get_min_offset_in_queue(TOPIC, 0) > 2
        damage(tmp_path, store, 2, 90, b"\xff\xfe")
        store.cache.clear()
        got = store.get_message("g", TOPIC, 0, 2, 8)
        assert got.status is GetMessageStatus.OFFSET_FOUND_NULL and got.next_begin_offset == 2
        assert store.get_message("g", TOPIC, 0, 3, 8).status is GetMessageStatus.FOUND
