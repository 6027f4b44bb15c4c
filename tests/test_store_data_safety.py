"""Operator mistakes must never lose tiered data (issue 9, scenarios 1 and 2).

1. Lost metadata (deleted, garbage, restored from an old backup): the store refuses to
   open, names the fix, touches nothing; after `tiered metadata rebuild` (or with
   ``metadata_recovery = "rebuild"``) every acknowledged message is read back from the
   tier exactly once.
2. Two stores on one tier prefix: the second is refused, naming both; a deliberate
   take-over fences the first, whose next write fails before it reaches the backend.

Each runs on POSIX, on the GCS, Azure and S3 (moto) emulators and on the fsspec driver (file://).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from store_workload import (
    Workload,
    assert_exactly_once,
    backend_options,
    dispatch_until_tiered,
    read_queue,
)
from store_workload import small_config as _small_config
from tiered_conformance.drills import copy_sparse
from tiered_core import Message
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.errors import ErrorCode, Fenced, MetadataError, PrefixOwned, UnknownObjects
from tiered_core.flat.ownership import STORE_ID_FILE, segment_objects
from tiered_core.ops.verify import verify_store

FAR_FUTURE_MS = 1 << 50
BACKENDS = ("posix", "gcs", "azure", "s3", "fsspec")


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    return request.param, backend_options(request, request.param, tmp_path)


def small_config(tmp_path: Path, driver: str, options: dict, **overrides):
    """Small local files too, so that local retention deletes what is tiered."""
    return _small_config(tmp_path, driver, options, local_commit_log_file_size=64 << 10, **overrides)


def listing(config) -> dict[str, int]:
    """Every object under the store's prefix with its size (owner records left out)."""
    with config.open_driver() as driver:
        return dict(segment_objects(driver, config.cluster, config.broker))


def tier_only(store: TieredMessageStore) -> None:
    """Dispatch everything, then let local retention delete every local file it may."""
    store.dispatch(force=True)
    store.delete_expired_local(FAR_FUTURE_MS)


def write_config(tmp_path: Path, config) -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(config.to_toml())
    return str(path)


def populate(config, workload: Workload, n: int) -> None:
    with TieredMessageStore.open(config) as store:
        workload.put(store, n)
        dispatch_until_tiered(store, workload)
        tier_only(store)
        assert all(store.local.get_min_offset_in_queue(*k) > 0 for k in workload.sent), \
            "the fixture must leave part of every queue in the tier only"


def delete_metadata(config) -> None:
    path = config.effective_metadata_path()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


# -- 1. lost metadata -----------------------------------------------------------------


def test_lost_metadata_refuses_to_open_and_rebuild_restores_every_message(backend, tmp_path, capsys):
    driver, options = backend
    config = small_config(tmp_path, driver, options)
    conf = write_config(tmp_path, config)
    workload = Workload(queues=2)
    populate(config, workload, 1200)
    before = listing(config)
    assert len(before) > 6 and sum(before.values()) > 0

    delete_metadata(config)
    for attempt in range(2):  # the refusal repeats: an empty database is no better than none
        with pytest.raises(UnknownObjects) as info:
            TieredMessageStore.open(config)
        err = info.value
        assert err.code is ErrorCode.UNKNOWN_OBJECTS
        assert err.count == len([s for s in before.values() if s]) and err.prefix.endswith("/broker-a/")
        assert f"tiered metadata rebuild --config {conf}" in str(err) or "tiered metadata rebuild" in str(err)
        assert listing(config) == before, "a refused open must not change the backend"

    # `tiered put --dispatch` is refused the same way and changes nothing
    assert main(["put", "--config", conf, "--topic", "orders", "--body", "x", "--dispatch"]) != 0
    assert listing(config) == before

    assert main(["metadata", "rebuild", "--config", conf]) == 0
    capsys.readouterr()
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)
    with TieredMessageStore.open(config) as store:  # and the store goes on where it was
        workload.put(store, 300)
        dispatch_until_tiered(store, workload)
        tier_only(store)
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)


def test_metadata_recovery_rebuild_opens_on_lost_metadata(backend, tmp_path):
    driver, options = backend
    config = small_config(tmp_path, driver, options)
    workload = Workload(queues=2)
    populate(config, workload, 800)
    delete_metadata(config)
    with TieredMessageStore.open(config.replace(metadata_recovery="rebuild")) as store:
        workload.put(store, 200)
        dispatch_until_tiered(store, workload)
        tier_only(store)
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)


