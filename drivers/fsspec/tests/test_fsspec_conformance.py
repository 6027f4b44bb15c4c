"""The whole conformance suite (contract, FileSegment, faults, state machine) on the fsspec
driver, opened through the registry as a config would, on each layout it has:

* ``memory://`` and ``file://``: the append layout (one object per segment);
* ``tieredtest-objects://``: the part chain (shared with the object-store drivers) on an
  in-process object store with exclusive create and no append -- what s3://, gs:// and
  abfs:// look like to the driver, without a server;
* ``tieredtest-plain://`` with ``single_writer = true``: the part chain on a filesystem
  without an atomic create (its gap is declared by the derived capabilities).
"""

from __future__ import annotations

import uuid

import pytest

from tiered_conformance import DriverConformance
from tiered_core.plugins import open_driver
from tiered_driver_fsspec.testing import OBJECTS, PLAIN


class TestMemoryConformance(DriverConformance):
    @pytest.fixture
    def driver(self):
        drv = open_driver("fsspec", url=f"memory://conformance-{uuid.uuid4().hex[:8]}")
        yield drv
        drv.close()


class TestFileConformance(DriverConformance):
    @pytest.fixture
    def driver(self, tmp_path):
        drv = open_driver("fsspec", url=f"file://{tmp_path}/tier")
        yield drv
        drv.close()


class TestObjectStoreChainConformance(DriverConformance):
    @pytest.fixture
    def driver(self):
        drv = open_driver("fsspec", url=f"{OBJECTS}://bucket/conformance-{uuid.uuid4().hex[:8]}")
        assert drv.innermost.guarantees.layout == "chain"
        yield drv
        drv.close()


class TestSingleWriterChainConformance(DriverConformance):
    @pytest.fixture
    def driver(self, tmp_path):
        drv = open_driver("fsspec", url=f"{PLAIN}://{tmp_path}/tier", single_writer="true")
        assert not drv.capabilities.create_if_absent and not drv.capabilities.conditional_append
        yield drv
        drv.close()

    @pytest.fixture
    def capabilities(self, driver):
        # The files do survive; but a child process cannot open the test's protocol,
        # which is registered with fsspec in this process only.
        return driver.capabilities.override(f"{PLAIN}:// is registered in the test process only",
                                            survives_process_exit=False)
