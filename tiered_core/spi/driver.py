"""The driver SPI: what a storage backend implements.

A driver is one object per backend (it owns clients and pools) that stores bytes at
paths. It knows nothing about messages. The core's :class:`tiered_core.segment.FileSegment`
wraps ``(driver, path)`` and owns buffering, positions and retries, so a driver stays
small: a handful of methods, all synchronous, all raising only :mod:`tiered_core.errors` types.

Paths are relative, ``/``-separated, and never leave the driver's root. A driver need
not check them, nor positions, lengths or data types, nor retry transient failures:
:func:`tiered_core.plugins.open_driver` wraps every driver in the standard layers
(:mod:`tiered_core.spi.layer`: validation, then retry), which do.
"""

from __future__ import annotations

import abc
import inspect
import posixpath
import re
import typing
from typing import Any, ClassVar, Iterator, Mapping

from tiered_core.errors import IllegalParam, InvalidOption, InvalidPath, PositionMismatch
from tiered_core.spi.capabilities import Capabilities

REDACTED = "***"


def redact(options: Mapping[str, Any], secret: typing.Collection[str]) -> dict[str, Any]:
    """A copy of ``options`` with the values of ``secret`` keys replaced by ``***``."""
    return {k: (REDACTED if k in secret and v is not None else v) for k, v in options.items()}


#: A nested library option (a driver's ``storage_options`` table) whose name contains one of
#: these words (case-insensitive) holds a credential. Deliberately broad: hiding a harmless
#: value costs less than showing a key.
SECRET_WORDS = ("key", "secret", "token", "password", "passwd", "credential", "connection_string",
                "sas", "signature", "auth", "cookie", "private")

#: A URL's user info with a password (``scheme://USER:PASSWORD@host``, a proxy's): both go
#: (the user may be an access key id, which a ``key`` option would hide too).
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)([^/\s:@]*):([^/\s@]+)(@)")


def is_secret_name(name: str) -> bool:
    """Whether a nested option named ``name`` holds a credential (see :data:`SECRET_WORDS`)."""
    low = str(name).lower()
    return any(word in low for word in SECRET_WORDS)


def redact_tree(value: Any) -> Any:
    """``value`` with every secret-named entry of every nested mapping replaced by ``***``,
    and the user info of every URL with a password in it too (``http://***:***@host``)."""
    if isinstance(value, Mapping):
        return {k: (REDACTED if is_secret_name(k) and v is not None else redact_tree(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    if isinstance(value, str):
        return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}:{REDACTED}{m.group(4)}", value)
    return value


def key_prefix(prefix: str | None, *, driver: str, option: str = "prefix") -> str:
    """An object-store driver's ``prefix`` option as the root of its keys: surrounding slashes
    dropped. Raises :class:`InvalidOption` for an empty, ``.`` or ``..`` segment (``a//b``,
    ``/../x``): object keys are literal, so ``..`` would not go up a level but name a key
    segment that tools copying the bucket to disk resolve differently."""
    root = (prefix or "").strip("/")
    bad = [part for part in root.split("/") if part in ("", ".", "..")] if root else []
    if bad:
        raise InvalidOption(f"option {option!r} of driver {driver!r} ({prefix!r}) has an empty, '.' or '..' "
                            "segment: object keys are literal (no directory to go up to); write the prefix as "
                            "names separated by single '/'", option=option, value=prefix)
    return root


#: Secret values shorter than this are not replaced in texts: ``***`` in place of every "s"
#: garbles each word holding one (bucket 'nobuc***et'), and the gaps show the value anyway.
#: Real credentials are longer; a short value is still hidden wherever it is an option's value.
MIN_SCRUBBED_LEN = 4


def scrubbed_texts(values: "typing.Iterable[Any]") -> list[str]:
    """The secret ``values`` to replace in message texts: those of
    :data:`MIN_SCRUBBED_LEN` characters or more, longest first, each once."""
    return sorted({str(v) for v in values if v is not None and len(str(v)) >= MIN_SCRUBBED_LEN},
                  key=len, reverse=True)


def secret_values(value: Any) -> list[str]:
    """The text of every secret in ``value`` (nested): secret-named values and the user and
    password of URLs, longest first, to scrub from messages."""
    found: list[str] = []

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, secret or is_secret_name(k))
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v, secret)
        elif node is not None and not isinstance(node, bool):
            text = str(node)
            if secret and len(text) >= 3:
                found.append(text)
            elif isinstance(node, str):
                found.extend(g for m in _URL_PASSWORD.finditer(text) for g in m.group(2, 3) if len(g) >= 3)

    walk(value, False)
    return sorted(set(found), key=len, reverse=True)


