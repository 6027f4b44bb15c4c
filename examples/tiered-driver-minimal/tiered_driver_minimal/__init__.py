"""The smallest complete tiered-store driver: objects in a dict, shared by name.

It is written against the SPI alone and has, on purpose, no input checks and no retry
code: ``open_driver`` (and the conformance suite) run every driver in the standard
layers, which check paths, positions, lengths and data before a driver sees them, refuse
calls after ``close()``, and retry retryable failures of the calls that are safe to
repeat. What is left is the contract itself: exact sizes, the position check, seal,
listing, the typed errors.

Objects live in a process-wide dict per ``store`` name, so ``reopen()`` (a fresh
instance with the same options) sees the same bytes; nothing survives the process.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Iterator

from tiered_core import hookimpl
from tiered_core.errors import IllegalParam, NotFound, PositionMismatch, SegmentSealed
from tiered_core.spi import Capabilities, SegmentDriver

__version__ = "0.1.0"

_STORES: dict[str, dict[str, "_Object"]] = {}
_LOCK = threading.Lock()  # one lock for every store: minimal, not fast


class _Object:
    def __init__(self) -> None:
        self.data = bytearray()
        self.sealed = False


class MinimalDriver(SegmentDriver):
    """Objects in process memory, one dict per ``store`` name."""

    name = "minimal"
    capabilities = Capabilities(
        conditional_append=True,  # the position is checked under the lock
        seal=True,
        list=True,
        persistent=True,  # for the life of the process: instances share the store
        survives_process_exit=False,
        concurrent_paths=True,
        atomic_write=True,
        # The SPI's default write_if_absent (exists, then a write at 0) is atomic here,
        # because that write is conditional and all or nothing.
        create_if_absent=True,
    )

    def __init__(self, *, store: str = "default") -> None:
        self.store = store
        with _LOCK:
            self._objects = _STORES.setdefault(store, {})

    def size(self, path: str) -> int:
        with _LOCK:
            obj = self._objects.get(path)
            return len(obj.data) if obj else 0

    def exists(self, path: str) -> bool:
        with _LOCK:
            return path in self._objects

    def create(self, path: str) -> None:
        with _LOCK:
            self._objects.setdefault(path, _Object())

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        with _LOCK:
            obj = self._objects.get(path)
            size = len(obj.data) if obj else 0
            if obj is not None and obj.sealed:
                raise SegmentSealed(path)
            if position != size:
                raise PositionMismatch(path, position, size)
            if obj is None:
                obj = self._objects[path] = _Object()
            obj.data += data

    def read(self, path: str, position: int, length: int) -> bytes:
        with _LOCK:
            obj = self._objects.get(path)
            if obj is None:
                raise NotFound(path)
            if position + length > len(obj.data):
                raise IllegalParam(f"read of {path!r} [{position}, {position + length}) passes its size "
                                   f"{len(obj.data)}", path=path, position=position, length=length)
            return bytes(obj.data[position:position + length])

    def seal(self, path: str) -> None:
        with _LOCK:
            obj = self._objects.get(path)
            if obj is None:
                raise NotFound(path, "cannot be sealed: it does not exist")
            obj.sealed = True

    def is_sealed(self, path: str) -> bool:
        with _LOCK:
            obj = self._objects.get(path)
            return obj is not None and obj.sealed

    def delete(self, path: str) -> None:
        with _LOCK:
            self._objects.pop(path, None)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        with _LOCK:
            return iter(sorted((p, len(o.data)) for p, o in self._objects.items() if p.startswith(prefix)))

    @classmethod
    def conformance_environment(cls, workdir: str):
        return contextlib.nullcontext({"store": f"conformance-{uuid.uuid4().hex}"})

    @staticmethod
    def drop(store: str) -> None:
        """Forget every object of ``store`` (tests)."""
        with _LOCK:
            _STORES.pop(store, None)


@hookimpl
def tiered_register_drivers(register) -> None:
    register(MinimalDriver)