def test_metadata_restored_from_an_old_backup_is_refused_then_rebuilt(tmp_path):
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered")})
    conf = write_config(tmp_path, config)
    workload = Workload(queues=2)
    populate(config, workload, 600)
    backup = tmp_path / "backup.db"
    shutil.copy(config.effective_metadata_path(), backup)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1200)  # rolls new segments the backup does not know
        dispatch_until_tiered(store, workload)
        tier_only(store)
    before = listing(config)
    delete_metadata(config)
    shutil.copy(backup, config.effective_metadata_path())

    with pytest.raises(UnknownObjects):
        TieredMessageStore.open(config)
    assert listing(config) == before
    assert main(["metadata", "rebuild", "--config", conf]) != 0, "a store that is not empty needs --force"
    assert main(["metadata", "rebuild", "--config", conf, "--force"]) == 0
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)


def test_garbage_metadata_file_is_kept_aside_and_rebuilt(tmp_path):
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered")})
    conf = write_config(tmp_path, config)
    workload = Workload(queues=2)
    populate(config, workload, 600)
    path = config.effective_metadata_path()
    delete_metadata(config)
    garbage = os.urandom(4096)
    Path(path).write_bytes(garbage)

    with pytest.raises(MetadataError) as info:
        TieredMessageStore.open(config)
    assert "tiered metadata rebuild" in str(info.value) and Path(path).read_bytes() == garbage
    assert main(["metadata", "rebuild", "--config", conf]) != 0
    assert Path(path).read_bytes() == garbage
    assert main(["metadata", "rebuild", "--config", conf, "--force"]) == 0
    kept = [p for p in os.listdir(os.path.dirname(path)) if ".damaged-" in p]
    assert kept and Path(os.path.dirname(path), kept[0]).read_bytes() == garbage, "never delete what we cannot read"
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)


def test_rebuild_honours_the_store_lock(tmp_path):
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered")})
    conf = write_config(tmp_path, config)
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic="orders", body=b"x"), 0)
        store.dispatch(force=True)
        assert main(["metadata", "rebuild", "--config", conf, "--force"]) != 0
        assert store.get_message("g", "orders", 0, 0, 1).found


# -- 2. two stores on one tier ----------------------------------------------------------


def test_second_store_on_the_same_prefix_is_refused(backend, tmp_path):
    driver, options = backend
    config_a = small_config(tmp_path / "a", driver, options)
    config_b = small_config(tmp_path / "b", driver, options)
    workload = Workload(queues=2)
    with TieredMessageStore.open(config_a) as store_a:
        workload.put(store_a, 600)
        dispatch_until_tiered(store_a, workload)
        before = listing(config_a)
        with pytest.raises(PrefixOwned) as info:
            TieredMessageStore.open(config_b)
        err = info.value
        assert err.code is ErrorCode.PREFIX_OWNED
        assert config_a.store_path in str(err) and config_b.store_path in str(err)
        assert "tiered takeover" in str(err)
        assert listing(config_a) == before, "a refused store must write nothing"
        workload.put(store_a, 600)
        dispatch_until_tiered(store_a, workload)
        tier_only(store_a)
    # a restart of the owner is not a second store
    with TieredMessageStore.open(config_a.replace(storage_level="FORCE")) as store_a:
        assert_exactly_once(store_a, workload, tier=StoreTier.TIERED)


