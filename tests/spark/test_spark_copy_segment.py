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
    with pytest.raises(StateConflict, match="refusing to overwrite"):
        copy_segment(source, target, CopyTask(0, PATH, True, len(DATA)), chunk=4096)
    assert target.size(PATH) == 5000 and target.read(PATH, 0, 5000) == b"\xff" * 5000


def test_a_source_shorter_than_its_metadata_is_a_conflict(drivers):
    source, target = drivers
    fill(source, DATA[:100], sealed=False)
    with pytest.raises(StateConflict, match="metadata records 200"):
        copy_segment(source, target, CopyTask(0, PATH, False, 200))
