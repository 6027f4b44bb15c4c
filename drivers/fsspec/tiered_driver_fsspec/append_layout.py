"""The append layout: one object per segment, appended in place (local files, memory).

A segment at key ``K`` is the object ``K``; its seal is a marker object ``K#tiered-sealed``
created beside it (a filesystem has no portable read-only flag). Scratch files for
atomic creates live in ``{root}/.tiered-scratch/`` (never listed). The size is the
object's size, so it is exact after a crash at any point: a write cut short leaves a
prefix, and ``size`` says how much.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from typing import Any, Callable, Iterator

from tiered_core.common import fsync_dir
from tiered_core.errors import DriverError, IllegalParam, NotFound, PositionMismatch, SegmentSealed

SEAL_MARK = "#tiered-sealed"
SCRATCH = ".tiered-scratch"

#: Every call on an in-process filesystem (memory://) runs under this lock: its namespace
#: is shared by every instance in the process, and its handles share one position.
_PROCESS_LOCK = threading.RLock()


class AppendLayout:
    """Segment operations on a filesystem that can append (``open(key, "ab")``).

    ``fs`` is an fsspec filesystem, ``root`` the path below which objects live; ``call``
    runs one filesystem call and turns its failure into a typed error. With ``serialize``
    every operation holds the process-wide lock (memory://), which makes the position
    check and the append one atomic step; otherwise the check and the append are two
    steps, and only prefix ownership keeps a second writer away. With ``link_create``
    ``write_if_absent`` links a complete scratch file into place (local files).
    """

    def __init__(self, fs: Any, root: str, call: Callable[..., Any], *, serialize: bool, link_create: bool,
                 fsync: bool = True) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.call = call
        self.link_create = link_create
        self.fsync = fsync
        self._lock: Any = _PROCESS_LOCK if serialize else contextlib.nullcontext()

    # -- names -------------------------------------------------------------------------

    def key(self, path: str) -> str:
        return f"{self.root}/{path}"

    def _info(self, key: str, what: str, path: str) -> dict[str, Any] | None:
        try:
            info = self.call(what, path, self.fs.info, key)
        except NotFound:
            return None
        return info if info.get("type") == "file" else None

    # -- reads -------------------------------------------------------------------------

    def size(self, path: str) -> int:
        with self._lock:
            info = self._info(self.key(path), "look up", path)
            return int(info["size"]) if info else 0

    def exists(self, path: str) -> bool:
        with self._lock:
            return self._info(self.key(path), "look up", path) is not None

    def is_sealed(self, path: str) -> bool:
        with self._lock:
            return self._info(self.key(path) + SEAL_MARK, "look up the seal of", path) is not None

    def read(self, path: str, position: int, length: int) -> bytes:
        key = self.key(path)
        with self._lock:
            info = self._info(key, "look up", path)
            if info is None:
                raise NotFound(path)
            size = int(info["size"])
            if position + length > size:
                raise IllegalParam(f"read of {path!r} [{position}, {position + length}) passes its size {size}",
                                   path=path, position=position, length=length)
            data = self.call("read", path, self.fs.cat_file, key, start=position, end=position + length)
        if len(data) != length:
            raise DriverError(f"fsspec: short read of {path!r} at {position}: {len(data)} of {length} bytes",
                              retryable=True, path=path)
        return bytes(data)

    def list(self, prefix: str) -> Iterator[tuple[str, int]]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = f"{self.root}/{base}" if base else self.root
        with self._lock:
            try:
                found = self.call("list", prefix, self.fs.find, top, detail=True)
            except NotFound:
                return iter([])
        out = []
        skip = self.root + "/"
        for name, info in found.items():
            name = name.rstrip("/")
            if info.get("type") != "file" or not name.startswith(skip):
                continue
            rel = name[len(skip):]
            if rel.startswith(SCRATCH + "/") or SEAL_MARK in rel or not rel.startswith(prefix):
                continue
            out.append((rel, int(info.get("size") or 0)))
        return iter(sorted(out))

    # -- writes ------------------------------------------------------------------------

    def _makedirs(self, key: str, path: str) -> None:
        parent = key.rsplit("/", 1)[0]
        if parent:
            self.call("create the directory of", path, self.fs.makedirs, parent, exist_ok=True)

    def _create_empty(self, key: str, path: str) -> bool:
        """Create an empty object unless one exists; True when this call created it."""
        self._makedirs(key, path)
        try:
            self.call("create", path, _touch_exclusive, self.fs, key, exists_ok=False)
        except FileExistsError:
            return False
        self._sync_dir(key, path)
        return True

    def _sync_dir(self, key: str, path: str) -> None:
        """Make a new directory entry durable (local files only: a name is durable once its
        directory is fsynced)."""
        if self.link_create and self.fsync:
            self.call("sync the directory of", path, fsync_dir, key.rsplit("/", 1)[0] or "/")

    def create(self, path: str) -> None:
        key = self.key(path)
        with self._lock:
            if self._info(key, "look up", path) is None:
                self._create_empty(key, path)

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        key = self.key(path)
        payload = bytes(data)
        with self._lock:
            if self._info(key + SEAL_MARK, "look up the seal of", path) is not None:
                raise SegmentSealed(path)
            info = self._info(key, "look up", path)
            size = int(info["size"]) if info else 0
            if size != position:
                raise PositionMismatch(path, position, size)
            if info is None:
                self._makedirs(key, path)
            if not payload:
                if info is None:
                    self._create_empty(key, path)
                return
            self.call("write", path, _append, self.fs, key, payload, self.fsync)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        key = self.key(path)
        with self._lock:
            if self._info(key, "look up", path) is not None:
                return False
            self._makedirs(key, path)
            if not self.link_create:  # serialized: the check above and this write are one step
                self.call("create", path, self.fs.pipe_file, key, bytes(data))
                return True
            scratch = f"{self.root}/{SCRATCH}/{uuid.uuid4().hex}"
            self.call("create a scratch file for", path, self.fs.makedirs, f"{self.root}/{SCRATCH}", exist_ok=True)
            try:
                self.call("create a scratch file for", path, _write_new, self.fs, scratch, bytes(data), self.fsync)
                try:
                    self.call("create", path, self.fs.link, scratch, key)
                except FileExistsError:
                    return False
                self._sync_dir(key, path)
                return True
            finally:
                with contextlib.suppress(Exception):
                    self.fs.rm_file(scratch)

    def seal(self, path: str) -> None:
        key = self.key(path)
        with self._lock:
            if self._info(key, "look up", path) is None:
                raise NotFound(path, "cannot be sealed: it does not exist")
            if self._info(key + SEAL_MARK, "look up the seal of", path) is not None:
                return
            if self.fsync:
                self.call("seal", path, _fsync_path, self.fs, key)
            self.call("seal", path, _touch_exclusive, self.fs, key + SEAL_MARK, exists_ok=True)
            self._sync_dir(key, path)

    def delete(self, path: str) -> None:
        key = self.key(path)
        with self._lock:
            # The seal first: a crash in between leaves an unsealed object (deleted by the
            # next try), never a seal that a new segment at this path would inherit.
            for target in (key + SEAL_MARK, key):
                try:
                    self.call("delete", path, self.fs.rm_file, target)
                except NotFound:
                    pass


def _touch_exclusive(fs: Any, key: str, *, exists_ok: bool) -> None:
    """Create an empty object with mode ``"xb"`` (local files: ``O_EXCL``)."""
    try:
        with fs.open(key, "xb"):
            pass
    except FileExistsError:
        if not exists_ok:
            raise


def _append(fs: Any, key: str, payload: bytes, fsync: bool) -> None:
    with fs.open(key, "ab") as f:
        f.write(payload)
        f.flush()
        if fsync:
            _fsync_handle(f)


def _write_new(fs: Any, key: str, payload: bytes, fsync: bool) -> None:
    with fs.open(key, "xb") as f:
        f.write(payload)
        f.flush()
        if fsync:
            _fsync_handle(f)


def _fsync_handle(f: Any) -> None:
    """fsync a local file handle; other handles have no descriptor and nothing to do."""
    try:
        fd = f.fileno()
    except (AttributeError, OSError, ValueError, NotImplementedError):
        return
    os.fsync(fd)


def _fsync_path(fs: Any, key: str) -> None:
    with fs.open(key, "rb") as f:
        _fsync_handle(f)
