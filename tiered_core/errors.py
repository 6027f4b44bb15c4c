"""Typed errors of tiered-store.

Every error raised by the core, a driver or a metadata store is a
:class:`TieredStoreError` carrying an :class:`ErrorCode` and the offending input
(``path``, ``position``, ``option``...), so callers can branch on the code and
operators can read what went wrong. Drivers translate their backend's raw
exceptions into these types; a raw ``OSError`` or HTTP error never crosses the SPI.

Messages never contain credentials: drivers pass secrets through
:func:`tiered_core.spi.driver.redact` before putting options into a message.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(str, enum.Enum):
    """Stable machine-readable codes. Values are part of the public API."""

    ILLEGAL_PARAM = "ILLEGAL_PARAM"  # a bad argument: negative position, zero length...
    ILLEGAL_OFFSET = "ILLEGAL_OFFSET"  # an offset outside what is stored
    INVALID_PATH = "INVALID_PATH"  # a path that is malformed or escapes the root
    POSITION_MISMATCH = "POSITION_MISMATCH"  # write position != durable size
    SEGMENT_SEALED = "SEGMENT_SEALED"  # write to a sealed segment
    SEGMENT_CLOSED = "SEGMENT_CLOSED"  # use of a closed segment or driver
    NOT_FOUND = "NOT_FOUND"  # read of a missing object
    DRIVER_ERROR = "DRIVER_ERROR"  # backend failure (see DriverError.retryable)
    CORRUPT_DATA = "CORRUPT_DATA"  # bytes that fail validation (magic, CRC, length)
    STATE_CONFLICT = "STATE_CONFLICT"  # backend state contradicts what we committed
    UNKNOWN_DRIVER = "UNKNOWN_DRIVER"  # no installed driver has that name
    INVALID_OPTION = "INVALID_OPTION"  # unknown or ill-typed driver/config option
    PLUGIN_LOAD = "PLUGIN_LOAD"  # an installed plugin failed to import or register
    CONFIG = "CONFIG"  # a bad configuration value
    METADATA = "METADATA"  # metadata store failure or inconsistency
    UNKNOWN_OBJECTS = "UNKNOWN_OBJECTS"  # the backend holds objects this store's metadata does not list
    PREFIX_OWNED = "PREFIX_OWNED"  # another store owns this tier prefix
    FENCED = "FENCED"  # this store lost its tier prefix to a take-over; it must stop writing
    MAPPING = "MAPPING"  # a static topic's queue mapping is invalid, inconsistent or undecided
    OFFSET_CONFLICT = "OFFSET_CONFLICT"  # a write would hand out a queue offset the tier already holds
    IDENTITY_MISMATCH = "IDENTITY_MISMATCH"  # a store opened with another cluster, broker, driver or tier location
    LOCAL_IO = "LOCAL_IO"  # the local disk failed (full, file too large, read-only)
    UNKNOWN = "UNKNOWN"


class TieredStoreError(Exception):
    """Base of every tiered-store error.

    ``code`` is an :class:`ErrorCode`; ``context`` holds the offending inputs
    (also reachable as attributes, e.g. ``err.path``).
    """

    code: ErrorCode = ErrorCode.UNKNOWN

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return f"[{self.code.value}] {self.message}"


class IllegalParam(TieredStoreError, ValueError):
    """An argument is out of its domain (negative position, length <= 0...)."""

    code = ErrorCode.ILLEGAL_PARAM


class IllegalOffset(TieredStoreError, ValueError):
    """An offset names data that is not (or no longer) stored."""

    code = ErrorCode.ILLEGAL_OFFSET


class InvalidPath(IllegalParam):
    """A path is malformed, absolute, or would leave the driver's root."""

    code = ErrorCode.INVALID_PATH


class PositionMismatch(TieredStoreError):
    """A write was addressed to ``position`` but the object holds ``actual_size`` bytes.

    Nothing of the rejected write was stored.
    """

    code = ErrorCode.POSITION_MISMATCH

    def __init__(self, path: str, position: int, actual_size: int) -> None:
        super().__init__(
            f"write to {path!r} at position {position} but its size is {actual_size}",
            path=path,
            position=position,
            actual_size=actual_size,
        )


class SegmentSealed(TieredStoreError):
    """A write reached a sealed object. Nothing was stored."""

    code = ErrorCode.SEGMENT_SEALED

    def __init__(self, path: str) -> None:
        super().__init__(f"{path!r} is sealed; it accepts no more writes", path=path)


class SegmentClosed(TieredStoreError):
    """The segment, file or driver was closed."""

    code = ErrorCode.SEGMENT_CLOSED


class NotFound(TieredStoreError, LookupError):
    """The object does not exist."""

    code = ErrorCode.NOT_FOUND

    def __init__(self, path: str, detail: str = "does not exist") -> None:
        super().__init__(f"{path!r} {detail}", path=path)


