"""FsspecDriver: segments on any fsspec filesystem, with capabilities derived from it."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from typing import Any, Callable, Iterator, Mapping

from tiered_core.errors import DriverError, InvalidOption, InvalidPath, NotFound, TieredStoreError
from tiered_core.spi import Capabilities, SegmentDriver

from .append_layout import SCRATCH, SEAL_MARK, AppendLayout
from .guarantees import APPEND, OBJECT_STORES, Guarantees, guarantees_of, guarantees_of_class
from .options import (
    FORCED_OPTIONS, REDACTED, check_url, parse_storage_options, redact_tree, scrub, secret_values,
)
from .shared_session import with_shared_session

log = logging.getLogger("tiered_driver_fsspec")

#: Reserved in object paths: the seal markers and parts of the layouts.
RESERVED = "#tiered-"
#: Storage options that say where the objects are (with the URL): the store's location.
LOCATION_STORAGE_OPTIONS = ("endpoint_url", "endpoint", "account_name", "host", "port")

_RETRYABLE_ERRNO = {errno.EINTR, errno.EAGAIN, errno.EIO, errno.EBUSY, errno.ETIMEDOUT, errno.ECONNRESET,
                    errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.ENETUNREACH, errno.EHOSTUNREACH}


class FsspecDriver(SegmentDriver):
    """Segments below ``url`` on any fsspec filesystem (``memory://``, ``file://``,
    ``s3://``, ``gs://``, ``abfs://``, ``sftp://``...), opened with ``storage_options``.

    Contract: the full driver contract, with the capabilities *this instance's* filesystem
    really has (:mod:`.guarantees`), set on the instance at open; the class's own
    ``capabilities`` are the conservative defaults. A store needs atomic create-if-absent
    for prefix ownership and fencing: a filesystem without it is refused at open with
    :class:`~tiered_core.errors.InvalidOption` (option ``url``) saying what is missing,
    unless ``single_writer = true`` asserts that one store only ever writes below the URL
    (``describe`` and ``tiered drivers --config`` then say so).

    Layouts: filesystems that append (local files, memory) keep a segment in one object,
    sealed by a marker object; object stores (immutable objects, exclusive create) keep a
    base plus parts chained by position (:mod:`tiered_core.spi.objectstore`).

    Errors: backend failures are :class:`~tiered_core.errors.DriverError` (``retryable``
    from the failure's kind), never a library exception; a missing object is
    :class:`~tiered_core.errors.NotFound`. Credentials in ``storage_options`` never appear
    in ``repr``, ``describe``, listings or error messages (their values are scrubbed from
    the libraries' messages too). Listing and instance caches are always off.
    """

    name = "fsspec"
    #: Conservative: an instance's capabilities are derived from its filesystem at open.
    capabilities = Capabilities()
    location_options = ("url",)

    def __init__(self, *, url: str, storage_options: dict[str, Any] | None = None, single_writer: bool = False,
                 fsync: bool = True) -> None:
        self.url = check_url(url)
        storage = parse_storage_options(storage_options)
        self._secrets = secret_values(storage)
        self.protocol = self.url.split("://", 1)[0]
        if RESERVED in self.url:
            raise InvalidOption(f"option 'url' of driver 'fsspec' contains the reserved {RESERVED!r}", option="url")
        self.fs, self.root = self._open_filesystem(storage)
        self.guarantees: Guarantees = guarantees_of(self.fs)
        self.single_writer = bool(single_writer)
        missing = self.guarantees.missing()
        if missing and not self.single_writer:
            raise InvalidOption(
                f"driver 'fsspec': {self.url} ({self.guarantees.filesystem}) cannot create an object atomically "
                f"if it is absent (capability {', '.join(missing)}): its pipe_file(mode='create') checks, then "
                "writes, so a second store on this prefix could not be refused and a store taken over could not "
                "be fenced. Use a filesystem that can (s3://, gs://, abfs://, file://, memory://) or the s3, gcs, "
                "azure or posix driver; or, if exactly one store will ever write below this URL, set "
                "single_writer = true in the driver options", option="url", missing=missing,
                filesystem=self.guarantees.filesystem)
        caps = self.guarantees.capabilities()
        if missing:
            log.warning("driver fsspec: %s (%s) has no atomic create-if-absent; single_writer = true: nothing "
                        "refuses a second store writing below it", self.url, self.guarantees.filesystem)
        self.capabilities = caps  # this instance's: derived from its filesystem
        if self.guarantees.layout == APPEND:
            self._layout: Any = AppendLayout(
                self.fs, self.root, self._call, serialize=self.guarantees.in_process,
                link_create=self.guarantees.exclusive_create is not None and not self.guarantees.in_process,
                fsync=fsync)
        else:
            self._layout = self._chain_layout()
        if self.guarantees.filesystem in OBJECT_STORES:
            self._check_bucket()

    # -- opening -----------------------------------------------------------------------

    def _open_filesystem(self, storage: dict[str, Any]) -> tuple[Any, str]:
        import fsspec

        _refuse_misspelt_options(self.url, storage)
        error: TieredStoreError
        options = with_shared_session(_filesystem_class(self.url), {**storage, **FORCED_OPTIONS})
        try:
            fs, root = _plain_filesystem(self.url, options) or fsspec.core.url_to_fs(self.url, **options)
        except ImportError as exc:  # fsspec names the package that implements the protocol
            error = InvalidOption(f"option 'url' of driver 'fsspec': protocol {self.protocol!r} needs a package "
                                  f"that is not installed: {scrub(str(exc), self._secrets)}", option="url")
        except ValueError as exc:  # an unknown protocol, or arguments the filesystem refuses
            text = scrub(str(exc), self._secrets) or type(exc).__name__
            option = "url" if not storage or "protocol" in text.lower() else "storage_options"
            error = InvalidOption(f"option {option!r} of driver 'fsspec': the {self.protocol!r} filesystem refused "
                                  f"{self.url}" + (" with these storage_options" if option != "url" else "")
                                  + f": {text}", option=option)
        except TypeError as exc:  # an argument the filesystem does not take
            error = InvalidOption(f"option 'storage_options' of driver 'fsspec' is not accepted by the "
                                  f"{self.protocol!r} filesystem: {scrub(str(exc), self._secrets)}",
                                  option="storage_options")
        except Exception as exc:
            error = DriverError(f"fsspec: cannot open {self.url}: {type(exc).__name__}: "
                                f"{scrub(str(exc), self._secrets)}", retryable=False, url=self.url)
        else:
            return fs, str(root).rstrip("/")
        raise error  # outside the handler: the library's exception is not attached

    def _check_bucket(self) -> None:
        """DriverError naming the bucket (container) of the URL when it does not exist: the
        object stores list a missing bucket as empty, so a store would be created against it
        and fail at its first write, having made its directory (NOT_FOUND of an owner record,
        or a retried error on abfs://)."""
        bucket = self.root.split("/", 1)[0]
        if not bucket:
            return
        try:
            # info, not exists: exists answers False for every failure (wrong credentials, an
            # endpoint nobody listens on), which would all read as a missing bucket
            self._call("look up the bucket of", bucket, self.fs.info, bucket)
        except NotFound:
            raise DriverError(f"fsspec: the bucket (container) {bucket!r} of {self.url} does not exist: create it, "
                              "or fix 'url'", retryable=False, url=self.url, bucket=bucket) from None

    def _chain_layout(self) -> Any:
        from .chain_layout import FsspecChain  # the shared object-store layout, in the driver layer

        return FsspecChain(fs=self.fs, root=self.root, call=self._call, capabilities=self.capabilities,
                           url=self.url, object_store=self.guarantees.object_store)

    # -- options -----------------------------------------------------------------------

    @classmethod
    def coerce_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """As the base, with ``storage_options`` also accepted as JSON text (the command
        line, an environment variable or broker.conf cannot write a table)."""
        rest = dict(options)
        storage = rest.pop("storage_options", None)
        out = super().coerce_options(rest)
        if "storage_options" in options:
            out["storage_options"] = parse_storage_options(storage)
        return out

    @classmethod
    def redact_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """Options with every credential in ``storage_options`` (at any depth) shown as ``***``;
        JSON text that cannot be read is hidden whole."""
        out = dict(options)
        if "storage_options" in out and out["storage_options"] is not None:
            value = out["storage_options"]
            if isinstance(value, str):
                try:
                    value = json.loads(value) if value.strip() else {}
                except ValueError:
                    value = REDACTED
            out["storage_options"] = redact_tree(value) if isinstance(value, Mapping) else REDACTED
        return out

    @classmethod
    def outlives_process(cls, options: Mapping[str, Any]) -> bool:
        """False for a ``url`` whose filesystem lives in this process (``memory://``)."""
        try:
            url = check_url(str(options.get("url", "")))
        except InvalidOption:
            return True  # opening it names the problem
        fs_class = _filesystem_class(url)
        return fs_class is None or not guarantees_of_class(fs_class).in_process

    @classmethod
    def location(cls, options: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
        """The URL (local paths made absolute, no trailing ``/``) and the storage options that
        say where it is (an ``endpoint_url``, an ``account_name``...), never a secret."""
        url = check_url(str(options.get("url", "")))
        head, _, rest = url.partition("://")
        if head in ("file", "local"):
            url = f"{head}://{os.path.abspath(os.path.expanduser(rest))}"
        where = {"url": url}
        try:
            storage = parse_storage_options(options.get("storage_options"))
        except InvalidOption:
            storage = {}
        for key in LOCATION_STORAGE_OPTIONS:
            if storage.get(key) not in (None, ""):
                where[f"storage_options.{key}"] = str(storage[key])
        return cls.name, where

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["filesystem"] = self.guarantees.as_dict()
        out["single_writer"] = self.single_writer
        out["missing"] = self.guarantees.missing()
        return out

    # -- errors ------------------------------------------------------------------------

    def _call(self, what: str, path: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; a missing object becomes NotFound, FileExistsError passes
        (callers decide), anything else a DriverError without secrets."""
        try:
            return fn(*args, **kwargs)
        except (FileExistsError, TieredStoreError):
            raise
        except FileNotFoundError:
            error: TieredStoreError = NotFound(path)
        except TypeError as exc:  # the client, made at the first request, refuses a storage option
            unknown = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
            error = self._error(exc, what, path) if unknown is None else InvalidOption(
                f"option 'storage_options' of driver 'fsspec': {unknown.group(1)!r} is not an option the "
                f"{self.protocol!r} filesystem or its client takes", option="storage_options", key=unknown.group(1))
        except Exception as exc:
            error = self._error(exc, what, path)
        # Raised here, outside the handler: the library's exception (whose text may hold a
        # credential) is neither the cause nor the context of the typed error.
        raise error

    def _error(self, exc: BaseException, what: str, path: str) -> DriverError:
        # the first line only: Azure's errors go on with request ids and the response's XML
        detail = scrub(str(exc), self._secrets).strip().split("\n", 1)[0]
        where = f"{path!r} below {self.url}"
        text = f"fsspec: cannot {what} {where}: {type(exc).__name__}" + (f": {detail}" if detail else "")
        if isinstance(exc, PermissionError) or _status(exc) in (401, 403):
            return DriverError(text + " (access denied: check the credentials in storage_options and the "
                               "permissions)", retryable=False, path=path, url=self.url)
        return DriverError(text, retryable=_retryable(exc), path=path, url=self.url)

    # -- paths -------------------------------------------------------------------------

    def _check(self, path: str) -> str:
        if RESERVED in path:
            raise InvalidPath(f"path {path!r} contains the reserved {RESERVED!r}", path=path)
        if path.split("/", 1)[0] == SCRATCH:
            raise InvalidPath(f"path {path!r} is inside the driver's reserved {SCRATCH!r} directory", path=path)
        return path

    # -- the operations ----------------------------------------------------------------

    def size(self, path: str) -> int:
        return self._layout.size(self._check(path))

    def exists(self, path: str) -> bool:
        return self._layout.exists(self._check(path))

    def is_sealed(self, path: str) -> bool:
        return self._layout.is_sealed(self._check(path))

    def create(self, path: str) -> None:
        self._layout.create(self._check(path))

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        self._layout.write(self._check(path), position, data)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        return self._layout.write_if_absent(self._check(path), data)

    def read(self, path: str, position: int, length: int) -> bytes:
        return self._layout.read(self._check(path), position, length)

    def seal(self, path: str) -> None:
        self._layout.seal(self._check(path))

    def delete(self, path: str) -> None:
        self._layout.delete(self._check(path))

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        return self._layout.list(prefix)

    def foreign_objects(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        foreign = getattr(self._layout, "foreign_objects", None)  # the chain layout's; the append one hides none
        return foreign(prefix) if foreign is not None else iter(())

    def leftover_objects(self, prefix: str = "") -> Iterator[tuple[str, str, int]]:
        leftovers = getattr(self._layout, "leftover_objects", None)  # the chain layout's
        return leftovers(prefix) if leftovers is not None else iter(())

    def close(self) -> None:
        close = getattr(self._layout, "close", None)
        if close is not None:
            close()


def _status(exc: BaseException) -> int | None:
    """The HTTP status a library's exception carries (gcsfs ``code``, aiohttp ``status``,
    azure-core ``status_code``), or None. Only a value in the HTTP range counts: a library's
    ``code`` of 0 or an errno-like number says nothing of the response."""
    for field in ("status", "code", "status_code"):
        value = getattr(exc, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    return None


def _retryable(exc: BaseException) -> bool:
    """Whether the same call may succeed later (a timeout, a dropped connection, a 5xx)."""
    if isinstance(exc, (TimeoutError, ConnectionError)):  # (asyncio.TimeoutError is TimeoutError since 3.11)
        return True
    status = _status(exc)
    if isinstance(status, int) and 400 <= status < 600:
        return status >= 500 or status in (408, 429)
    if isinstance(exc, OSError):
        return exc.errno is None or exc.errno in _RETRYABLE_ERRNO
    return not isinstance(exc, (ValueError, TypeError, NotImplementedError, AttributeError, KeyError))


#: Filesystem classes fsspec may pick for a protocol whose exclusive create is not certain,
#: and the class of the same package that has it: gcsfs picks its zonal-bucket class for
#: ``gs://`` (unless ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``), whose create mode is not
#: exclusive on zonal buckets; its parent class uploads with ``ifGenerationMatch=0``.
_PLAIN_CLASSES = {"gcsfs.extended_gcsfs.ExtendedGcsFileSystem": ("gcsfs.core", "GCSFileSystem")}


def _filesystem_class(url: str) -> type | None:
    """The filesystem class fsspec picks for ``url``'s protocol (None: not installed, unknown)."""
    import fsspec

    try:
        return fsspec.get_filesystem_class(url.split("://", 1)[0] if "://" in url else "file")
    except (ImportError, ValueError):
        return None


def _plain_filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str] | None:
    """The filesystem and root of ``url`` as the plain class of :data:`_PLAIN_CLASSES` when
    fsspec would pick one listed there (None: fsspec's own choice is used)."""
    import importlib

    chosen = _filesystem_class(url)
    if chosen is None:
        return None  # url_to_fs names the problem
    plain = _PLAIN_CLASSES.get(f"{chosen.__module__}.{chosen.__qualname__}")
    if plain is None:
        return None
    cls = getattr(importlib.import_module(plain[0]), plain[1])
    fs = cls(**options)
    return fs, fs._strip_protocol(url)


#: Options fsspec's base classes take (the filesystem classes pass them on by ``**kwargs``).
_FSSPEC_BASE_OPTIONS = frozenset({"use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache",
                                  "asynchronous", "loop", "batch_size"})


def _refuse_misspelt_options(url: str, storage: Mapping[str, Any]) -> None:
    """InvalidOption naming a ``storage_options`` key that the filesystem does not take but
    that is one letter or two from one it does (``endpont_url``): filesystems pass unknown
    keys on, or drop them, so a typo would otherwise go unnoticed -- gcsfs then talks to the
    public endpoint. Keys that resemble none pass (a filesystem's client may take them)."""
    import difflib
    import inspect

    cls = _filesystem_class(url)
    if cls is None:
        return  # the open names the missing package or the unknown protocol
    known = set(_FSSPEC_BASE_OPTIONS)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        try:
            params = inspect.signature(init).parameters if init is not None else {}
        except (TypeError, ValueError):
            continue
        known.update(n for n, p in params.items() if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    name = f"{cls.__module__}.{cls.__qualname__}"
    shown = ".".join(_PLAIN_CLASSES.get(name, (name,)))
    for key in sorted(set(storage) - known):
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.85)
        if close:
            raise InvalidOption(f"option 'storage_options' of driver 'fsspec': {key!r} is not an option of "
                                f"{shown} (did you mean {close[0]!r}?)",
                                option="storage_options", key=key)
