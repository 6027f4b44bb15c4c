"""A store's identity is checked at open, before any write (issue 18, finding 2).

A store records the cluster, broker, driver and tier location it was created with; an open
with another one is refused with IDENTITY_MISMATCH naming the field, both values and the fix,
and a refused open -- for that or any other reason checked at open (another owner, objects
the metadata does not list) -- writes nothing: snapshots of every directory involved are
equal before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snapshots import changes, snapshot
from store_workload import Workload, backend_options, dispatch_until_tiered, small_config
from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.errors import IdentityMismatch, PrefixOwned, UnknownObjects
from tiered_core.flat.ownership import OWNER_DIR, STORE_ID_FILE
from tiered_core.ops import identity as ids
from tiered_core.ops.claim import claim_store_prefix

FAR_FUTURE_MS = 1 << 50
TIERED = Path(sys.executable).with_name("tiered")


def populate(config, n: int = 600, workload: Workload | None = None) -> Workload:
    """Put ``n`` messages on two queues, tier them, and delete every local file retention may:
    the first offsets of each queue are then in the tier only."""
    workload = workload or Workload(topics=("orders",), queues=2)
    with TieredMessageStore.open(config) as store:
        workload.put(store, n)
        dispatch_until_tiered(store, workload)
        store.delete_expired_local(FAR_FUTURE_MS)
        assert all(store.local.get_min_offset_in_queue(*k) > 0 for k in workload.sent)
    return workload


def store_config(tmp_path: Path, **overrides):
    values = {"local_commit_log_file_size": 64 << 10, "broker": "b2", **overrides}
    return small_config(tmp_path, "posix", {"root": str(tmp_path / "tier")}, **values)


def first_tiered_message(config):
    with TieredMessageStore.open(config, read_only=True) as store:
        got = store.get_message("g", "orders", 0, 0, 1)
    assert got.status is GetMessageStatus.FOUND and got.tier is StoreTier.TIERED, got
    return got.messages[0]


# -- the reproduction: a renamed broker through the environment --------------------------------

def test_renamed_broker_is_refused_by_get_and_put_and_nothing_is_written(tmp_path):
    config = store_config(tmp_path)
    populate(config)
    conf = tmp_path / "tiered.toml"
    conf.write_text(config.to_toml())
    env = {**os.environ, "TIERED_BROKER": "b2x"}
    before = snapshot(tmp_path)

    got = subprocess.run([str(TIERED), "get", "--config", str(conf), "--topic", "orders", "--offset", "0",
                          "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == ExitCode.BAD_INPUT, got.stdout + got.stderr
    error = json.loads(got.stdout)["error"]
    assert error["code"] == "IDENTITY_MISMATCH"
    assert (error["field"], error["recorded"], error["configured"]) == ("broker", "'b2'", "'b2x'")
    assert "set broker = 'b2' back" in error["fix"] and "TIERED_BROKER" in error["fix"]
    assert "Nothing was written" in error["message"]

    put = subprocess.run([str(TIERED), "put", "--config", str(conf), "--topic", "orders", "--body", "x",
                          "--dispatch", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert put.returncode == ExitCode.BAD_INPUT, put.stdout + put.stderr
    assert json.loads(put.stdout)["error"]["field"] == "broker"
    assert changes(before, snapshot(tmp_path)) == {}

    # with the recorded name the tiered messages are still served
    assert first_tiered_message(config).queue_offset == 0


# -- each field, through the API; a refused open writes nothing anywhere ------------------------

@pytest.mark.parametrize("field, change", [
    ("cluster", lambda tmp: {"cluster": "RenamedCluster"}),
    ("broker", lambda tmp: {"broker": "b3"}),
    ("tier", lambda tmp: {"driver_options": {"root": str(tmp / "moved-tier")}}),
    ("driver", lambda tmp: {"driver": "memory", "driver_options": {"namespace": f"id-{tmp.name}"}}),
])
def test_another_identity_is_refused_naming_the_field_and_writing_nothing(tmp_path, field, change):
    config = store_config(tmp_path)
    populate(config)
    before = snapshot(tmp_path)
    changed = config.replace(**change(tmp_path))
    with pytest.raises(IdentityMismatch) as info:
        TieredMessageStore.open(changed)
    err = info.value
    assert err.context["field"] == field
    recorded, configured = ids.StoreIdentity.of(config), ids.StoreIdentity.of(changed)
    shown = (lambda i: i.value(field)) if field == "tier" else (lambda i: repr(i.value(field)))
    assert (err.context["recorded"], err.context["configured"]) == (shown(recorded), shown(configured))
    assert "Fix:" in str(err) and err.context["fix"]
    with pytest.raises(IdentityMismatch):
        TieredMessageStore.open(changed, read_only=True)
    assert changes(before, snapshot(tmp_path)) == {}  # no tier root, owner record, metadata, directory
    assert first_tiered_message(config).queue_offset == 0


def test_a_moved_gcs_prefix_is_refused_and_nothing_lands_in_the_bucket(request, tmp_path):
    options = backend_options(request, "gcs", tmp_path)
    config = small_config(tmp_path, "gcs", options, local_commit_log_file_size=64 << 10)
    populate(config, 300)
    moved = config.replace(driver_options={**options, "prefix": options["prefix"] + "-moved"})
    before_local = snapshot(tmp_path)
    with moved.open_driver() as driver:
        assert list(driver.list("")) == []
    with pytest.raises(IdentityMismatch) as info:
        TieredMessageStore.open(moved)
    assert info.value.context["field"] == "tier" and "prefix=" in info.value.context["recorded"]
    with moved.open_driver() as driver:
        assert list(driver.list("")) == []  # no owner record under the new prefix
    assert changes(before_local, snapshot(tmp_path)) == {}


def test_refused_by_another_owner_or_unknown_objects_the_open_writes_nothing(tmp_path):
    config = store_config(tmp_path)
    populate(config)
    other = config.replace(store_path=str(tmp_path / "other-store"))  # same prefix, another store
    before = snapshot(tmp_path)
    with pytest.raises(PrefixOwned):
        TieredMessageStore.open(other)
    assert changes(before, snapshot(tmp_path)) == {}  # other-store was not even created

    metadata = config.effective_metadata_path()
    os.remove(metadata)
    before = snapshot(tmp_path)
    with pytest.raises(UnknownObjects):
        TieredMessageStore.open(config)
    with pytest.raises(UnknownObjects):
        TieredMessageStore.open(config, read_only=True)
    assert changes(before, snapshot(tmp_path)) == {}  # no metadata file created


# -- where the identity is recorded, and when only one record exists -------------------------------

def test_the_identity_is_recorded_in_the_store_directory_and_the_metadata(tmp_path):
    config = store_config(tmp_path)
    populate(config)
    expected = ids.StoreIdentity.of(config)
    assert expected.tier == (("root", str(tmp_path / "tier")),)
    assert ids.read_local(config.store_path) == expected
    local = json.loads(Path(ids.identity_path(config.store_path)).read_text())
    assert local["store_id"] == Path(config.store_path, STORE_ID_FILE).read_text()
    metadata = config.open_metadata()
    try:
        assert ids.read_metadata(metadata) == expected
    finally:
        metadata.close()


def test_lost_local_disk_the_metadata_record_is_checked_then_copied(tmp_path):
    config = store_config(tmp_path, metadata_path=str(tmp_path / "meta" / "tiered-metadata.db"))
    populate(config)
    shutil.rmtree(config.store_path)
    before = snapshot(tmp_path)
    with pytest.raises(IdentityMismatch) as info:
        TieredMessageStore.open(config.replace(broker="b9"), take_over=True)
    assert info.value.context["record"] == f"the metadata {config.effective_metadata_path()!r}"
    assert changes(before, snapshot(tmp_path)) == {}
    with TieredMessageStore.open(config, take_over=True):  # the failover, with the right names
        pass
    assert ids.read_local(config.store_path) == ids.StoreIdentity.of(config)
    assert first_tiered_message(config).queue_offset == 0


def test_records_of_two_stores_put_together_are_refused(tmp_path):
    a = store_config(tmp_path / "a")
    b = store_config(tmp_path / "b", broker="b-other")
    populate(a)
    populate(b)
    mixed = b.replace(metadata_path=a.effective_metadata_path())  # b's directory, a's metadata
    before = snapshot(tmp_path)
    with pytest.raises(IdentityMismatch) as info:
        TieredMessageStore.open(mixed)
    # the metadata records the id of its own store: named before the fields that differ
    assert info.value.context["field"] == "store_id" and "another store" in info.value.message
    assert info.value.context["record"] == f"the metadata {a.effective_metadata_path()!r}"
    assert changes(before, snapshot(tmp_path)) == {}


def forget_identity(config) -> None:
    """Make the store look like one created before identities were recorded."""
    os.remove(ids.identity_path(config.store_path))
    metadata = config.open_metadata()
    try:
        metadata.set_property(ids.IDENTITY_PROPERTY, None)
    finally:
        metadata.close()


def test_a_store_from_before_identities_opens_and_records_at_its_first_writable_open(tmp_path):
    config = store_config(tmp_path)
    populate(config)
    forget_identity(config)
    watched = (tmp_path / "tier", config.effective_metadata_path(), ids.identity_path(config.store_path))
    before = snapshot(*watched)
    # its queue records name the broker: a renamed one is refused all the same
    with pytest.raises(IdentityMismatch) as info:
        TieredMessageStore.open(config.replace(broker="b2x"))
    assert info.value.context["recorded"] == "'b2'" and "queue records" in info.value.context["record"]
    # read-only opens serve it and record nothing
    assert first_tiered_message(config).queue_offset == 0
    assert changes(before, snapshot(*watched)) == {}
    assert ids.read_local(config.store_path) is None
    with TieredMessageStore.open(config):
        pass
    assert ids.read_local(config.store_path) == ids.StoreIdentity.of(config)
    metadata = config.open_metadata()
    try:
        assert ids.read_metadata(metadata) == ids.StoreIdentity.of(config)
    finally:
        metadata.close()


def test_a_store_from_before_identities_with_a_moved_root_names_it(tmp_path):
    config = store_config(tmp_path)
    populate(config)
    forget_identity(config)
    moved = config.replace(driver_options={"root": str(tmp_path / "elsewhere")})
    before = snapshot(tmp_path)
    with pytest.raises(IdentityMismatch) as info:
        TieredMessageStore.open(moved)
    assert "was the cluster name or the tier location changed" in str(info.value)
    assert changes(before, snapshot(tmp_path)) == {}


# -- a move the tier proves ------------------------------------------------------------------------

def test_a_tier_moved_with_its_objects_is_accepted_and_recorded_anew(tmp_path):
    config = store_config(tmp_path)
    populate(config)
    os.rename(tmp_path / "tier", tmp_path / "new-tier")
    moved = config.replace(driver_options={"root": str(tmp_path / "new-tier")})
    with TieredMessageStore.open(moved):
        pass
    assert ids.read_local(config.store_path) == ids.StoreIdentity.of(moved)
    assert first_tiered_message(moved).queue_offset == 0


def test_a_copy_without_the_owner_record_is_not_a_move(tmp_path):
    config = store_config(tmp_path)
    populate(config)
    shutil.copytree(tmp_path / "tier", tmp_path / "copy", ignore=shutil.ignore_patterns(OWNER_DIR))
    with pytest.raises(IdentityMismatch):
        TieredMessageStore.open(config.replace(driver_options={"root": str(tmp_path / "copy")}))


# -- jobs that claim the prefix without opening the store ----------------------------------------------

def test_claim_store_prefix_checks_the_recorded_identity(tmp_path):
    config = store_config(tmp_path)
    populate(config)
    renamed = config.replace(broker="b2x")
    before = snapshot(tmp_path)
    with renamed.open_driver() as driver, pytest.raises(IdentityMismatch):
        claim_store_prefix(renamed, driver)
    assert changes(before, snapshot(tmp_path)) == {}
    fresh = store_config(tmp_path / "fresh")
    with fresh.open_driver() as driver:
        claim_store_prefix(fresh, driver)
    assert ids.read_local(fresh.store_path) == ids.StoreIdentity.of(fresh)


def test_a_store_that_lost_only_its_id_file_is_itself_again(tmp_path):
    """An operator drill (round 3): with ``tiered-store-id`` gone, a store directory that held
    the whole history was called "a new store" that "holds no store", and the take-over the
    error suggested set aside its untiered messages and handed their offsets out again. Its
    identity record and the tier's owner record both name the store: it is that store, its
    id file is written again, and every queue continues after its acknowledged messages."""
    from tiered_core import Message

    config = store_config(tmp_path)
    with TieredMessageStore.open(config) as store:
        for i in range(5):
            store.put_message(Message(topic="orders", body=b"tiered-%d" % i), 0)
        store.dispatch(force=True)
        for i in range(5, 8):
            store.put_message(Message(topic="orders", body=b"local-%d" % i), 0)  # acknowledged, not tiered
    id_file = Path(config.store_path) / STORE_ID_FILE
    store_id = id_file.read_text()
    id_file.unlink()
    with TieredMessageStore.open(config, read_only=True) as store:  # reads, and writes nothing
        assert [m.body for m in store.get_message("g", "orders", 0, 0, 10).messages][-1] == b"local-7"
    assert not id_file.exists()
    with TieredMessageStore.open(config) as store:
        assert store.given_up_history is None
        assert store.put_message(Message(topic="orders", body=b"next"), 0).queue_offset == 8
    with TieredMessageStore.open(config, read_only=True) as store:
        bodies = [m.body for m in store.get_message("g", "orders", 0, 0, 10).messages]
    assert bodies == [b"tiered-%d" % i for i in range(5)] + [b"local-%d" % i for i in range(5, 8)] + [b"next"]
    assert id_file.read_text() == store_id


def test_an_empty_id_file_left_by_a_kill_at_the_first_open_is_written_again(tmp_path):
    """An operator drill (round 3): killed between creating ``tiered-store-id`` and writing
    it, the store could never be opened again ("the store id file is empty", exit 2, no fix).
    No claim was made with an id never written: the file is written again."""
    from tiered_core import Message

    config = store_config(tmp_path)
    os.makedirs(config.store_path)
    (Path(config.store_path) / STORE_ID_FILE).write_text("")
    with TieredMessageStore.open(config) as store:
        assert store.put_message(Message(topic="orders", body=b"x"), 0).queue_offset == 0
    assert len((Path(config.store_path) / STORE_ID_FILE).read_text()) == 32
