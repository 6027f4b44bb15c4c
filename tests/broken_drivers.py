"""Deliberately broken drivers: the conformance suite must catch every one of them.

Each breaks exactly one promise of the driver contract while claiming the capabilities
of the real driver it derives from. ``tests/test_broken_drivers.py`` runs the suite
against each (``--tiered-driver tests.broken_drivers:<Class>``) and checks that the
expected tests fail.
"""

from __future__ import annotations

from tiered_core.errors import IllegalParam, NotFound
from tiered_driver_memory import MemoryDriver, _Object
from tiered_driver_posix import PosixDriver


class IgnoresPositionDriver(MemoryDriver):
    """Appends wherever it is asked to write: never raises PositionMismatch."""

    name = "broken-ignores-position"

    def write(self, path, position, data):
        path = self.check_path(path)
        self.check_range(path, position)
        with self._ns_lock:
            obj = self._objects.setdefault(path, _Object())
            if obj.sealed:
                from tiered_core.errors import SegmentSealed

                raise SegmentSealed(path)
            obj.data += data  # BUG: position not compared with the size


class StaleSizeDriver(MemoryDriver):
    """``size`` lags one write behind: it answers what the object held before the last write."""

    name = "broken-stale-size"

    def __init__(self, *, namespace: str = "default") -> None:
        super().__init__(namespace=namespace)
        self._before_last_write: dict[str, int] = {}

    def write(self, path, position, data):
        before = super().size(path)
        super().write(path, position, data)
        self._before_last_write[self.check_path(path)] = before  # BUG: remembered as "the" size

    def size(self, path):
        real = super().size(path)
        return self._before_last_write.get(self.check_path(path), real)


class ReadsPastEndDriver(MemoryDriver):
    """A read past the durable end returns zero padding instead of raising IllegalParam."""

    name = "broken-reads-past-end"

    def read(self, path, position, length):
        path = self.check_path(path)
        self.check_range(path, position, length)
        with self._ns_lock:
            obj = self._objects.get(path)
            if obj is None:
                raise NotFound(path)
            return bytes(obj.data[position:position + length]).ljust(length, b"\0")  # BUG


class NoopSealDriver(MemoryDriver):
    """``seal`` succeeds but changes nothing: later writes are still accepted."""

    name = "broken-noop-seal"

    def seal(self, path):
        path = self.check_path(path)
        if not self.exists(path):
            raise NotFound(path, "cannot be sealed: it does not exist")
        # BUG: nothing is sealed


class LosesTailDriver(PosixDriver):
    """Silently stores all but the last byte of every write of two or more bytes."""

    name = "broken-loses-tail"

    def write(self, path, position, data):
        data = bytes(data)
        if len(data) >= 2:
            data = data[:-1]  # BUG: reports success for bytes it never stored
        super().write(path, position, data)


ALL = [IgnoresPositionDriver, StaleSizeDriver, ReadsPastEndDriver, NoopSealDriver, LosesTailDriver]

__all__ = [cls.__name__ for cls in ALL] + ["IllegalParam"]
