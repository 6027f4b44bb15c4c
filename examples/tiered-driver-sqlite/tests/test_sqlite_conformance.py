"""Run tiered-store's conformance suite against this driver by subclassing it.

The other way needs no file at all: ``pytest --pyargs tiered_conformance --tiered-driver sqlite``.
"""

import pytest

from tiered_conformance import DriverConformance
from tiered_driver_sqlite import SqliteDriver


class TestSqliteConformance(DriverConformance):
    @pytest.fixture
    def driver(self, tmp_path):
        # Every test writes below its own prefix, so one database per test is plenty;
        # the suite's reopen() checks use driver.reopen(), i.e. the same file.
        drv = SqliteDriver(database=str(tmp_path / "segments.sqlite3"))
        yield drv
        drv.close()
