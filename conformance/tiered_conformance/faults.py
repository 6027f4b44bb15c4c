"""Fault injection around any driver: :class:`FaultLayer`, the one fault wrapper.

The suite, the core's tests and a driver author's own tests all use it. It is a
:class:`~tiered_core.spi.layer.DriverLayer`: it wraps a real driver and fails the calls a
plan names, the way a real backend can fail them:

* ``Fault.before()`` - the write is refused and nothing lands;
* ``Fault.after()`` - every byte lands, then the answer is lost (the caller sees a
  retryable :class:`~tiered_core.errors.DriverError`);
* ``Fault.partial(keep)`` - a prefix of ``keep`` bytes lands (through the inner
  driver's own ``write`` of a shorter slice, so it works for any driver), then the
  call fails;
* ``Fault.size_error()`` - the next ``size`` call fails (recovery cannot ask yet);
* ``Fault.hold(event)`` - the write waits until ``event`` is set, then proceeds (to
  keep a commit in flight);
* ``Fault.before(op=...)`` / ``Fault.after(op=...)`` - the same for any other call:
  ``size``, ``exists``, ``is_sealed``, ``read``, ``list``, ``create``, ``seal``,
  ``delete``, ``write_if_absent`` (``after``: the call is carried out, its answer lost).

Besides the plan, random faults at a rate (the message-store tests): with
``write_failure_rate`` > 0 that share of writes fails, the kind (before, after, partial)
chosen by a seeded random generator, and so does that share of ``write_if_absent`` calls
(before or after). Calls named in ``unavailable`` fail every time (a backend down for
reads, say).

Everything else is passed to the inner driver unchanged. Because faults land bytes
through the inner driver, what ``size`` reports afterwards is the backend's real state,
which is exactly what recovery code must trust.

Where to put it: *above* the standard layers (``FaultLayer(open_driver(...))``) the
faults reach the caller as they are -- that is how the suite tests ``FileSegment``'s
recovery; *below* them (``layered(FaultLayer(driver))``) they play a failing backend
under the retry layer.
"""

from __future__ import annotations

import enum
import random
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from tiered_core.errors import DriverError
from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.layer import DriverLayer


class FaultKind(enum.Enum):
    BEFORE = "before"  # nothing is done
    AFTER = "after"  # everything is done, the answer is lost
    PARTIAL = "partial"  # a prefix of a write lands
    SIZE_ERROR = "size-error"  # size() fails
    HOLD = "hold"  # write blocks until released, then succeeds


#: Calls a fault may name besides ``write``.
OPS = ("size", "exists", "is_sealed", "read", "list", "create", "seal", "delete", "write_if_absent")
#: Random write-fault kinds, in the order the seeded generator picks from.
RANDOM_KINDS = ("before", "after", "partial")


@dataclass(frozen=True)
class Fault:
    """One planned failure of the next ``op`` call. ``path`` limits it to one object
    (``None``: any; for ``list`` it is matched against the prefix).

    ``keep`` (PARTIAL only) is how many bytes land; ``None`` means half of the write.
    It is clamped so that at least one byte of a write of two or more stays missing.
    """

    kind: FaultKind
    keep: int | None = None
    retryable: bool = True
    path: str | None = None
    release: threading.Event | None = field(default=None, compare=False)
    op: str = "write"

    def __post_init__(self) -> None:
        if self.op != "write" and self.op not in OPS:
            raise ValueError(f"no SPI call {self.op!r}; faults name write or one of {', '.join(OPS)}")
        if self.op != "write" and self.kind not in (FaultKind.BEFORE, FaultKind.AFTER, FaultKind.SIZE_ERROR):
            raise ValueError(f"a {self.kind.value} fault applies to write only, not {self.op}")

    @classmethod
    def before(cls, *, retryable: bool = True, path: str | None = None, op: str = "write") -> "Fault":
        return cls(FaultKind.BEFORE, retryable=retryable, path=path, op=op)

    @classmethod
    def after(cls, *, path: str | None = None, op: str = "write") -> "Fault":
        return cls(FaultKind.AFTER, path=path, op=op)

    @classmethod
    def partial(cls, keep: int | None = None, *, path: str | None = None) -> "Fault":
        return cls(FaultKind.PARTIAL, keep=keep, path=path)

    @classmethod
    def size_error(cls, *, path: str | None = None) -> "Fault":
        return cls(FaultKind.SIZE_ERROR, path=path, op="size")

    @classmethod
    def hold(cls, release: threading.Event, *, path: str | None = None) -> "Fault":
        return cls(FaultKind.HOLD, path=path, release=release)


@dataclass(frozen=True)
class InjectedFault:
    """What a fault did: ``landed`` bytes of a ``requested``-byte write at ``position``
    (0 and 0 for calls other than writes)."""

    kind: FaultKind
    path: str
    position: int
    requested: int
    landed: int
    op: str = "write"


