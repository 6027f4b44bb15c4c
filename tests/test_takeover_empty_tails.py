"""The tails a take-over seals (operator drills, round 3).

A previous owner killed right after creating a segment, before its first byte, left an
empty object. The take-over sealed it like every tail; it names the base offset the new
owner writes next, so every later dispatch of the queue failed with SEGMENT_SEALED, for
good, while verify and repair saw nothing to do: the queue lived on the local disk only.
Now an empty tail is left open (the owner record fences the old owner), and an empty sealed
segment a store finds as its last one -- one an older take-over sealed -- is made again in
its place. And the tails are sealed only once the metadata is checked or rebuilt, and only
those it lists: a foreign object named like a segment is never sealed.
"""

from __future__ import annotations

import shutil

import pytest

from tiered_core import Message, TieredMessageStore
from tiered_core.cli import main
from tiered_core.codec.naming import segment_path
from tiered_core.common import FileSegmentType
from tiered_core.config import StoreConfig


def _store(tmp_path) -> tuple[StoreConfig, str]:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    return StoreConfig.load(str(conf), environ={}), str(conf)


@pytest.mark.parametrize("left", ["created", "created_and_sealed"])
@pytest.mark.parametrize("file_type", [FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE])
def test_a_queue_whose_old_owner_left_an_empty_tail_is_tiered_after_a_take_over(tmp_path, capsys, left, file_type):
    config, conf = _store(tmp_path)
    with TieredMessageStore.open(config) as store:
        for i in range(3):
            store.put_message(Message(topic="t", body=b"old-%d" % i), 0)
        store.dispatch(force=True)
    with config.open_driver() as driver:  # killed after creating queue 1's first segment
        path = segment_path(config.cluster, config.broker, "t", 1, file_type, 0)
        driver.create(path)
        if left == "created_and_sealed":  # as a take-over before this fix left it
            driver.seal(path)
    shutil.rmtree(config.store_path)  # the disk is lost
    assert main(["takeover", "--config", conf, "--create"]) == 0
    capsys.readouterr()
    with TieredMessageStore.open(config) as store:
        assert store.put_message(Message(topic="t", body=b"new"), 1).queue_offset == 0
        stats = store.dispatch(force=True)
        assert stats.errors == [] and stats.messages == 1, stats
        assert store.put_message(Message(topic="t", body=b"old-3"), 0).queue_offset == 3
        assert store.dispatch(force=True).errors == []
    shutil.rmtree(config.store_path)  # every message is in the tier: lose the disk again
    assert main(["takeover", "--config", conf, "--create"]) == 0
    with TieredMessageStore.open(config, read_only=True) as store:
        assert [m.body for m in store.get_message("g", "t", 1, 0, 10).messages] == [b"new"]
        assert [m.body for m in store.get_message("g", "t", 0, 0, 10).messages] == [b"old-%d" % i for i in range(4)]
    capsys.readouterr()
    assert main(["verify", "--config", conf]) == 0, capsys.readouterr().out


def test_a_take_over_seals_only_tails_the_metadata_lists(tmp_path, capsys):
    """An operator drill (round 3, Azure): ``takeover --create`` sealed the last object of every
    flat file before the metadata was rebuilt, foreign objects named like segments included,
    and a seal cannot be undone on every backend (an Azure append blob). Now the tails are
    sealed after the metadata is checked or rebuilt, and only those it lists."""
    import random

    config, conf = _store(tmp_path)
    with TieredMessageStore.open(config) as store:
        for i in range(3):
            store.put_message(Message(topic="t", body=b"m%d" % i), 0)
        store.dispatch(force=True)
    with config.open_driver() as driver:
        foreign = segment_path(config.cluster, config.broker, "t", 0, FileSegmentType.COMMIT_LOG, 99999)
        driver.write(foreign, 0, random.Random(3).randbytes(200))  # another writer's, named like the next segment
        own_tail = segment_path(config.cluster, config.broker, "t", 0, FileSegmentType.COMMIT_LOG, 0)
        assert not driver.is_sealed(own_tail)
    shutil.rmtree(config.store_path)
    assert main(["takeover", "--config", conf, "--create"]) == 0
    with config.open_driver() as driver:
        assert not driver.is_sealed(foreign) and driver.size(foreign) == 200
        assert driver.is_sealed(own_tail)
