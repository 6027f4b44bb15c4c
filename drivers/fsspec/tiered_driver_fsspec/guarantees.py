"""What an fsspec filesystem really guarantees, and the capabilities the driver derives from it.

fsspec's own API promises little: ``AbstractFileSystem.pipe_file(mode="create")`` checks
``exists()`` and then writes, so two racing writers can both "create" an object, and
mode ``"ab"`` never checks a size. Only some implementations do better, and only by
overriding those calls, which nothing declares. So the guarantees are looked up by the
filesystem's exact class (a subclass may override the very call that mattered, so it gets
no credit), from the installed sources and tests:

* ``s3fs.S3FileSystem``, ``gcsfs.GCSFileSystem``, ``adlfs.AzureBlobFileSystem``:
  ``pipe_file(mode="create")`` is one conditional request (S3 ``If-None-Match: *``, GCS
  ``ifGenerationMatch=0``, Azure ``If-None-Match: *``); exactly one of racing creators
  wins and a reader never sees a partial object. No append (objects are immutable):
  segments use the part chain (:mod:`tiered_core.spi.objectstore`).
* ``fsspec.implementations.local.LocalFileSystem``: ``pipe_file(mode="create")`` is the
  non-atomic base; but ``link`` is ``os.link``, which fails with ``EEXIST`` atomically,
  so the driver writes a complete scratch file and links it into place (as the posix
  driver does). Append is ``open("ab")``: real, but without a size condition, so
  ``conditional_append`` is False.
* ``fsspec.implementations.memory.MemoryFileSystem``: ``pipe_file(mode="create")`` checks,
  then writes, and every handle of one path shares one ``BytesIO`` (a reader's seek moves
  an appender's position). Its namespace lives in this process only, so the driver runs
  every call on it under one process-wide lock: creates and appends at an exact size are
  then atomic for every writer there can be.
* Anything else (sftp, hdfs, ftp, webdav, a ``dir::`` or cache wrapper...): no atomic
  create is known, so no prefix ownership: refused unless ``single_writer = true``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiered_core.spi import Capabilities

#: Layouts: one object appended in place, or a base plus exclusive-create parts.
APPEND = "append"
CHAIN = "chain"

_OBJECT_STORES = {
    "s3fs.core.S3FileSystem": "pipe_file(mode='create') sends If-None-Match: * (S3 conditional write)",
    "gcsfs.core.GCSFileSystem": "pipe_file(mode='create') uploads with ifGenerationMatch=0",
    "adlfs.spec.AzureBlobFileSystem": "pipe_file(mode='create') uploads with If-None-Match: *",
}
#: The object-store filesystem classes (the driver checks their bucket exists at open).
OBJECT_STORES = frozenset(_OBJECT_STORES)
_LOCAL = "fsspec.implementations.local.LocalFileSystem"
_MEMORY = "fsspec.implementations.memory.MemoryFileSystem"


@dataclass(frozen=True)
class Guarantees:
    """What one filesystem class guarantees, with how (the text ``describe`` shows)."""

    #: ``module.Class`` of the filesystem.
    filesystem: str
    #: How an object is created atomically when absent; None: it cannot be.
    exclusive_create: str | None
    #: How bytes are appended at an exact size atomically; None: they cannot be.
    conditional_append: str | None
    #: APPEND (one object, appended) or CHAIN (base + exclusive-create parts).
    layout: str
    #: The namespace is this process's memory (gone when it exits).
    in_process: bool = False
    #: One write lands whole or not at all.
    atomic_write: bool = False
    #: A flat key namespace listed by key prefix (``find(path, prefix=...)``), no directories.
    object_store: bool = False

    def capabilities(self) -> Capabilities:
        return Capabilities(
            conditional_append=self.conditional_append is not None,
            create_if_absent=self.exclusive_create is not None,
            atomic_write=self.atomic_write,
            survives_process_exit=not self.in_process,
        )

    def missing(self) -> list[str]:
        """What a store needs and this filesystem lacks (capability names)."""
        return [] if self.exclusive_create else ["create_if_absent"]

    def as_dict(self) -> dict[str, object]:
        return {"filesystem": self.filesystem, "exclusive_create": self.exclusive_create,
                "conditional_append": self.conditional_append, "layout": self.layout}


_DECLARED: dict[str, Guarantees] = {}


def declare(cls: type, *, exclusive_create: str, atomic_write: bool, object_store: bool,
            in_process: bool = False) -> Guarantees:
    """Declare that filesystem class ``cls`` (exactly; not its subclasses) creates objects
    atomically with ``pipe_file(mode="create")`` -- ``exclusive_create`` says how -- and
    cannot append: the driver then uses the part chain on it, with ``create_if_absent``
    and ``conditional_append``. For a filesystem package that knows its own guarantees
    (and for tests); the declaration is the declarer's promise, checked by nothing."""
    name = qualified_name(cls)
    how = f"one part per position, created exclusively ({exclusive_create})"
    _DECLARED[name] = Guarantees(name, exclusive_create, how, CHAIN, atomic_write=atomic_write,
                                 object_store=object_store, in_process=in_process)
    return _DECLARED[name]


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def guarantees_of(fs: object) -> Guarantees:
    """The guarantees of ``fs`` (an fsspec filesystem instance), by its exact class."""
    return guarantees_of_class(type(fs))


def guarantees_of_class(cls: type) -> Guarantees:
    """The guarantees of the instances of fsspec filesystem class ``cls`` (exactly)."""
    name = qualified_name(cls)
    if name in _OBJECT_STORES:
        how = _OBJECT_STORES[name]
        # Parts are named by position and created exclusively: of two writers appending at
        # the same position only one part can exist, so the append is conditional too.
        return Guarantees(name, how, f"one part per position, created exclusively ({how})", CHAIN,
                          atomic_write=True, object_store=True)
    if name in _DECLARED:
        return _DECLARED[name]
    if name == _LOCAL:
        return Guarantees(name, "a complete scratch file linked into place (os.link fails with EEXIST)",
                          None, APPEND)
    if name == _MEMORY:
        how = "one process-wide lock (the namespace lives in this process only)"
        return Guarantees(name, how, how, APPEND, in_process=True, atomic_write=True)
    return Guarantees(name, None, None, CHAIN)
