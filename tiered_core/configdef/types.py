"""The value types of config keys: one parse function per type, and the accepted values it names.

A type's ``parse(value, key)`` returns the normalized value or raises ``ValueError`` /
``TypeError`` / ``OverflowError``; :meth:`~tiered_core.configdef.key_spec.Key.check` turns that
into a :class:`~tiered_core.errors.ConfigError` naming the key, where the value came from
and ``type.accepted(key)``. Bounds (``key.minimum``, ``key.maximum``) come from the key.

Imports nothing of tiered_core but ``errors`` and ``common``: every layer may use it.
"""

from __future__ import annotations

import os
import re
import reprlib
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Protocol

from tiered_core.errors import ConfigError


class Bounds(Protocol):
    """What a value type reads of the key it checks: its bounds and why they are there.

    A :class:`~tiered_core.configdef.key_spec.Key` is one; declaring only this here keeps the
    types below the keys (``key`` imports ``types``, never the reverse).
    """

    @property
    def minimum(self) -> int | None: ...
    @property
    def maximum(self) -> int | None: ...
    @property
    def why(self) -> str: ...
    @property
    def why_max(self) -> str: ...


STORAGE_LEVELS = ("DISABLE", "NOT_IN_DISK", "NOT_IN_MEM", "FORCE")
LOCAL_FLUSH_MODES = ("async", "sync")
#: What an open does when the metadata does not list what the backend holds (or cannot be
#: read): "refuse" stops with an error naming the fix; "rebuild" rebuilds it from the listing.
METADATA_RECOVERY_MODES = ("refuse", "rebuild")

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_SIZE_RE = re.compile(r"\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*(?:([kmgtp]?)(?:i?b)?)?\s*", re.I)
_DURATION_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                "d": 86_400_000}
_DURATION_RE = re.compile(r"\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*(ms|s|sec|min|m|h|d)?\s*", re.I)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
HOUR_MS = 3_600_000
#: About a hundred years in ms: the longest duration a key takes (threading waits overflow past
#: ``threading.TIMEOUT_MAX``, some 292 years; nothing here waits longer than a lifetime).
CENTURY_MS = 100 * 365 * 24 * HOUR_MS

SIZE_ACCEPTED = "a size >= 0: an int (bytes) or a string like '4MiB', '1GiB', '512k'"
DURATION_ACCEPTED = "a duration >= 0: an int (milliseconds) or a string like '500ms', '30s', '24h'"
BOOL_ACCEPTED = "true | false (also 1/0, yes/no, on/off)"


# -- showing values in messages ------------------------------------------------------------

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 80
_SHOWN.maxlevel = 3


def shown(value: Any) -> str:
    """``repr(value)``, cut short: an error message must stay readable for a 5000-digit value
    and must not recurse through a value nested thousands deep."""
    try:
        return _SHOWN.repr(value)
    except (ValueError, RecursionError):  # an int past the 4300-digit str() limit
        return f"<{type(value).__name__} too large to show>"


def _not_a(what: str, value: Any, key: str | None, accepted: str) -> ConfigError:
    named = f"{key} = " if key else ""
    return ConfigError(f"{named}{shown(value)} is not {what}; accepted: {accepted}", key=key, value=value,
                       accepted=accepted)


# -- the public parsers ----------------------------------------------------------------------


def parse_size(value: Any, *, key: str | None = None) -> int:
    """Bytes from an int or a string like ``"4MiB"``, ``"1G"``, ``"512k"`` (binary units).

    Raises :class:`~tiered_core.errors.ConfigError` (a ``ValueError``; ``key`` names the
    setting when given) for anything else, including negative numbers and fractions of a byte.
    """
    try:
        if isinstance(value, float) and value >= 0 and value.is_integer():
            return int(value)
        return _scaled(value, _SIZE_RE, _UNITS, "")
    except ValueError:
        raise _not_a("a size", value, key, SIZE_ACCEPTED) from None


def parse_duration_ms(value: Any, *, key: str | None = None) -> int:
    """Milliseconds from an int (ms) or a string like ``"30s"``, ``"500ms"``, ``"24h"``, ``"3d"``.

    Raises :class:`~tiered_core.errors.ConfigError` (a ``ValueError``) for anything else,
    including negative values and fractions of a millisecond.
    """
    try:
        return _scaled(value, _DURATION_RE, _DURATION_MS, "ms")
    except ValueError:
        raise _not_a("a duration", value, key, DURATION_ACCEPTED) from None


