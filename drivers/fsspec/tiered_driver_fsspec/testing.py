"""In-process filesystems for the fsspec driver's tests (and anyone testing a layout on them).

* :class:`ObjectStoreFS` (``tieredtest-objects://``): an in-memory object store with an
  atomic exclusive create (``pipe_file(mode="create")`` under a lock) and no append, the
  guarantees of S3/GCS/Azure without a server; declared with
  :func:`tiered_driver_fsspec.guarantees.declare`, so the driver runs the part chain on it.
* :class:`PlainLocalFS` (``tieredtest-plain://``): local files through a class the driver
  knows nothing about, so it gets no credit: fsspec's base ``pipe_file(mode="create")``
  checks, then writes. It stands for sftp, hdfs or any other filesystem without an atomic
  create (refused, or run with ``single_writer = true``).

:func:`register` registers both protocols with fsspec (idempotent).
"""

from __future__ import annotations

import threading
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from .guarantees import declare

OBJECTS = "tieredtest-objects"
PLAIN = "tieredtest-plain"


class ObjectStoreFS(MemoryFileSystem):
    """Immutable objects in this process, with an atomic ``pipe_file(mode="create")``."""

    protocol = OBJECTS
    store: dict[str, Any] = {}  # its own namespace, not memory://'s
    pseudo_dirs = [""]
    _lock = threading.RLock()

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        with self._lock:
            path = self._strip_protocol(path)
            if mode == "create" and path in self.store:
                raise FileExistsError(path)
            super().pipe_file(path, bytes(value), mode="overwrite")

    def cat_file(self, path, start=None, end=None, **kwargs):
        with self._lock:  # memory handles share a position: read the bytes, not the handle
            path = self._strip_protocol(path)
            if path not in self.store:
                raise FileNotFoundError(path)
            return self.store[path].getvalue()[start or 0:end]

    def _open(self, path, mode="rb", **kwargs):
        if "a" in mode or "+" in mode:
            raise NotImplementedError(f"{OBJECTS}:// objects are immutable: no mode {mode!r}")
        return super()._open(path, mode=mode, **kwargs)

    def info(self, path, **kwargs):
        with self._lock:
            return super().info(path, **kwargs)

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        with self._lock:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail)

    def rm_file(self, path):
        with self._lock:
            super().rm_file(path)


class PlainLocalFS(LocalFileSystem):
    """Local files under an unknown class: no atomic create is known for it."""

    protocol = PLAIN

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        if path.startswith(PLAIN + "://"):
            path = path[len(PLAIN) + 3:]
        return super()._strip_protocol(path)


def register() -> None:
    fsspec.register_implementation(OBJECTS, ObjectStoreFS, clobber=True)
    fsspec.register_implementation(PLAIN, PlainLocalFS, clobber=True)
    declare(ObjectStoreFS, exclusive_create="pipe_file(mode='create') under a lock", atomic_write=True,
            object_store=True, in_process=True)
