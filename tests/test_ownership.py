"""Tier-prefix ownership, fencing, and the segment's check that adopted bytes are its own."""

from __future__ import annotations

import threading

import pytest

from store_workload import Workload, assert_exactly_once, dispatch_until_tiered, memory_options, small_config
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.errors import Fenced, PrefixOwned, StateConflict
from tiered_core.flat.ownership import OwnerRecord, PrefixOwnership, load_store_id, owner_prefix
from tiered_core.plugins import open_driver
from tiered_core.segment import FileSegment
from tiered_core.common import AppendResult


@pytest.fixture
def driver(request):
    d = open_driver("memory", **memory_options(request))
    yield d
    d.close()


def test_first_claim_then_reopen_then_refusal(driver):
    a = PrefixOwnership(driver, "c", "b", "store-a", "/data/a")
    assert a.claim().epoch == 1
    assert PrefixOwnership(driver, "c", "b", "store-a", "/data/a").claim().epoch == 1  # a restart
    with pytest.raises(PrefixOwned) as info:
        PrefixOwnership(driver, "c", "b", "store-b", "/data/b").claim()
    assert info.value.owner_id == "store-a" and "/data/a" in str(info.value) and "/data/b" in str(info.value)
    assert PrefixOwnership(driver, "c", "other-broker", "store-b").claim().epoch == 1  # another prefix


def test_racing_claims_have_one_winner(driver):
    outcome: dict[str, object] = {}
    barrier = threading.Barrier(8)

    def claim(name: str) -> None:
        barrier.wait()
        try:
            outcome[name] = PrefixOwnership(driver, "c", "b", name).claim().store_id
        except PrefixOwned as exc:
            outcome[name] = exc

    threads = [threading.Thread(target=claim, args=(f"s{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [v for v in outcome.values() if isinstance(v, str)]
    assert len(winners) == 1 and all(isinstance(v, PrefixOwned) for k, v in outcome.items() if k != winners[0])


def test_take_over_fences_every_mutation_of_the_old_owner(driver):
    old = PrefixOwnership(driver, "c", "b", "old")
    old.claim()
    guarded = old.guard()
    guarded.write("x/seg", 0, b"before")
    new = PrefixOwnership(driver, "c", "b", "new")
    assert new.claim(take_over=True).epoch == 2 and new.took_over_from.store_id == "old"
    for call in (lambda: guarded.write("x/seg", 6, b"after"), lambda: guarded.create("x/other"),
                 lambda: guarded.seal("x/seg"), lambda: guarded.delete("x/seg"),
                 lambda: guarded.write_if_absent("x/new", b"n")):
        with pytest.raises(Fenced):
            call()
    assert driver.read("x/seg", 0, driver.size("x/seg")) == b"before" and not driver.exists("x/other")
    assert guarded.read("x/seg", 0, 6) == b"before"  # reads stay allowed
    with pytest.raises(PrefixOwned):
        PrefixOwnership(driver, "c", "b", "old").claim()  # the fenced store cannot come back quietly


def test_unreadable_owner_record_is_a_foreign_owner(driver):
    driver.write(owner_prefix("c", "b") + f"{1:020d}", 0, b"\x00garbage")
    with pytest.raises(PrefixOwned) as info:
        PrefixOwnership(driver, "c", "b", "me").claim()
    assert "cannot be read" in str(info.value) and info.value.context["owner_id"] == "(unreadable)"
    assert OwnerRecord.decode(b"{}", 3).store_id == "(unreadable)"


def test_store_id_is_created_once(tmp_path):
    first = load_store_id(str(tmp_path))
    assert first == load_store_id(str(tmp_path)) and len(first) == 32


def test_segment_never_adopts_bytes_another_writer_appended(driver):
    seg = FileSegment(driver, "x/seg")
    assert seg.append(b"ours") is AppendResult.SUCCESS
    driver.write("x/seg", 0, b"evil")  # another writer got there first, same length
    with pytest.raises(StateConflict) as info:
        seg.commit()
    assert "did not write" in str(info.value)
    assert driver.read("x/seg", 0, 4) == b"evil"


def test_segment_adopts_its_own_landed_bytes(driver):
    seg = FileSegment(driver, "x/seg")
    assert seg.append(b"ours") is AppendResult.SUCCESS
    driver.write("x/seg", 0, b"ours")  # the same bytes landed, the answer was lost
    assert seg.commit() and seg.commit_position == 4 and driver.size("x/seg") == 4


def test_store_without_read_ahead_cache_reads_from_the_tier(tmp_path, request):
    """RocketMQ's readAheadCacheEnable=false: no cache, every tiered read served directly."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'store'}\n"
                    f"tieredStoreFilePath={tmp_path / 'tiered'}\n"
                    "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment\n"
                    "tieredStorageLevel=FORCE\nreadAheadCacheEnable=false\n"
                    "tieredStoreCommitLogMaxSize=4096\n")
    from tiered_core import StoreConfig

    config = StoreConfig.load(str(conf), environ={})
    assert config.read_ahead_cache_bytes == 0
    workload = Workload(queues=1, topics=("orders",))
    with TieredMessageStore.open(config) as store:
        assert store.cache is None
        workload.put(store, 300)
        dispatch_until_tiered(store, workload)
        assert len(store.flat_files.get("orders", 0).commit_log.segments) > 20
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)
        assert store.fetcher.corrupt_messages == 0


def test_read_ahead_over_many_small_segments_finds_no_false_corruption(tmp_path, request, caplog):
    config = small_config(tmp_path, "memory", memory_options(request), commit_log_max_size=8 << 10,
                          storage_level="FORCE")
    workload = Workload(queues=2)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 2000)
        dispatch_until_tiered(store, workload)
        assert all(len(store.flat_files.get(*k).commit_log.segments) > 20 for k in workload.sent)
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)
        assert store.fetcher.corrupt_messages == 0
    assert "corrupt" not in caplog.text


def test_an_unusable_store_path_is_a_config_error_for_library_users(tmp_path):
    from tiered_core import StoreConfig
    from tiered_core.errors import ConfigError

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for path in (blocker, blocker / "below"):
        config = StoreConfig(store_path=str(path), driver="posix", driver_options={"root": str(tmp_path / "t")})
        with pytest.raises(ConfigError) as info:
            TieredMessageStore.open(config)
        assert info.value.key == "store_path" and str(path) in str(info.value)


def test_a_listing_that_misses_the_owner_record_is_named_as_the_drivers_fault(driver, monkeypatch):
    """A driver drill: a driver whose list omitted objects made the first claim fail with
    "changed owner 5 times" (PREFIX_OWNED), as if stores raced; the record was there all along."""
    from tiered_core.errors import DriverError

    monkeypatch.setattr(driver, "list", lambda prefix="": iter(()))
    assert PrefixOwnership(driver, "c", "b", "store-a", "/data/a").claim().epoch == 1
    with pytest.raises(DriverError, match="exists, but listing .* does not show it") as info:
        PrefixOwnership(driver, "c", "b", "store-a", "/data/a").claim()  # the store's next open
    assert "tiered conformance memory" in str(info.value) and info.value.retryable is False