def _scaled(value: Any, pattern: re.Pattern[str], units: dict[str, int], default_unit: str) -> int:
    """A whole non-negative number of base units from an int or ``"<number><unit>"``
    (``pattern`` captures number and unit; ``units`` maps a lower-case unit to its size);
    ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(value)
        return value
    if not isinstance(value, str):
        raise ValueError(value)
    m = pattern.fullmatch(value)
    if not m:
        raise ValueError(value)
    return _exact(m.group(1), units[(m.group(2) or default_unit).lower()], value)


def _exact(number: str, unit: int, value: Any) -> int:
    """``number * unit`` computed exactly (a float loses digits past 2**53: "9007199254740993"
    read as ...992, "1.00000000000000001k" as 1024); ValueError unless it is a whole number."""
    total = Fraction(number.replace("_", "")) * unit
    if total.denominator != 1:
        raise ValueError(value)
    return int(total)


def parse_bool(value: Any, *, key: str | None = None) -> bool:
    """True/False from a bool or ``1/0, true/false, yes/no, on/off`` (any case).

    Raises :class:`~tiered_core.errors.ConfigError` (a ``ValueError``) for anything else.
    """
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _not_a("a boolean", value, key, "true | false (or 1/0, yes/no, on/off)")


def parse_count(value: Any, minimum: int) -> int:
    """An int >= ``minimum`` from an int, a whole float or a decimal string; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, str):
        value = int(value.strip().replace("_", ""), 10)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < minimum:
        raise ValueError(value)
    return value


def storable_text(text: str) -> bool:
    """True when ``text`` can name a file or a backend object: no NUL (the OS refuses it) and
    a UTF-8 form (no lone surrogate, as a \\uD800 escape in broker.conf can give)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- one parse function per type -----------------------------------------------------------------


def _path(value: Any, key: "Bounds") -> str:
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path.strip() or not storable_text(path):
        raise ValueError(value)
    return os.path.expanduser(path)


def _optional_path(value: Any, key: "Bounds") -> str | None:
    return None if value is None else _path(value, key)


def _name(value: Any, key: "Bounds") -> str:
    if not isinstance(value, str) or not value.strip() or not storable_text(value):
        raise ValueError(value)
    return value.strip()


def _component(value: Any, key: "Bounds") -> str:
    # blank or whitespace-padded: "broker-a " names another tier prefix than "broker-a"
    if (not isinstance(value, str) or not value.strip() or value != value.strip()
            or value in (".", "..") or "/" in value
            or "\\" in value or any(ord(c) < 0x20 for c in value) or not storable_text(value)
            or (key.maximum is not None and len(value.encode("utf-8")) > key.maximum)):
        raise ValueError(value)
    return value


def _storage_level(value: Any, key: "Bounds") -> str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(STORAGE_LEVELS):
        return STORAGE_LEVELS[value]
    text = str(value).strip().upper() if isinstance(value, str) else None
    if text is not None and text.isdigit() and int(text) < len(STORAGE_LEVELS):
        return STORAGE_LEVELS[int(text)]
    if text not in STORAGE_LEVELS:
        raise ValueError(value)
    return text


def _flush(value: Any, key: "Bounds") -> str:
    text = str(value).strip().lower() if isinstance(value, str) else None
    text = {"async_flush": "async", "sync_flush": "sync"}.get(text, text)  # RocketMQ flushDiskType
    if text not in LOCAL_FLUSH_MODES:
        raise ValueError(value)
    return text


def _recovery(value: Any, key: "Bounds") -> str:
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text not in METADATA_RECOVERY_MODES:
        raise ValueError(value)
    return text


def _in_bounds(number: int, value: Any, key: "Bounds") -> int:
    """``number``, or ValueError (naming ``value``) outside the key's minimum and maximum."""
    if number < (key.minimum or 0) or (key.maximum is not None and number > key.maximum):
        raise ValueError(value)
    return number


def _bounded(parse: Callable[[Any], int]) -> Callable[[Any, "Bounds"], int]:
    """A checker: ``parse(value)``, then ValueError outside the key's bounds."""
    def check(value: Any, key: "Bounds") -> int:
        return _in_bounds(parse(value), value, key)
    return check


_size = _bounded(parse_size)


def _count(value: Any, key: "Bounds") -> int:
    return _in_bounds(parse_count(value, key.minimum or 0), value, key)


_duration = _bounded(parse_duration_ms)


def _hours(value: Any, key: "Bounds") -> int:
    if isinstance(value, str) and not value.strip().isdigit():
        ms = parse_duration_ms(value)
        if ms % HOUR_MS:
            raise ValueError(value)
        hours = ms // HOUR_MS
    else:
        hours = parse_count(value, 0)
    return _in_bounds(hours, value, key)


def _bool(value: Any, key: "Bounds") -> bool:
    return parse_bool(value)


def _options(value: Any, key: "Bounds") -> Any:
    return value  # a table: each option is checked by the driver (StoreConfig._build)


# -- accepted values, as error messages and the README show them ---------------------------------------