class SegmentDriver(abc.ABC):
    """One storage backend, acting on byte objects at relative paths.

    Contract (proved by ``tiered_conformance``):

    * ``size(path)`` is the number of durably stored bytes, 0 when the object is absent.
    * ``write(path, position, data)`` appends ``data`` at exactly ``position``, which must
      equal ``size(path)``; otherwise it raises :class:`~tiered_core.errors.PositionMismatch`
      carrying the real size and stores nothing. Writing a sealed object raises
      :class:`~tiered_core.errors.SegmentSealed`. After any other error, ``size`` tells
      exactly how much of ``data`` landed (all of it, none of it, or a prefix).
    * ``read(path, position, length)`` returns exactly the stored bytes
      ``[position, position + length)``; reading past the durable end raises
      :class:`~tiered_core.errors.IllegalParam`, a missing object
      :class:`~tiered_core.errors.NotFound`.
    * ``create``, ``seal`` and ``delete`` are idempotent. After ``seal`` reads and size
      stay as they were and writes fail.
    * Calls for different paths may come from several threads at once.
    * Failures are :class:`~tiered_core.errors.DriverError` (with ``retryable``), never a
      backend's raw exception; messages never include secrets.

    Options are the keyword-only parameters of the subclass's ``__init__``; an unknown
    option raises :class:`~tiered_core.errors.InvalidOption` naming it, and string values
    (from config files or the command line) are converted to the annotated type.
    """

    #: Registry name, e.g. ``"posix"``; what config's ``[tiered] driver`` selects.
    name: ClassVar[str]
    #: What this backend can do; the conformance suite is gated by it.
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: Option names whose values are credentials: redacted in logs, errors and listings.
    secret_options: ClassVar[frozenset[str]] = frozenset()
    #: How this driver lays segments out in its backend, recorded in the tier prefix's owner
    #: record: a store refuses a prefix laid out otherwise (``IdentityMismatch``). Default:
    #: its :attr:`name`; a layer over a driver (``DriverLayer``) keeps the inner driver's.
    @property
    def layout(self) -> str:
        return self.name

    #: Other names this driver answers to (e.g. RocketMQ provider class names).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: How the retry layer retries this driver's retryable failures
    #: (a :class:`tiered_core.spi.layer.RetryPolicy`; None: the layer's default). A driver
    #: may set it per instance, e.g. from a ``retries`` option.
    retry_policy: ClassVar[Any] = None
    #: The options that say where this driver's objects are (a root, a bucket and prefix...),
    #: never a secret: a store records their values as its tier location (see :meth:`location`).
    location_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def location(cls, options: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
        """``(backend, where)`` of a driver opened with ``options``: the backend's name and
        where in it the objects live, normalised and without secrets. A store records both
        when it is created and refuses to open with another (``IdentityMismatch``).

        Default: :attr:`name` and the :attr:`location_options` values as strings (an option
        left out has its ``__init__`` default; one whose name ends in ``prefix`` loses its
        surrounding slashes). A driver layered over another one it opens from its options
        returns the inner driver's location.
        """
        params = _option_params(cls)
        where = {}
        for key in cls.location_options:
            default = params[key].default if key in params else None
            value = options.get(key, None if default is inspect.Parameter.empty else default)
            text = "" if value is None else str(value)
            where[key] = text.strip("/") if key.endswith("prefix") else text
        return cls.name, where

    @classmethod
    def outlives_process(cls, options: Mapping[str, Any]) -> bool:
        """Whether a driver opened with ``options`` keeps its objects after this process
        exits, decided without opening it (no I/O). Default:
        ``capabilities.survives_process_exit`` where the class declares them (True where only
        instances do, as a layer's). A driver whose instances differ by option (a URL naming
        an in-memory filesystem) overrides this."""
        declared = cls.capabilities
        return declared.survives_process_exit if isinstance(declared, Capabilities) else True

    #: The options this instance was created with (secrets included; see ``describe``).
    options: dict[str, Any]

    def __new__(cls, *args: Any, **options: Any) -> "SegmentDriver":
        self = super().__new__(cls)
        # Kept so that a fresh instance on the same location can be made (reopen()).
        self.options = dict(options)
        return self

    # -- the ten operations -------------------------------------------------------

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Durably stored bytes at ``path``; 0 when absent."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether an object (possibly empty) exists at ``path``."""

    @abc.abstractmethod
    def create(self, path: str) -> None:
        """Create an empty object at ``path``; a no-op when it exists."""

    @abc.abstractmethod
    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        """Append ``data`` at ``position`` (== current size). Creates the object if absent."""

    @abc.abstractmethod
    def read(self, path: str, position: int, length: int) -> bytes:
        """Exactly ``length`` durable bytes from ``position``."""

    @abc.abstractmethod
    def seal(self, path: str) -> None:
        """Finalize ``path``: later writes fail, reads and size stay. Idempotent."""

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Remove ``path``; absent is fine."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """``(path, size)`` of every object whose path starts with ``prefix``, sorted by path."""

    def is_sealed(self, path: str) -> bool:
        """Whether ``path`` is sealed. Drivers that can tell should override."""
        return False

    def foreign_objects(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """``(object name, size)`` of every object below ``prefix`` that :meth:`list` hides
        and that holds no byte of any segment it lists: e.g. objects named like parts of a
        segment that are not its parts (another writer's, a part past a gap, a part whose
        base is gone). Names are relative to the driver's root, sorted. The store never
        reads, counts or deletes them; ``tiered verify`` reports them. Default: none (a
        driver whose :meth:`list` shows every object). A driver whose layout hides objects
        overrides this."""
        return iter(())

    def leftover_objects(self, prefix: str = "") -> Iterator[tuple[str, str, int]]:
        """``(segment path, object name, size)`` of every object below ``prefix`` that
        :meth:`list` hides and that this driver's own clean-up removes: pieces of a segment
        whose bytes an interrupted compaction already copied into it (none of the segment's
        bytes is in them alone). :meth:`seal` of a sealed segment removes its leftovers; an
        unsealed one's next compaction does. Paths and names are relative to the driver's
        root, sorted; ``tiered verify`` reports them and ``tiered repair`` removes them.
        Default: none (a layout whose clean-up leaves nothing behind)."""
        return iter(())

    def write_if_absent(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` (non-empty) unless an object is already there.

        True when this call created it; False when something existed (it is left as it
        was). Atomic only where ``capabilities.create_if_absent`` says so; this default
        checks, then writes at position 0 (a racing writer that got there first makes
        that write fail with ``PositionMismatch``, reported as False, when the backend has
        ``conditional_append``). Drivers with an atomic create-if-absent override it.
        """
        if not data:
            raise IllegalParam(f"write_if_absent of {path!r} needs data", path=path)
        if self.exists(path):
            return False
        try:
            self.write(path, 0, data)
        except PositionMismatch:
            return False
        return True

    def close(self) -> None:
        """Release clients and pools. Further calls may fail."""

    # -- helpers shared by every driver ------------------------------------------

    def __enter__(self) -> "SegmentDriver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reopen(self) -> "SegmentDriver":
        """A fresh instance with the same options (sees the same bytes if persistent)."""
        return type(self)(**self.options)

    def describe(self) -> dict[str, Any]:
        """Name, redacted options and capabilities, for listings and logs."""
        return {
            "name": self.name,
            "options": self.redact_options(self.options),
            "capabilities": self.capabilities.as_dict(),
        }

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.redact_options(self.options).items())
        return f"{type(self).__name__}({opts})"

    @classmethod
    def redact_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` as they may be shown (``repr``, ``describe``, config listings, the
        conformance report): the values of :attr:`secret_options` replaced by ``***``.
        A driver whose options nest credentials (a table of library options) overrides it."""
        return redact(options, cls.secret_options)

    @staticmethod
    def check_path(path: str) -> str:
        """Validate a relative object path and return it normalized.

        Rejects empty, absolute, ``..``-escaping and NUL-containing paths with
        :class:`~tiered_core.errors.InvalidPath` naming the path.
        """
        if not isinstance(path, str) or not path:
            raise InvalidPath(f"path must be a non-empty string, got {path!r}", path=path)
        if "\x00" in path or "\\" in path:
            raise InvalidPath(f"path {path!r} contains a NUL or backslash", path=path)
        if path.startswith("/"):
            raise InvalidPath(f"path {path!r} is absolute; paths are relative to the root", path=path)
        parts = path.split("/")
        if any(p in ("..", ".") for p in parts):
            raise InvalidPath(f"path {path!r} contains '.' or '..' and could leave the root", path=path)
        norm = posixpath.normpath(path)
        if norm in (".", "") or path.endswith("/"):
            raise InvalidPath(f"path {path!r} names a directory, not an object", path=path)
        return norm

    @staticmethod
    def check_prefix(prefix: str) -> str:
        """Validate a list prefix: like a path, but may be empty or end with ``/``."""
        if prefix == "":
            return ""
        if not isinstance(prefix, str) or "\x00" in prefix or "\\" in prefix or prefix.startswith("/"):
            raise InvalidPath(f"prefix {prefix!r} must be relative, without NUL or backslash", path=prefix)
        if any(p in ("..", ".") for p in prefix.split("/")):
            raise InvalidPath(f"prefix {prefix!r} contains '.' or '..'", path=prefix)
        return prefix

    @staticmethod
    def check_range(path: str, position: int, length: int | None = None) -> None:
        """Reject a negative position or a non-positive length, naming them."""
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise IllegalParam(f"position must be an int >= 0, got {position!r} for {path!r}",
                               path=path, position=position)
        if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length <= 0):
            raise IllegalParam(f"length must be an int > 0, got {length!r} for {path!r}",
                               path=path, length=length)

    # -- options ------------------------------------------------------------------

    @classmethod
    def option_names(cls) -> list[str]:
        """The options ``__init__`` accepts."""
        return list(_option_params(cls))

    @classmethod
    def coerce_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """Check option names against ``__init__`` and convert string values by annotation.

        Raises :class:`~tiered_core.errors.InvalidOption` naming the bad option.
        """
        params = _option_params(cls)
        hints = _init_hints(cls)
        out: dict[str, Any] = {}
        for key, value in options.items():
            if key not in params:
                accepted = ", ".join(sorted(params)) or "(none)"
                raise InvalidOption(
                    f"driver {cls.name!r} has no option {key!r}; accepted options: {accepted}",
                    option=key, driver=cls.name,
                )
            out[key] = _coerce(cls, key, value, hints.get(key), secret=key in cls.secret_options)
        missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in out]
        if missing:
            raise InvalidOption(
                f"driver {cls.name!r} needs option(s) {', '.join(missing)}",
                option=missing[0], driver=cls.name,
            )
        return out

    @classmethod
    def conformance_environment(cls, workdir: str) -> typing.ContextManager[dict[str, Any]]:
        """Options for a throw-away test location under ``workdir`` (the fallback).

        Used by ``tiered_conformance`` (``--tiered-driver NAME``) and the benchmarks when no
        plugin answers the ``tiered_conformance_environment`` hook for this driver: enough
        for a driver that needs only a path or a name. A driver that needs a server (an
        emulator) starts it from that hook instead, so its launcher stays test tooling.
        """
        import contextlib

        return contextlib.nullcontext({})


def _option_params(cls: type) -> dict[str, inspect.Parameter]:
    sig = inspect.signature(cls.__init__)
    return {
        n: p for n, p in sig.parameters.items()
        if n != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def _init_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls.__init__)
    except Exception:
        return {}


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(cls: type, key: str, value: Any, hint: Any, *, secret: bool) -> Any:
    if not isinstance(value, str) or hint is None:
        return value
    shown = REDACTED if secret else repr(value)
    candidates = typing.get_args(hint) or (hint,)
    if str in candidates or Any in candidates:
        return value
    if value.lower() in ("none", "null", "") and type(None) in candidates:
        return None
    for typ in candidates:
        if typ is bool:
            if value.lower() in _TRUE:
                return True
            if value.lower() in _FALSE:
                return False
        elif typ in (int, float):
            try:
                return typ(value)
            except ValueError:
                pass
    names = ", ".join(getattr(t, "__name__", str(t)) for t in candidates)
    raise InvalidOption(
        f"option {key!r} of driver {getattr(cls, 'name', cls.__name__)!r} must be {names}, got {shown}",
        option=key,
    )
