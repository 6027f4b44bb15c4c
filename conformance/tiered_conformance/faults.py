"""Fault injection around any driver: the one place the suite uses a stand-in.

:class:`FaultyDriver` wraps a real driver and, for the calls a plan names, fails the
way a real backend can fail a write:

* ``Fault.before()`` - the write is refused and nothing lands;
* ``Fault.after()`` - every byte lands, then the answer is lost (the caller sees a
  retryable :class:`~tiered_core.errors.DriverError`);
* ``Fault.partial(keep)`` - a prefix of ``keep`` bytes lands (through the inner
  driver's own ``write`` of a shorter slice, so it works for any driver), then the
  call fails;
* ``Fault.size_error()`` - the next ``size`` call fails (recovery cannot ask yet);
* ``Fault.hold(event)`` - the write waits until ``event`` is set, then proceeds (to
  keep a commit in flight).

Everything else is passed to the inner driver unchanged. Because faults land bytes
through the inner driver, what ``size`` reports afterwards is the backend's real
state, which is exactly what recovery code must trust.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from tiered_core.errors import DriverError
from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver


class FaultKind(enum.Enum):
    BEFORE = "before"  # nothing lands
    AFTER = "after"  # everything lands, the ack is lost
    PARTIAL = "partial"  # a prefix lands
    SIZE_ERROR = "size-error"  # size() fails
    HOLD = "hold"  # write blocks until released, then succeeds


_WRITE_KINDS = {FaultKind.BEFORE, FaultKind.AFTER, FaultKind.PARTIAL, FaultKind.HOLD}


@dataclass(frozen=True)
class Fault:
    """One planned failure. ``path`` limits it to one object (``None``: any path).

    ``keep`` (PARTIAL only) is how many bytes land; ``None`` means half of the write.
    It is clamped so that at least one byte of a write of two or more stays missing.
    """

    kind: FaultKind
    keep: int | None = None
    retryable: bool = True
    path: str | None = None
    release: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def before(cls, *, retryable: bool = True, path: str | None = None) -> "Fault":
        return cls(FaultKind.BEFORE, retryable=retryable, path=path)

    @classmethod
    def after(cls, *, path: str | None = None) -> "Fault":
        return cls(FaultKind.AFTER, path=path)

    @classmethod
    def partial(cls, keep: int | None = None, *, path: str | None = None) -> "Fault":
        return cls(FaultKind.PARTIAL, keep=keep, path=path)

    @classmethod
    def size_error(cls, *, path: str | None = None) -> "Fault":
        return cls(FaultKind.SIZE_ERROR, path=path)

    @classmethod
    def hold(cls, release: threading.Event, *, path: str | None = None) -> "Fault":
        return cls(FaultKind.HOLD, path=path, release=release)


@dataclass(frozen=True)
class InjectedFault:
    """What a fault did: ``landed`` bytes of a ``requested``-byte write at ``position``."""

    kind: FaultKind
    path: str
    position: int
    requested: int
    landed: int


class FaultyDriver(SegmentDriver):
    """A driver that fails planned calls of ``inner`` (see the module docstring).

    Thread-safe: faults are taken from the plan under a lock, in order, each by the
    first call it matches. ``injected`` records what each fault did. Capabilities are
    the inner driver's, except ``atomic_write`` is False (a partial fault can leave a
    prefix behind). ``reopen()`` wraps ``inner.reopen()`` with an empty plan.
    ``close()`` leaves ``inner`` open unless ``close_inner`` is True.
    """

    name = "faulty"

    def __init__(self, inner: SegmentDriver, faults: Iterable[Fault] = (), *, close_inner: bool = False) -> None:
        self.inner = inner
        self.close_inner = close_inner
        self._plan: deque[Fault] = deque(faults)
        self._lock = threading.Lock()
        self.injected: list[InjectedFault] = []
        self.options = dict(inner.options)

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:  # noqa: D401 - mirrors the ClassVar
        caps = self.inner.capabilities
        if caps.atomic_write:
            caps = caps.override("FaultyDriver may land a prefix of a write", atomic_write=False)
        return caps

    @property
    def secret_options(self) -> frozenset[str]:  # type: ignore[override]
        return type(self.inner).secret_options

    # -- the plan -------------------------------------------------------------------

    def inject(self, *faults: Fault) -> None:
        """Append ``faults`` to the plan."""
        with self._lock:
            self._plan.extend(faults)

    def clear(self) -> None:
        """Drop every fault not yet used."""
        with self._lock:
            self._plan.clear()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._plan)

    def _take(self, kinds: set[FaultKind], path: str) -> Fault | None:
        with self._lock:
            for fault in self._plan:
                if fault.kind in kinds and (fault.path is None or fault.path == path):
                    self._plan.remove(fault)
                    return fault
        return None

    def _error(self, fault: Fault, what: str, path: str, **context: object) -> DriverError:
        return DriverError(f"injected fault ({fault.kind.value}): {what} {path!r}",
                           retryable=fault.retryable, path=path, injected=True, **context)

    # -- the SPI ----------------------------------------------------------------------

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        path = self.check_path(path)  # bad input is the inner driver's error, not a fault
        fault = self._take(_WRITE_KINDS, path)
        if fault is None:
            self.inner.write(path, position, data)
            return
        data = bytes(data)
        if fault.kind is FaultKind.HOLD:
            assert fault.release is not None
            fault.release.wait()
            self.inner.write(path, position, data)
            self._record(fault, path, position, data, len(data))
            return
        if fault.kind is FaultKind.BEFORE:
            self._record(fault, path, position, data, 0)
            raise self._error(fault, "write refused before landing:", path, position=position)
        if fault.kind is FaultKind.AFTER:
            self.inner.write(path, position, data)
            self._record(fault, path, position, data, len(data))
            raise self._error(fault, "write landed but its answer was lost:", path, position=position)
        keep = len(data) // 2 if fault.keep is None else fault.keep
        keep = max(0, min(keep, len(data) - 1))
        if keep:
            self.inner.write(path, position, data[:keep])
        self._record(fault, path, position, data, keep)
        raise self._error(fault, f"write landed {keep} of {len(data)} bytes:", path, position=position)

    def _record(self, fault: Fault, path: str, position: int, data: bytes, landed: int) -> None:
        with self._lock:
            self.injected.append(InjectedFault(fault.kind, path, position, len(data), landed))

    def size(self, path: str) -> int:
        path = self.check_path(path)
        fault = self._take({FaultKind.SIZE_ERROR}, path)
        if fault is not None:
            raise self._error(fault, "size unavailable for", path)
        return self.inner.size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def create(self, path: str) -> None:
        self.inner.create(path)

    def read(self, path: str, position: int, length: int) -> bytes:
        return self.inner.read(path, position, length)

    def seal(self, path: str) -> None:
        self.inner.seal(path)

    def is_sealed(self, path: str) -> bool:
        return self.inner.is_sealed(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        return self.inner.list(prefix)

    def close(self) -> None:
        if self.close_inner:
            self.inner.close()

    def reopen(self) -> "FaultyDriver":
        return FaultyDriver(self.inner.reopen(), close_inner=True)

    def describe(self) -> dict:
        out = self.inner.describe()
        out["wrapped_by"] = "FaultyDriver"
        return out

    def __repr__(self) -> str:
        return f"FaultyDriver({self.inner!r}, pending={self.pending})"
