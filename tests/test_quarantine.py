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


# -- moving an object aside ----------------------------------------------------------------

from tiered_core.errors import CorruptData, DriverError  # noqa: E402
from tiered_core.ops.quarantine import (  # noqa: E402
    MANIFEST,
    Quarantine,
    list_quarantine,
    purge,
    quarantine_dir,
)
from tiered_core.spi.layer import DriverLayer  # noqa: E402

PREFIX = tier_prefix("c1", "broker-a")
ORPHAN = segment_path("c1", "broker-a", "orders", 0, FileSegmentType.COMMIT_LOG, 4000)
TAILED = segment_path("c1", "broker-a", "orders", 0, FileSegmentType.CONSUME_QUEUE, 0)


@pytest.fixture(params=["posix", "memory", "sqlite", "gcs", "azure", "s3"])
def driver(request, tmp_path):
    """A fresh location of each backend (the object stores on their emulators)."""
    from tiered_core.plugins import open_driver
    from store_workload import backend_options  # tests/ is on sys.path under pytest

    d = open_driver(request.param, **backend_options(request, request.param, tmp_path))
    yield d
    d.close()


def put_object(driver, path: str, data: bytes, *, seal: bool = False) -> None:
    driver.create(path)
    # several writes, as a segment gets them
    for i in range(0, len(data), 1000):
        driver.write(path, i, data[i:i + 1000])
    if seal:
        driver.seal(path)


def manifest_lines(driver, repair_id: str) -> list[dict]:
    path = f"{quarantine_dir(PREFIX)}{repair_id}/{MANIFEST}"
    return [json.loads(line) for line in driver.read(path, 0, driver.size(path)).decode().splitlines()]


def test_move_copies_checks_records_then_removes(driver):
    data = bytes(range(256)) * 20
    put_object(driver, ORPHAN, data, seal=True)
    q = Quarantine(driver, PREFIX, "r-1", clock=lambda: 1000.0)
    entry = q.move(ORPHAN, reason="not in the metadata", kind="unlisted_object")
    assert not driver.exists(ORPHAN)
    assert entry.copy == f"{PREFIX}.quarantine/r-1/{ORPHAN[len(PREFIX):]}"
    assert driver.read(entry.copy, 0, driver.size(entry.copy)) == data
    assert driver.is_sealed(entry.copy)
    lines = manifest_lines(driver, "r-1")
    assert [ln["state"] for ln in lines] == ["copied", "done"]
    assert all(ln["original"] == ORPHAN and ln["size"] == len(data) and ln["crc32"] == zlib.crc32(data)
               and ln["then"] == "removed" and ln["kind"] == "unlisted_object" and ln["at_ms"] == 1_000_000
               and ln["repair_id"] == "r-1" for ln in lines)
    (run,) = list_quarantine(driver, PREFIX)
    assert run.repair_id == "r-1" and [e.state for e in run.entries] == ["done"] and run.unlisted == []
    # the quarantine is not a store object
    assert list(segment_objects(driver, "c1", "broker-a")) == []


def test_move_with_keep_rewrites_the_committed_bytes(driver):
    data = b"c" * 2500 + b"\xff" * 700
    put_object(driver, TAILED, data)
    entry = Quarantine(driver, PREFIX, "r-2").move(TAILED, reason="bad tail", kind="bad_tail", keep=2500)
    assert driver.read(TAILED, 0, driver.size(TAILED)) == b"c" * 2500
    assert not driver.is_sealed(TAILED)  # it was not sealed: the store appends to it again
    assert driver.read(entry.copy, 0, driver.size(entry.copy)) == data
    assert manifest_lines(driver, "r-2")[-1]["then"] == "rewritten with its first 2500 committed bytes"


class CorruptCopies(DriverLayer):
    """Reads of the quarantine come back with one byte flipped (a backend that stored the copy wrong)."""

    def read(self, path, position, length):
        data = self.inner.read(path, position, length)
        if "/.quarantine/" in path and data and not path.endswith(MANIFEST):
            data = bytes([data[0] ^ 1]) + data[1:]
        return data


def test_a_copy_that_does_not_read_back_equal_leaves_the_original(driver):
    data = b"x" * 3000
    put_object(driver, ORPHAN, data)
    with pytest.raises(CorruptData, match="nothing was removed"):
        Quarantine(CorruptCopies(driver), PREFIX, "r-3").move(ORPHAN, reason="r", kind="unlisted_object")
    assert driver.read(ORPHAN, 0, driver.size(ORPHAN)) == data
    (run,) = list_quarantine(driver, PREFIX)
    assert run.entries == [] and [p for p, _ in run.unlisted] == [f"{quarantine_dir(PREFIX)}r-3/{ORPHAN[len(PREFIX):]}"]


class FailOnce(DriverLayer):
    """``op`` fails once (a crash at that step, as far as the quarantine can tell)."""

    def __init__(self, inner, op: str) -> None:
        super().__init__(inner)
        self.op, self.failed = op, False

    def _call(self, op, target, call):
        if op == self.op and not self.failed and "/.quarantine/" not in target:
            self.failed = True
            raise DriverError(f"injected failure of {op}", retryable=False, path=target)
        return call()