class DriverError(TieredStoreError):
    """The backend failed. ``retryable`` tells whether the same call may succeed later.

    After a failed write the durable size (``driver.size``) tells exactly how much of
    it landed.
    """

    code = ErrorCode.DRIVER_ERROR

    def __init__(self, message: str, *, retryable: bool, **context: Any) -> None:
        super().__init__(message, retryable=retryable, **context)


class CorruptData(TieredStoreError):
    """Stored bytes fail validation; ``offset`` names where."""

    code = ErrorCode.CORRUPT_DATA


class StateConflict(TieredStoreError):
    """The backend's state contradicts what this process committed (e.g. it shrank)."""

    code = ErrorCode.STATE_CONFLICT


class UnknownDriver(TieredStoreError, LookupError):
    """No installed driver is called ``name``; ``installed`` lists those that are."""

    code = ErrorCode.UNKNOWN_DRIVER


class InvalidOption(TieredStoreError, ValueError):
    """A driver or store option is unknown or has a bad value; ``option`` names it."""

    code = ErrorCode.INVALID_OPTION


class PluginLoadError(TieredStoreError):
    """An installed plugin failed to load; ``distribution`` names its package."""

    code = ErrorCode.PLUGIN_LOAD


class ConfigError(TieredStoreError, ValueError):
    """A configuration value is bad; ``key`` names it."""

    code = ErrorCode.CONFIG


class MetadataError(TieredStoreError):
    """The metadata store failed or found itself inconsistent."""

    code = ErrorCode.METADATA


class UnknownObjects(MetadataError):
    """The backend holds objects under this store's prefix that its metadata does not list.

    Raised at open instead of serving (or deleting) what the metadata forgot: ``count``
    objects under ``prefix`` (``examples`` names a few), and ``fix`` is the command that
    rebuilds the metadata from the backend. Nothing was changed.
    """

    code = ErrorCode.UNKNOWN_OBJECTS


class PrefixOwned(TieredStoreError):
    """Another store owns the tier prefix this store was configured to use.

    ``prefix`` is the claimed prefix, ``owner`` describes the store holding it (its id,
    host, store path, epoch), ``store_id`` is ours. Nothing was written. A deliberate
    failover takes the prefix over (``tiered takeover`` / ``take_over=True``).
    """

    code = ErrorCode.PREFIX_OWNED


class Fenced(TieredStoreError):
    """Another store took this store's tier prefix over (its ``epoch`` is newer than ours).

    Raised by every write, seal or delete once the take-over is seen, before the call
    reaches the backend; the fenced store must stop writing to the tier.
    """

    code = ErrorCode.FENCED


class MappingError(TieredStoreError, ValueError):
    """A static topic's queue mapping (seed 002) is invalid, inconsistent across brokers, or
    asked for what it cannot answer yet (an undecided ``logicOffset`` of -1).

    The context names the ``topic``, the logic ``queue`` (when one is concerned) and the
    ``field`` that is wrong, plus the broker whose mapping it is.
    """

    code = ErrorCode.MAPPING


class OffsetConflict(StateConflict):
    """A write would hand out a queue offset the tier already holds (an offset names one
    message forever).

    ``topic`` and ``queue_id`` name the queue, ``offset`` the offset the write would have
    used and ``tiered_end`` the first offset past what the tier holds. Nothing was written.
    """

    code = ErrorCode.OFFSET_CONFLICT


class IdentityMismatch(TieredStoreError):
    """A store was opened with another identity than the one it was created with.

    ``field`` names what changed (``cluster``, ``broker``, ``driver`` or ``tier``; or
    ``store_id`` for a metadata database of another store), ``recorded`` and
    ``configured`` the old and the new value, ``fix`` what to do.
    Nothing was written anywhere.
    """

    code = ErrorCode.IDENTITY_MISMATCH


class LocalIOError(TieredStoreError):
    """The local disk failed: full, a file too large, read-only, a missing device.

    ``path`` names the file, ``errno`` the OS error, and ``stored`` tells whether the
    message of a put was stored all the same (True: do not retry it; False: nothing of it
    was stored; None when the operation was not a put).
    """

    code = ErrorCode.LOCAL_IO


__all__ = [
    "ErrorCode",
    "TieredStoreError",
    "IllegalParam",
    "IllegalOffset",
    "InvalidPath",
    "PositionMismatch",
    "SegmentSealed",
    "SegmentClosed",
    "NotFound",
    "DriverError",
    "CorruptData",
    "StateConflict",
    "UnknownDriver",
    "InvalidOption",
    "PluginLoadError",
    "ConfigError",
    "MetadataError",
    "UnknownObjects",
    "PrefixOwned",
    "Fenced",
    "MappingError",
    "OffsetConflict",
    "IdentityMismatch",
    "LocalIOError",
]
