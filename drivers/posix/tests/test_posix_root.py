"""The posix driver when its tier root disappears (an unmounted share, a moved directory):
an outage, never an empty or truncated tier (found by a load drill)."""

from __future__ import annotations

import os

import pytest

from tiered_core import Message, StoreConfig
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.errors import DriverError, PositionMismatch
from tiered_driver_posix import PosixDriver


def test_a_vanished_root_is_an_outage_and_nothing_recreates_it(tmp_path):
    root = tmp_path / "tier"
    drv = PosixDriver(root=str(root), fsync=False)
    drv.write("q/seg", 0, b"abcd")
    os.rename(root, tmp_path / "away")
    for call in (lambda: drv.size("q/seg"), lambda: drv.exists("q/seg"), lambda: drv.read("q/seg", 0, 4),
                 lambda: drv.write("q/seg", 4, b"ef"), lambda: drv.write("q/new", 0, b"x"),
                 lambda: list(drv.list("q/")), lambda: drv.write_if_absent("q/owner", b"x")):
        with pytest.raises(DriverError, match="tier root .* is gone") as info:
            call()
        assert info.value.retryable
    assert not root.exists()  # nothing re-created it (on a mount point it would hide the share)
    os.rename(tmp_path / "away", root)
    drv.write("q/seg", 4, b"ef")
    assert drv.read("q/seg", 0, 6) == b"abcdef"
    with pytest.raises(PositionMismatch) as info:  # past 0 on a missing object: nothing is created
        drv.write("q/other", 3, b"x")
    assert info.value.actual_size == 0 and not (root / "q" / "other").exists()


def test_a_store_whose_tier_root_comes_back_catches_up_without_a_reopen(tmp_path):
    """The load drill: the root moved away during dispatch and back. The store had written
    empty segment files into a re-created root, called the objects changed by someone else,
    and kept refusing the queue (and serving reads as damaged) until it was reopened."""
    root = tmp_path / "tier"
    config = StoreConfig(store_path=str(tmp_path / "store"), driver="posix",
                         driver_options={"root": str(root), "fsync": False}, local_commit_log_file_size=4096)
    sent = {}
    with TieredMessageStore.open(config) as store:
        def put(n: int, tag: str) -> None:
            for i in range(n):
                sent[store.put_message(Message(topic="t", body=f"{tag}{i}".encode() * 20), 0).queue_offset] = \
                    f"{tag}{i}".encode() * 20

        put(50, "a")
        store.local.reput()
        assert store.dispatch(force=True).errors == []
        store.delete_expired_local(1 << 50)  # reads of the first offsets go to the tier
        os.rename(root, tmp_path / "away")
        put(20, "b")
        store.local.reput()
        stats = store.dispatch(force=True)
        assert any("is gone" in e for e in stats.errors), stats.errors
        assert not root.exists()
        os.rename(tmp_path / "away", root)
        stats = store.dispatch(force=True)
        assert stats.errors == [] and store.flat_files.get("t", 0).consume_queue_commit_offset() == 70
        for offset, body in sorted(sent.items()):
            got = store.get_message("g", "t", 0, offset, 1)
            assert got.found and got.messages[0].body == body, (offset, got.status)
        assert [q.damage for q in store.stat()] == [[]]