@pytest.mark.parametrize("keep, step", [(None, "delete"), (2000, "delete"), (2000, "create")])
def test_a_crash_between_copy_and_removal_is_finished_by_the_next_run(driver, keep, step):
    data = b"y" * 2000 + b"z" * 999
    put_object(driver, ORPHAN, data)
    with pytest.raises(DriverError, match="injected"):
        Quarantine(FailOnce(driver, step), PREFIX, "r-4").move(ORPHAN, reason="r", kind="k", keep=keep)
    assert [ln["state"] for ln in manifest_lines(driver, "r-4")] == ["copied"]
    # a refusing re-check leaves it alone
    assert Quarantine(driver, PREFIX, "r-5").finish_pending(lambda e: "still listed") == []
    finished = Quarantine(driver, PREFIX, "r-5").finish_pending(lambda e: None)
    assert [e.original for e in finished] == [ORPHAN] and finished[0].state == "done"
    if keep is None:
        assert not driver.exists(ORPHAN)
    else:
        assert driver.read(ORPHAN, 0, driver.size(ORPHAN)) == data[:keep]
    assert [ln["state"] for ln in manifest_lines(driver, "r-4")] == ["copied", "done"]
    # nothing left to finish: harmless
    assert Quarantine(driver, PREFIX, "r-6").finish_pending(lambda e: None) == []


def test_purge_deletes_only_old_finished_manifest_listed_copies(driver):
    for i, repair_id in enumerate(["r-old", "r-new"]):
        path = segment_path("c1", "broker-a", "orders", i, FileSegmentType.COMMIT_LOG, 0)
        put_object(driver, path, b"o" * 1500)
        Quarantine(driver, PREFIX, repair_id, clock=lambda i=i: 1_000_000.0 + i * 86_400).move(
            path, reason="r", kind="unlisted_object")
    # an unfinished move, old: its copy may be the only one of committed bytes
    put_object(driver, ORPHAN, b"p" * 1200)
    with pytest.raises(DriverError):
        Quarantine(FailOnce(driver, "delete"), PREFIX, "r-pending", clock=lambda: 1_000_000.0).move(
            ORPHAN, reason="r", kind="unlisted_object")
    # an object no manifest names
    stray = f"{quarantine_dir(PREFIX)}r-old/stray"
    put_object(driver, stray, b"s")
    now = 1_000_000.0 + 86_400 + 3600  # r-old is a day and an hour old, r-new an hour
    report = purge(driver, PREFIX, older_than_s=86_400, now=now)
    assert [e.repair_id for e in report.purged] == ["r-old"]
    assert not driver.exists(report.purged[0].copy)
    kept = dict(report.kept)
    assert stray in kept and len(kept) == 3
    assert any("not finished" in why for why in kept.values())
    assert driver.exists(stray) and driver.exists(ORPHAN)
    assert report.manifests == []  # r-old still holds the stray
    assert manifest_lines(driver, "r-old")[-1]["state"] == "purged"
    # a week later r-new goes with its manifest; the pending copy and the stray stay
    report = purge(driver, PREFIX, older_than_s=86_400, now=now + 7 * 86_400)
    assert [e.repair_id for e in report.purged] == ["r-new"]
    assert report.manifests == [f"{quarantine_dir(PREFIX)}r-new/{MANIFEST}"]
    assert [r.repair_id for r in list_quarantine(driver, PREFIX)] == ["r-old", "r-pending"]


def test_purge_never_deletes_what_a_manifest_names_outside_its_run_or_with_other_bytes(driver):
    """An operator drill: a manifest line whose ``copy`` named a live segment made the purge
    delete that segment (the manifest is only text in the tier). A copy is deleted only in
    its own run's directory and with the size and CRC-32 its manifest recorded."""
    live = segment_path("c1", "broker-a", "orders", 1, FileSegmentType.CONSUME_QUEUE, 0)
    put_object(driver, live, b"u" * 60)
    moved = segment_path("c1", "broker-a", "orders", 2, FileSegmentType.COMMIT_LOG, 0)
    put_object(driver, moved, b"m" * 1500)
    entry = Quarantine(driver, PREFIX, "r-1", clock=lambda: 1_000_000.0).move(moved, reason="r", kind="unlisted_object")
    manifest = f"{quarantine_dir(PREFIX)}r-1/{MANIFEST}"
    forged = [dict(entry.as_dict(), copy=live, original="x", path="x", size=60),
              dict(entry.as_dict(), copy=f"{quarantine_dir(PREFIX)}r-1/../../orders/1/x", original="y", path="y")]
    lines = driver.read(manifest, 0, driver.size(manifest)) + b"".join(
        (json.dumps(line) + "\n").encode() for line in forged)
    driver.delete(manifest)
    put_object(driver, manifest, lines)
    # the real copy, with other bytes than the manifest recorded
    driver.delete(entry.copy)
    put_object(driver, entry.copy, b"z" * 1500)
    report = purge(driver, PREFIX, older_than_s=0, now=2_000_000.0)
    assert report.purged == []
    reasons = dict(report.kept)
    assert "outside its run's quarantine directory" in reasons[live]
    assert "CRC-32" in reasons[entry.copy]
    assert driver.read(live, 0, 60) == b"u" * 60 and driver.size(entry.copy) == 1500