def _at_least(text: str, key: "Bounds", show: Callable[[int], str] = str) -> str:
    """``text`` with its ``>= 0`` / ``> 0`` bound replaced by the key's minimum, and why; then
    the key's maximum (``show`` writes it in the key's unit), and why."""
    if key.minimum is not None:
        bound = "> 0" if key.minimum == 1 and text.startswith("a size") else f">= {key.minimum}"
        text = re.sub(r">=? 0", bound, text, count=1)
    if key.why:
        text = f"{text} ({key.why})"
    if key.maximum is not None:
        text += f"; at most {show(key.maximum)}" + (f" ({key.why_max})" if key.why_max else "")
    return text


def _component_accepted(key: "Bounds") -> str:
    text = ("a non-empty name without '/', '\\', control characters, lone surrogates or leading or "
            "trailing whitespace")
    if key.maximum is not None:
        text += f"; at most {key.maximum} UTF-8 bytes (one file name)"
    return text


def _fixed(text: str) -> Callable[["Bounds"], str]:
    return lambda key: text


# -- README rendering of defaults -------------------------------------------------------------------------


def _show_size(value: int) -> str:
    for unit, suffix in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def _show_duration(value: int) -> str:
    if value and value % (24 * HOUR_MS) == 0 and value >= 365 * 24 * HOUR_MS:
        return f"{value // (24 * HOUR_MS)}d"
    for unit, suffix in ((HOUR_MS, "h"), (60_000, "min"), (1000, "s")):
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return f"{value}ms" if value else "0"


def _show_plain(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{}" if not value else repr(value)
    return f'"{value}"' if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class ValueType:
    """How a key's values are read: ``parse(value, key)``, the text of what is accepted,
    the Python annotation of the field, and how the README labels the type and shows a default."""

    name: str
    label: str
    python: str
    parse: Callable[[Any, "Bounds"], Any]
    accepted: Callable[["Bounds"], str]
    show: Callable[[Any], str] = _show_plain
    #: A local path: relative values resolve against the config file's directory.
    is_path: bool = False

    def __repr__(self) -> str:
        return f"ValueType({self.name})"


PATH = ValueType("path", "path", "str", _path, _fixed(
    "a non-empty path (relative to the config file's directory) without NUL or lone surrogates"), is_path=True)
OPTIONAL_PATH = ValueType("path?", "path or nothing", "str | None", _optional_path, _fixed(
    "a path (relative to the config file's directory) without NUL or lone surrogates, or nothing"), is_path=True)
NAME = ValueType("name", "name", "str", _name, _fixed("a registry name (see `tiered drivers`)"))
COMPONENT = ValueType("component", "name", "str", _component, _component_accepted)
STORAGE_LEVEL = ValueType("level", "choice", "str", _storage_level,
                          _fixed(" | ".join(STORAGE_LEVELS) + " (or 0-3)"))
FLUSH = ValueType("flush", "choice", "str", _flush, _fixed(" | ".join(LOCAL_FLUSH_MODES)))
RECOVERY = ValueType("recovery", "choice", "str", _recovery, _fixed(" | ".join(METADATA_RECOVERY_MODES)))
SIZE = ValueType("size", "size", "int", _size, lambda key: _at_least(SIZE_ACCEPTED, key, _show_size),
                 _show_size)
COUNT = ValueType("count", "int", "int", _count, lambda key: _at_least("an int >= 0", key))
DURATION_MS = ValueType("ms", "duration", "int", _duration,
                        lambda key: _at_least(DURATION_ACCEPTED, key, _show_duration), _show_duration)
HOURS = ValueType("hours", "int", "int", _hours,
                  lambda key: _at_least("an int >= 0 (hours) or a string like '72h', '3d'", key))
BOOL = ValueType("bool", "bool", "bool", _bool, _fixed(BOOL_ACCEPTED))
OPTIONS = ValueType("options", "table", "Mapping[str, Any]", _options, _fixed("a table of driver options"))


@dataclass(frozen=True)
class RocketMQUnit:
    """A broker.conf key whose unit differs from ours: ``convert`` reads its raw string
    (ValueError/TypeError when bad; ``accepted`` says what it takes), ``note`` says how."""

    convert: Callable[[str], Any]
    accepted: str
    note: str


#: RocketMQ's commitLogRollingInterval is in hours; ours is a duration in ms.
HOURS_TO_MS = RocketMQUnit(lambda raw: parse_count(raw, 0) * HOUR_MS, "an int >= 0 (hours)", "hours")
#: RocketMQ divides tieredStoreMaxPendingLimit by 4 for its upload semaphores.
QUARTER = RocketMQUnit(lambda raw: max(1, parse_count(raw, 1) // 4), "an int >= 1", "divided by 4, as RocketMQ does")
