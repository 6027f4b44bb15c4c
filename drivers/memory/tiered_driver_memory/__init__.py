"""In-process memory backend for tiered-store.

A real backend, not a mock: objects live in a process-wide namespace, so a fresh
driver instance with the same ``namespace`` sees the same bytes (until the process
exits). Positions are checked under a lock, so racing writers cannot both append.
Used by fast tests and, wrapped by ``tiered_conformance.faults``, for fault injection.
Like every driver it leaves input checks and retries to the layers ``open_driver``
wraps it in (:mod:`tiered_core.spi.layer`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterator

from tiered_core import hookimpl
from tiered_core.errors import IllegalParam, NotFound, PositionMismatch, SegmentSealed
from tiered_core.spi import Capabilities, SegmentDriver

__version__ = "0.1.0"


@dataclass
class _Object:
    data: bytearray = field(default_factory=bytearray)
    sealed: bool = False


_NAMESPACES: dict[str, dict[str, _Object]] = {}
_NAMESPACES_LOCK = threading.Lock()


class MemoryDriver(SegmentDriver):
    """Objects in process memory, shared by every instance with the same namespace.

    Guarantees the whole driver contract; bytes do not survive the process.
    """

    name = "memory"
    #: RocketMQ's ``tieredBackendServiceProvider`` class, full and short.
    aliases = ("org.apache.rocketmq.tieredstore.provider.MemoryFileSegment", "MemoryFileSegment")
    #: Only what differs from the defaults of :class:`Capabilities`.
    capabilities = Capabilities(conditional_append=True, survives_process_exit=False, atomic_write=True,
                                create_if_absent=True)
    location_options = ("namespace",)

    def __init__(self, *, namespace: str = "default") -> None:
        self.namespace = namespace
        with _NAMESPACES_LOCK:
            self._objects = _NAMESPACES.setdefault(namespace, {})
        self._ns_lock = _namespace_lock(namespace)

    def size(self, path: str) -> int:
        with self._ns_lock:
            obj = self._objects.get(path)
            return len(obj.data) if obj else 0

    def exists(self, path: str) -> bool:
        with self._ns_lock:
            return path in self._objects

    def create(self, path: str) -> None:
        with self._ns_lock:
            self._objects.setdefault(path, _Object())

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        with self._ns_lock:
            obj = self._objects.setdefault(path, _Object())
            if obj.sealed:
                raise SegmentSealed(path)
            if position != len(obj.data):
                raise PositionMismatch(path, position, len(obj.data))
            obj.data += data

    def write_if_absent(self, path: str, data: bytes) -> bool:
        with self._ns_lock:
            if path in self._objects:
                return False
            self._objects[path] = _Object(bytearray(data))
            return True

    def read(self, path: str, position: int, length: int) -> bytes:
        with self._ns_lock:
            obj = self._objects.get(path)
            if obj is None:
                raise NotFound(path)
            if position + length > len(obj.data):
                raise IllegalParam(
                    f"read of {path!r} [{position}, {position + length}) passes its size {len(obj.data)}",
                    path=path, position=position, length=length,
                )
            return bytes(obj.data[position:position + length])

    def seal(self, path: str) -> None:
        with self._ns_lock:
            obj = self._objects.get(path)
            if obj is None:
                raise NotFound(path, "cannot be sealed: it does not exist")
            obj.sealed = True

    def is_sealed(self, path: str) -> bool:
        with self._ns_lock:
            obj = self._objects.get(path)
            return bool(obj and obj.sealed)

    def delete(self, path: str) -> None:
        with self._ns_lock:
            self._objects.pop(path, None)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        with self._ns_lock:
            items = [(p, len(o.data)) for p, o in self._objects.items() if p.startswith(prefix)]
        return iter(sorted(items))

    @classmethod
    def conformance_environment(cls, workdir: str):
        import contextlib
        import uuid

        return contextlib.nullcontext({"namespace": f"conformance-{uuid.uuid4().hex}"})

    @staticmethod
    def drop_namespace(namespace: str) -> None:
        """Forget every object of ``namespace`` (tests)."""
        with _NAMESPACES_LOCK:
            _NAMESPACES.pop(namespace, None)


_LOCKS: dict[str, threading.Lock] = {}


def _namespace_lock(namespace: str) -> threading.Lock:
    with _NAMESPACES_LOCK:
        return _LOCKS.setdefault(namespace, threading.Lock())


@hookimpl
def tiered_register_drivers(register) -> None:
    register(MemoryDriver)
