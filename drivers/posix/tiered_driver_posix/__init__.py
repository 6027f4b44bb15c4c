"""POSIX directory backend for tiered-store.

Each object is a file under ``root`` (RocketMQ's PosixFileSegment layout when the
container layer names the paths, so a RocketMQ tiered directory is readable). Writes
are ``os.pwrite`` + ``os.fdatasync`` under an exclusive ``flock``, so the position check
holds across threads and processes. Seal = ``fsync`` + mode 0444; the seal is checked
from the mode, because root ignores file permissions.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import uuid
from typing import Iterator

from tiered_core import hookimpl
from tiered_core.common import fsync_dir
from tiered_core.errors import DriverError, IllegalParam, InvalidPath, NotFound, PositionMismatch, SegmentSealed
from tiered_core.spi import Capabilities, SegmentDriver

__version__ = "0.1.0"

# Failures worth retrying: the same call may succeed once the condition passes.
_RETRYABLE = {errno.EINTR, errno.EAGAIN, errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EBUSY, errno.EMFILE, errno.ENFILE}
_SEALED_MODE = 0o444
_FILE_MODE = 0o644
#: Scratch directory under the root for objects being created whole (never listed).
_SCRATCH = ".tiered-scratch"


class PosixDriver(SegmentDriver):
    """Objects as files under a root directory.

    Guarantees the whole driver contract, with the position checked atomically
    (``flock``) and every write made durable (``fdatasync``) before it returns, unless
    ``fsync=False``. A path that would leave ``root`` (``..``, absolute, or through a
    symlink) raises :class:`~tiered_core.errors.InvalidPath`.
    """

    name = "posix"
    #: RocketMQ's ``tieredBackendServiceProvider`` class, full and short.
    aliases = ("org.apache.rocketmq.tieredstore.provider.PosixFileSegment", "PosixFileSegment")
    #: Only what differs from the defaults of :class:`Capabilities`.
    capabilities = Capabilities(conditional_append=True, create_if_absent=True)
    location_options = ("root",)

    def __init__(self, *, root: str, fsync: bool = True) -> None:
        if not root:
            raise InvalidPath("option 'root' of driver 'posix' must be a directory path", path=root)
        self.root = os.path.realpath(os.path.expanduser(root))
        self.fsync = fsync
        # Opening creates nothing (a refused or read-only store open must leave no root
        # behind): the root and its directories are made by the first write.
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise InvalidPath(f"option 'root' of driver 'posix' is not a directory: {self.root!r}", path=self.root)
        # Once the root was seen, its disappearance is an outage (an unmounted share, a
        # moved directory), never an empty tier: nothing re-creates it, and a missing object
        # under it is not reported as absent (a size of 0 would read as lost bytes).
        self._root_seen = os.path.isdir(self.root)

    def _root_gone(self, path: str) -> DriverError | None:
        """A retryable DriverError when the root this driver saw is gone; None otherwise."""
        if self._root_seen and not os.path.isdir(self.root):
            return DriverError(f"posix: the tier root {self.root!r} is gone (an unmounted share, a moved "
                               f"directory?) while accessing {path!r}: the tier is unavailable until it is "
                               "back; nothing was written", retryable=True, path=path, root=self.root)
        return None

    @classmethod
    def location(cls, options):
        name, where = super().location(options)
        if where.get("root"):
            where["root"] = os.path.abspath(os.path.expanduser(where["root"]))
        return name, where

    # -- paths ---------------------------------------------------------------------

    def _full(self, path: str) -> str:
        # The layers have checked the path already; the root is confined here all the same
        # (and against symlinks), since a file outside it is never this driver's to touch.
        path = self.check_path(path)
        if path.split("/", 1)[0] == _SCRATCH:
            raise InvalidPath(f"path {path!r} is inside the driver's reserved {_SCRATCH!r} directory", path=path)
        full = os.path.join(self.root, path)
        # A symlink inside the root could still point outside it.
        real = os.path.realpath(full)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise InvalidPath(f"path {path!r} resolves outside the driver root", path=path)
        return full

    # -- operations ---------------------------------------------------------------

    def size(self, path: str) -> int:
        full = self._full(path)
        try:
            return os.stat(full).st_size
        except FileNotFoundError:
            if (gone := self._root_gone(path)) is not None:
                raise gone from None
            return 0
        except OSError as exc:
            raise _error(exc, "stat", path) from exc

    def exists(self, path: str) -> bool:
        if os.path.isfile(self._full(path)):
            return True
        if (gone := self._root_gone(path)) is not None:
            raise gone
        return False

    def create(self, path: str) -> None:
        full = self._full(path)
        if os.path.isfile(full):
            return
        try:
            self._open_for_write(full, path).close()
        except OSError as exc:
            raise _error(exc, "create", path) from exc

    def _open_for_write(self, full: str, path: str, *, create: bool = True):
        """The file ``full`` opened for writing; created (with its directories) when
        ``create``, else PositionMismatch(0) when it does not exist (a write past 0 to a
        missing object stores nothing, as the contract says)."""
        created = not os.path.exists(full)
        if created:
            if (gone := self._root_gone(path)) is not None:
                raise gone
            if not create:
                raise _Missing()
            os.makedirs(os.path.dirname(full), exist_ok=True)
            self._root_seen = True
        fd = os.open(full, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), _FILE_MODE)
        if created and self.fsync:
            fsync_dir(os.path.dirname(full))
        return _Fd(fd)

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        full = self._full(path)
        view = memoryview(data).cast("B")
        try:
            with self._open_for_write(full, path, create=position == 0) as fd:
                fcntl.flock(fd.fd, fcntl.LOCK_EX)
                st = os.fstat(fd.fd)
                if _is_sealed_mode(st.st_mode):
                    raise SegmentSealed(path)
                if st.st_size != position:
                    raise PositionMismatch(path, position, st.st_size)
                done = 0
                while done < len(view):
                    done += os.pwrite(fd.fd, view[done:], position + done)
                if self.fsync:
                    os.fdatasync(fd.fd)
        except (_Missing, FileNotFoundError):
            if (gone := self._root_gone(path)) is not None:
                raise gone from None
            raise PositionMismatch(path, position, 0) from None
        except OSError as exc:
            raise _error(exc, "write", path, position=position) from exc

    def write_if_absent(self, path: str, data: bytes) -> bool:
        """Write ``data`` to a scratch file, make it durable, then ``link`` it into place:
        the link fails with EEXIST if anything is there, and a reader never sees a part."""
        full = self._full(path)
        scratch_dir = os.path.join(self.root, _SCRATCH)
        scratch = os.path.join(scratch_dir, uuid.uuid4().hex)
        if (gone := self._root_gone(path)) is not None:
            raise gone
        try:
            os.makedirs(scratch_dir, exist_ok=True)
            self._root_seen = True
            with _Fd(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE)) as fd:
                view = memoryview(data).cast("B")
                done = 0
                while done < len(view):
                    done += os.write(fd.fd, view[done:])
                if self.fsync:
                    os.fsync(fd.fd)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            try:
                os.link(scratch, full)
            except FileExistsError:
                return False
            if self.fsync:
                fsync_dir(os.path.dirname(full))
            return True
        except OSError as exc:
            raise _error(exc, "create", path) from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(scratch)

    def read(self, path: str, position: int, length: int) -> bytes:
        full = self._full(path)
        try:
            fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise self._root_gone(path) or NotFound(path) from None
        except OSError as exc:
            raise _error(exc, "open", path) from exc
        with _Fd(fd):
            try:
                size = os.fstat(fd).st_size
                if position + length > size:
                    raise IllegalParam(
                        f"read of {path!r} [{position}, {position + length}) passes its size {size}",
                        path=path, position=position, length=length,
                    )
                chunks = []
                done = 0
                while done < length:
                    chunk = os.pread(fd, length - done, position + done)
                    if not chunk:
                        raise DriverError(f"short read of {path!r} at {position + done}", retryable=True, path=path)
                    chunks.append(chunk)
                    done += len(chunk)
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            except OSError as exc:
                raise _error(exc, "read", path, position=position) from exc

    def seal(self, path: str) -> None:
        full = self._full(path)
        try:
            fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise self._root_gone(path) or NotFound(path, "cannot be sealed: it does not exist") from None
        except OSError as exc:
            raise _error(exc, "seal", path) from exc
        with _Fd(fd):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # wait for an in-flight write
                if self.fsync:
                    os.fsync(fd)
                os.fchmod(fd, _SEALED_MODE)
            except OSError as exc:
                raise _error(exc, "seal", path) from exc

    def is_sealed(self, path: str) -> bool:
        try:
            return _is_sealed_mode(os.stat(self._full(path)).st_mode)
        except FileNotFoundError:
            return False

    def delete(self, path: str) -> None:
        full = self._full(path)
        try:
            os.unlink(full)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _error(exc, "delete", path) from exc

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        prefix = self.check_prefix(prefix)
        # Walk only below the deepest directory the prefix names.
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = os.path.join(self.root, base_dir) if base_dir else self.root
        if (gone := self._root_gone(prefix)) is not None:
            raise gone  # (an empty listing would read as a tier that lost everything)
        out = []
        for dirpath, dirnames, filenames in os.walk(start):
            if dirpath == self.root and _SCRATCH in dirnames:
                dirnames.remove(_SCRATCH)
            dirnames.sort()
            for fname in filenames:
                full = os.path.join(dirpath, fname)
                rel = os.path.relpath(full, self.root).replace(os.sep, "/")
                if rel.startswith(prefix):
                    try:
                        out.append((rel, os.stat(full).st_size))
                    except FileNotFoundError:
                        continue  # deleted while listing
        return iter(sorted(out))

    @classmethod
    def conformance_environment(cls, workdir: str):
        return contextlib.nullcontext({"root": os.path.join(workdir, "posix-root")})


class _Missing(Exception):
    """A write past position 0 to an object that does not exist (internal)."""


class _Fd:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> "_Fd":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _is_sealed_mode(mode: int) -> bool:
    return stat.S_ISREG(mode) and not (mode & 0o222)


def _error(exc: OSError, action: str, path: str, **context) -> DriverError:
    return DriverError(
        f"posix: cannot {action} {path!r}: {exc.strerror or exc}",
        retryable=exc.errno in _RETRYABLE,
        path=path,
        errno=exc.errno,
        **context,
    )


@hookimpl
def tiered_register_drivers(register) -> None:
    register(PosixDriver)