class FaultLayer(DriverLayer):
    """A driver that fails chosen calls of ``inner`` (see the module docstring).

    Thread-safe: planned faults are taken in order, each by the first call it matches.
    ``injected`` records what each fault did, ``counts`` counts them by kind (planned and
    random). Capabilities are the inner driver's, except ``atomic_write`` is False (a
    partial fault can leave a prefix behind). ``reopen()`` wraps ``inner.reopen()`` with
    an empty plan (and the same rate). ``close()`` leaves ``inner`` open unless
    ``close_inner`` is True.
    """

    def __init__(self, inner: SegmentDriver, faults: Iterable[Fault] = (), *, write_failure_rate: float = 0.0,
                 seed: int | str = 0, unavailable: Iterable[str] = (), close_inner: bool = False) -> None:
        if not 0.0 <= write_failure_rate < 1.0:
            raise ValueError(f"write_failure_rate must be in [0, 1), got {write_failure_rate}")
        super().__init__(inner)
        self.close_inner = close_inner
        self.write_failure_rate = write_failure_rate
        self.seed = seed
        self.unavailable: set[str] = set(unavailable)
        self.injected: list[InjectedFault] = []
        self.counts: Counter[str] = Counter()
        self._plan: deque[Fault] = deque(faults)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def with_inner(self, inner: SegmentDriver) -> "FaultLayer":
        return FaultLayer(inner, write_failure_rate=self.write_failure_rate, seed=self.seed, close_inner=True)

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:  # noqa: D401 - mirrors the ClassVar
        caps = self.inner.capabilities
        if caps.atomic_write:
            caps = caps.override("the fault layer may land a prefix of a write", atomic_write=False)
        return caps

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

    def _take(self, op: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._plan:
                if fault.op == op and (fault.path is None or fault.path == path):
                    self._plan.remove(fault)
                    return fault
            if self.write_failure_rate and op in ("write", "write_if_absent"):
                if self._rng.random() < self.write_failure_rate:
                    kind = self._rng.choice(RANDOM_KINDS)
                    if op == "write_if_absent" and kind == "partial":
                        kind = "before"  # a create is all or nothing
                    return Fault(FaultKind(kind), op=op)
        return None

    def _record(self, fault: Fault, path: str, position: int = 0, requested: int = 0, landed: int = 0) -> None:
        with self._lock:
            self.injected.append(InjectedFault(fault.kind, path, position, requested, landed, fault.op))
            self.counts[fault.kind.value] += 1

    def _error(self, fault: Fault, what: str, path: str, **context: object) -> DriverError:
        return DriverError(f"injected fault ({fault.kind.value}): {what} {path!r}",
                           retryable=fault.retryable, path=path, injected=fault.kind.value, **context)

    def _call(self, op: str, path: str, call: Callable[[], Any]) -> Any:
        """Run a call that is not a write through the plan (before/after faults)."""
        if op in self.unavailable:
            raise DriverError(f"injected fault: the backend refuses {op} ({path!r})", retryable=True,
                              path=path, injected="unavailable")
        fault = self._take(op, path)
        if fault is None:
            return call()
        if fault.kind is FaultKind.AFTER:
            call()
            self._record(fault, path)
            raise self._error(fault, f"{op} was carried out but its answer was lost:", path)
        self._record(fault, path)
        raise self._error(fault, f"{op} refused:" if op != "size" else "size unavailable for", path)

    # -- the SPI ----------------------------------------------------------------------

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        if "write" in self.unavailable:
            raise DriverError(f"injected fault: the backend refuses writes ({path!r})", retryable=True,
                              path=path, injected="unavailable")
        fault = self._take("write", path)
        if fault is None:
            self.inner.write(path, position, data)
            return
        data = bytes(data)
        if fault.kind is FaultKind.HOLD:
            assert fault.release is not None
            fault.release.wait()
            self.inner.write(path, position, data)
            self._record(fault, path, position, len(data), len(data))
            return
        if fault.kind is FaultKind.BEFORE:
            self._record(fault, path, position, len(data), 0)
            raise self._error(fault, "write refused before landing:", path, position=position)
        if fault.kind is FaultKind.AFTER:
            self.inner.write(path, position, data)
            self._record(fault, path, position, len(data), len(data))
            raise self._error(fault, "write landed but its answer was lost:", path, position=position)
        keep = len(data) // 2 if fault.keep is None else fault.keep
        keep = max(0, min(keep, len(data) - 1))
        if keep:
            self.inner.write(path, position, data[:keep])
        self._record(fault, path, position, len(data), keep)
        raise self._error(fault, f"write landed {keep} of {len(data)} bytes:", path, position=position)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        return self._call("write_if_absent", path, lambda: self.inner.write_if_absent(path, data))

    def close(self) -> None:
        if self.close_inner:
            self.inner.close()

    def __repr__(self) -> str:
        return f"FaultLayer({self.inner!r}, pending={self.pending})"


#: The name of releases before driver layers; the same class.
FaultyDriver = FaultLayer