def test_take_over_fences_the_old_writer(backend, tmp_path):
    driver, options = backend
    config_a = small_config(tmp_path / "a", driver, options)
    config_b = small_config(tmp_path / "b", driver, options)
    workload = Workload(queues=2)
    store_a = TieredMessageStore.open(config_a)
    try:
        workload.put(store_a, 900)
        dispatch_until_tiered(store_a, workload)
        # The new broker starts from a replica of the old one's local store (its own id,
        # no metadata): the failover of a real broker pair.
        store_a.local.flush()
        shutil.copytree(config_a.store_path, config_b.store_path, copy_function=copy_sparse,
                        ignore=shutil.ignore_patterns(STORE_ID_FILE, "tiered-metadata.db*", "lock"))
        store_b = TieredMessageStore.open(config_b, take_over=True)
        try:
            assert store_b.ownership.took_over_from is not None
            # The old writer does not know yet: its puts are local, its next tiered write fails.
            for i in range(20):
                store_a.put_message(Message(topic="orders", body=b"late %d" % i), i % 2)
            before = listing(config_a)
            with pytest.raises(Fenced) as info:
                store_a.dispatch(force=True)
            assert info.value.code is ErrorCode.FENCED and "taken over" in str(info.value)
            assert listing(config_a) == before, "a fenced writer must not change the backend"
            with pytest.raises(Fenced):
                store_a.put_message(Message(topic="orders", body=b"late"), 0)
            with pytest.raises(Fenced):
                store_a.delete_expired_tiered(FAR_FUTURE_MS)
            assert listing(config_a) == before

            # The new owner goes on from the replica's offsets.
            workload.put(store_b, 600)
            dispatch_until_tiered(store_b, workload)
            tier_only(store_b)
        finally:
            store_b.close()
        # The old store's tier view still holds only what it tiered before the fence, though
        # the new owner has appended to the same queues since.
        tiered_by_a = 900 // len(workload.sent)
        for key, sent in workload.sent.items():
            bodies, offset = [], 0
            while True:
                got = store_a.fetcher.get_message(*key, offset, 64)
                if not got.found:
                    break
                bodies += [m.body for m in got.messages]
                offset = got.next_begin_offset
            assert bodies == [s.body for s in sent[:tiered_by_a]], key
    finally:
        store_a.close()
    with TieredMessageStore.open(config_b.replace(storage_level="FORCE")) as store_b:
        assert_exactly_once(store_b, workload, tier=StoreTier.TIERED)


class _Died(BaseException):
    """The process died here: a fault point of the tests, not caught by the store."""


def test_a_take_over_removes_an_index_upload_cut_short_and_keeps_every_key(tmp_path, monkeypatch):
    """The old owner dies between two chunks of a key-index upload and its disk is lost; the
    take-over seals the last segment of every file, that half upload too. The new owner
    removes it (a prefix of a compacted file, nothing a query could read), indexes those keys
    again from the tier, and a deep verify finds nothing."""
    options = {"root": str(tmp_path / "tiered")}
    config_a = small_config(tmp_path / "a", "posix", options)
    config_b = small_config(tmp_path / "b", "posix", options)
    workload = Workload(queues=2)
    store_a = TieredMessageStore.open(config_a)
    try:
        workload.put(store_a, 300)
        dispatch_until_tiered(store_a, workload)
        index, commit, chunks = store_a.index, store_a.index._commit, []

        def commit_then_die(seg):  # the first chunk lands; the process dies before the second
            chunks.append(seg.commit_position)
            if len(chunks) == 2:
                raise _Died()
            commit(seg)

        monkeypatch.setattr(index, "_commit", commit_then_die)
        monkeypatch.setattr(index, "_drop_segment", lambda seg: None)  # a dead process cleans nothing
        index.roll_file()
        with pytest.raises(_Died):
            index.compact_and_upload()
        [half] = [(path, size) for path, size in segment_objects(store_a.driver, config_a.cluster, config_a.broker)
                  if "rmq_sys_INDEX" in path]
        assert half[1] == index.config.upload_chunk_size and not store_a.driver.is_sealed(half[0])

        with TieredMessageStore.open(config_b, take_over=True) as store_b:  # a new disk
            assert not store_b.driver.exists(half[0])
            assert store_b.metadata.get_file_segment(2, "broker-a/rmq_sys_INDEX/0", 0) is None
            for (topic, queue_id), sent in workload.sent.items():
                for s in sent[::7]:
                    found = store_b.query_message(topic, s.key, max_count=4).messages
                    assert [(m.queue_id, m.queue_offset) for m in found] == [(queue_id, s.queue_offset)], s.key
            store_b.index.roll_file()
            assert store_b.index.compact_and_upload() == 1  # at the freed base
        report = verify_store(config_b, deep=True)
        assert report.findings == [], [f.message for f in report.findings]
        assert report.stats.index_files_checked == 1
    finally:
        store_a.close()


def test_takeover_command_takes_the_prefix_and_rebuilds(tmp_path, capsys):
    options = {"root": str(tmp_path / "tiered")}
    config_a = small_config(tmp_path / "a", "posix", options)
    config_b = small_config(tmp_path / "b", "posix", options)
    conf_b = write_config(tmp_path, config_b)
    workload = Workload(queues=2)
    populate(config_a, workload, 600)
    assert main(["takeover", "--config", conf_b, "--create"]) == 0  # b is a new store_path
    out = capsys.readouterr().out
    assert config_a.store_path in out
    with pytest.raises(PrefixOwned):
        TieredMessageStore.open(config_a)
    with TieredMessageStore.open(config_b.replace(storage_level="FORCE")) as store_b:
        assert_exactly_once(store_b, workload, tier=StoreTier.TIERED)
