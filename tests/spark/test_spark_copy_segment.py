"""copy_segment, the unit of work of a migration, on memory drivers (no Spark needed)."""

from __future__ import annotations

import uuid

import pytest

from tiered_conformance.faults import Fault, FaultLayer
from tiered_core.errors import DriverError, StateConflict
from tiered_core.plugins import open_driver
from tiered_core.spark.jobs.migrate import CopyTask, copy_segment

PATH = "c/broker-a/orders/0/COMMIT_LOG/segment"


@pytest.fixture
def drivers():
    source = open_driver("memory", namespace=f"src-{uuid.uuid4().hex}")
    target = open_driver("memory", namespace=f"dst-{uuid.uuid4().hex}")
    yield source, target
    source.close()
    target.close()


def fill(driver, data: bytes, *, sealed: bool) -> None:
    driver.create(PATH)
    for pos in range(0, len(data), 1000):
        driver.write(PATH, pos, data[pos:pos + 1000])
    if sealed:
        driver.seal(PATH)


DATA = bytes(range(256)) * 40  # 10240 bytes


def test_copy_verifies_and_seals(drivers):
    source, target = drivers
    fill(source, DATA, sealed=True)
    result = copy_segment(source, target, CopyTask(0, PATH, True, len(DATA)), chunk=3000)
    assert (result.size, result.copied, result.resumed_at) == (len(DATA), len(DATA), 0)
    assert target.read(PATH, 0, len(DATA)) == DATA and target.is_sealed(PATH)


def test_a_failed_copy_resumes_from_the_target_size(drivers):
    source, target = drivers
    fill(source, DATA, sealed=False)
    task = CopyTask(0, PATH, False, len(DATA))
    # The target backend fails a write after 4000 of its bytes landed (the task dies there).
    with pytest.raises(DriverError, match="injected"):
        copy_segment(source, FaultLayer(target, [Fault.partial(4000)]), task, chunk=len(DATA))
    assert target.size(PATH) == 4000
    result = copy_segment(source, target, task, chunk=1000)
    assert (result.resumed_at, result.copied) == (4000, len(DATA) - 4000)
    assert target.read(PATH, 0, len(DATA)) == DATA and not target.is_sealed(PATH)
    again = copy_segment(source, target, task, chunk=1000)
    assert again.copied == 0


def test_a_target_that_does_not_match_is_never_overwritten(drivers):
    source, target = drivers
    fill(source, DATA, sealed=True)
    fill(target, b"\xff" * 5000, sealed=False)  # bytes this migration did not write
    with pytest.raises(StateConflict, match="not the source's: it is another store's data") as info:
        copy_segment(source, target, CopyTask(0, PATH, True, len(DATA)), chunk=4096)
    assert "remove" not in str(info.value) and "will not help" in str(info.value)
    assert target.size(PATH) == 5000 and target.read(PATH, 0, 5000) == b"\xff" * 5000


def test_a_target_that_went_on_past_the_source_is_a_store_in_service(drivers):
    """A Spark drill: migrated, then the target took its own message, then migrated again:
    the error said the target's bytes were "not the source's first 2000" (they were), to
    "run again to resume" (it never would) and to "remove it yourself" (its own message)."""
    source, target = drivers
    fill(source, DATA[:2000], sealed=False)
    fill(target, DATA[:2000] + b"own message", sealed=False)
    with pytest.raises(StateConflict, match="the source's 2000 and 11 more that the target store wrote") as info:
        copy_segment(source, target, CopyTask(0, PATH, False, 2000), chunk=1000)
    assert "remove" not in str(info.value) and "will not help" in str(info.value)
    assert target.read(PATH, 0, 2011) == DATA[:2000] + b"own message"


def test_a_source_shorter_than_its_metadata_is_a_conflict(drivers):
    source, target = drivers
    fill(source, DATA[:100], sealed=False)
    with pytest.raises(StateConflict, match="metadata records 200"):
        copy_segment(source, target, CopyTask(0, PATH, False, 200))


def test_a_migration_into_a_store_in_service_is_refused_without_advising_removal(tmp_path):
    """A Spark drill: `spark migrate` into a live store holding other topics said the
    target's metadata did not list its own segments and told the operator to remove them."""
    from tiered_core import Message, StoreConfig, TieredMessageStore
    from tiered_core.access.writer_session import WriterSession
    from tiered_core.spark.jobs.migrate import check_target_objects

    config = StoreConfig(store_path=str(tmp_path / "dst"), driver="posix",
                         driver_options={"root": str(tmp_path / "tier"), "fsync": False})
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic="TZ", body=b"the target's own"), 0)
        store.local.reput()
        store.dispatch(force=True)
    with WriterSession(config, writer="test migrate", appends=True) as session:
        with pytest.raises(StateConflict, match=r"the target \(dst.toml\) is a store of its own") as info:
            check_target_objects(session, {"not/a/path/of/the/target"}, "dst.toml")
    assert "remove" not in str(info.value)
    with TieredMessageStore.open(config, read_only=True) as store:
        assert store.get_message("g", "TZ", 0, 0, 1).messages[0].body == b"the target's own"
