"""StoreConfig: the settings of a tiered store, from TOML, a RocketMQ broker.conf, or TIERED_* variables.

Three sources, applied in this order by :meth:`StoreConfig.load`:

1. A file. ``.toml``: a ``[tiered]`` table with the snake_case field names and a
   ``[tiered.options]`` table of driver options. ``.conf`` / ``.properties`` (Java
   properties): RocketMQ's broker keys (``tieredBackendServiceProvider``,
   ``tieredStorageLevel``, ``tieredStoreFilePath``...; see :data:`ROCKETMQ_KEYS`), plus
   ``tiered.FIELD=...`` and ``tiered.options.NAME=...`` for what RocketMQ has no key for.
   Other broker keys are ignored (a broker.conf holds many); an unknown ``tiered*`` key is an
   error (a typo would otherwise be silently ignored).
2. Environment overrides: ``TIERED_<FIELD>`` (``TIERED_DRIVER``, ``TIERED_STORAGE_LEVEL``,
   ``TIERED_STORE_PATH``...) and ``TIERED_OPTION_<NAME>`` for driver options. Other ``TIERED_*``
   variables belong to other tools and are ignored. When ``TIERED_DRIVER`` switches to a
   different driver, the file's driver options are dropped (they were for the old driver).
3. Defaults (RocketMQ's, see the digest's config table).

Every bad value raises :class:`~tiered_core.errors.ConfigError` naming the key, where it came
from (file, environment variable) and the accepted values. Relative paths resolve against
the directory of the file that names them (the working directory for environment values).
Sizes accept ints or strings with binary units (``4MiB``, ``1G``, ``512k``: K/KB/KiB = 1024);
durations accept ints (ms, or hours for ``*_hours``) or strings (``30s``, ``500ms``, ``24h``, ``3d``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import reprlib
import types
from fractions import Fraction
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from tiered_core.errors import ConfigError, TieredStoreError

if TYPE_CHECKING:  # imported lazily at run time: keep `import tiered_core` light
    from tiered_core.flat.config import FlatFileConfig
    from tiered_core.spi.driver import SegmentDriver
    from tiered_core.spi.metadata import TieredMetadataStore

STORAGE_LEVELS = ("DISABLE", "NOT_IN_DISK", "NOT_IN_MEM", "FORCE")
LOCAL_FLUSH_MODES = ("async", "sync")
#: What an open does when the metadata does not list what the backend holds (or cannot be
#: read): "refuse" stops with an error naming the fix; "rebuild" rebuilds it from the listing.
METADATA_RECOVERY_MODES = ("refuse", "rebuild")

#: Driver options holding local paths: relative values resolve against the config file's directory.
_PATH_OPTIONS = ("root", "database")

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_SIZE_RE = re.compile(r"\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*(?:([kmgtp]?)(?:i?b)?)?\s*", re.I)
_DURATION_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                "d": 86_400_000}
_DURATION_RE = re.compile(r"\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*(ms|s|sec|min|m|h|d)?\s*", re.I)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class StoreConfig:
    """Validated, immutable settings of one tiered store.

    Contract: an instance made by :meth:`load`, :meth:`from_text`, :meth:`from_mapping`,
    :meth:`with_env` or :meth:`replace` holds only valid values (driver and metadata names
    installed, driver options accepted by the driver, sizes > 0...); otherwise those raise
    :class:`~tiered_core.errors.ConfigError` naming the key, its source and the accepted
    values. ``driver`` is stored as the registry's canonical name (aliases such as
    RocketMQ's ``PosixFileSegment`` class name are resolved). Secrets in ``driver_options``
    are kept (needed to open the driver) but :meth:`describe` redacts them. A value the
    store could not open with is refused here, not when the store opens.

    Fields whose meaning is not obvious from their name:

    - ``commit_log_max_size`` >= 128 bytes and ``consume_queue_max_size`` >= 20 bytes: a
      tiered segment must hold one whole message (the local store refuses messages larger
      than the segment) and one 20-byte consume-queue unit (else nothing is ever tiered).
    - ``group_commit_count`` / ``group_commit_size`` / ``group_commit_interval_ms``: a queue
      is copied to the tier when that many messages wait, or the oldest waited that long;
      ``group_commit_interval_ms = 0`` copies whatever waits at every dispatch round
      (RocketMQ's ``tieredStoreGroupCommit=false``), still in groups of up to
      ``group_commit_count`` messages and ``group_commit_size`` bytes.
    - ``max_pending_limit``: uploads in flight across queues (RocketMQ's
      ``tieredStoreMaxPendingLimit`` / 4). The store currently runs at most 8 dispatch
      threads, so values above 8 act as 8.
    - ``file_reserved_hours`` >= 1: tiered segments and uploaded index files older than
      this are deleted when expiry runs (a topic's own reserve time takes precedence for
      its segments). :data:`NEVER_EXPIRE_HOURS` (RocketMQ's ``tieredStoreDeleteFileEnable=
      false``) keeps them for good.
    - ``read_ahead_cache_bytes``: the memory budget of the fetcher's read-ahead cache;
      ``0`` means no read-ahead cache (RocketMQ's ``readAheadCacheEnable=false``): every
      tiered read goes to the backend. ``read_ahead_disk_cache_path`` adds a disk tier and
      needs the ``diskcache`` package.
    - ``local_commit_log_file_size`` >= 4096 bytes (the local store's minimum).
    - ``cluster`` / ``broker``: path components of every tiered object, so at most 246 and
      255 UTF-8 bytes (a POSIX file name; the cluster directory adds 9 characters).
    """

    store_path: str = "./demo-data"
    driver: str = "posix"
    driver_options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    metadata: str = "sqlite"
    metadata_path: str | None = None
    cluster: str = "DefaultCluster"
    broker: str = "broker-a"
    storage_level: str = "NOT_IN_DISK"
    commit_log_max_size: int = 1 << 30
    consume_queue_max_size: int = 100 << 20
    max_group_commit_count: int = 10000
    group_commit_count: int = 4096
    group_commit_size: int = 4 << 20
    group_commit_interval_ms: int = 30000
    max_pending_limit: int = 2500
    rolling_min_size: int = 16 << 20
    rolling_interval_ms: int = 24 * 3600 * 1000
    file_reserved_hours: int = 72
    read_ahead_cache_bytes: int = 64 << 20
    read_ahead_cache_expire_ms: int = 10000
    read_ahead_disk_cache_path: str | None = None
    local_commit_log_file_size: int = 1 << 30
    local_flush: str = "async"
    local_retention_hours: int = 72
    metadata_recovery: str = "refuse"
    append_prop_crc: bool = False  # RocketMQ enabledAppendPropCRC: puts append the __CRC32# property
    verify_prop_crc: bool = False  # RocketMQ forceVerifyPropCRC: tiered reads require and verify it
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # Cheap checks of every scalar field (no plugin loading here).
        where = self.source or "StoreConfig"
        for name, value in _normalize_fields({f.name: getattr(self, f.name) for f in _FIELDS},
                                             {}, where).items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "driver_options", types.MappingProxyType(dict(self.driver_options)))

    def __repr__(self) -> str:
        # Never show secrets, even when a config object ends up in a log line.
        shown = []
        for f in _FIELDS:
            value = getattr(self, f.name)
            if f.name == "driver_options":
                value = self.describe_options(defaults=False)
            shown.append(f"{f.name}={value!r}")
        return f"StoreConfig({', '.join(shown)})"

    # -- construction ---------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike, *, environ: Mapping[str, str] | None = None) -> "StoreConfig":
        """Read ``path`` (``.toml``, or a broker.conf / ``.properties`` file), then apply the
        ``TIERED_*`` overrides of ``environ`` (default ``os.environ``).

        Other extensions are sniffed: a file with a ``[table]`` line is TOML.
        """
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            raise ConfigError(f"config file {path!r} does not exist", key="config", source=path) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path!r}: {exc}", key="config", source=path) from None
        ext = os.path.splitext(path)[1].lower()
        if ext == ".toml":
            fmt = "toml"
        elif ext in (".conf", ".properties", ".cfg"):
            fmt = "properties"
        else:
            fmt = "toml" if re.search(r"^\s*\[", text, re.M) else "properties"
        base_dir = os.path.dirname(os.path.abspath(path))
        config = cls.from_text(text, fmt, base_dir, source=path)
        return config.with_env(os.environ if environ is None else environ)

    @classmethod
    def from_text(cls, text: str, fmt: str, base_dir: str = ".", *, source: str | None = None) -> "StoreConfig":
        """Parse ``text`` as ``fmt`` (``"toml"`` or ``"properties"``); no environment overrides."""
        where = source or f"<{fmt} text>"
        if fmt == "toml":
            values, labels = _from_toml(text, where)
        elif fmt in ("properties", "conf"):
            values, labels = _from_properties(text, where)
        else:
            raise ConfigError(f"config format {fmt!r} is not one of toml, properties", key="format",
                              source=where, accepted=["toml", "properties"])
        return cls._build(values, labels, base_dir, source)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], base_dir: str = ".", *,
                     source: str | None = None) -> "StoreConfig":
        """Build from a ``[tiered]``-style mapping (snake_case keys; ``options`` holds driver
        options; ``driver_options`` is accepted too)."""
        values = dict(values)
        if "options" in values:
            if "driver_options" in values:
                raise ConfigError(f"{source or 'mapping'}: give driver options as 'options' or "
                                  "'driver_options', not both", key="options", source=source)
            values["driver_options"] = values.pop("options")
        _reject_unknown(values, source or "mapping", "")
        return cls._build(values, {}, base_dir, source)

    @classmethod
    def _build(cls, values: dict[str, Any], labels: dict[str, str], base_dir: str,
               source: str | None) -> "StoreConfig":
        where = source or "config"
        options = values.pop("driver_options", None)
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise ConfigError(f"{where}: {labels.get('driver_options', 'options')} must be a table of "
                              f"driver options, got {options!r}", key="options", source=source)
        values.setdefault("store_path", cls.store_path)  # the default is relative to the file too
        values = _normalize_fields(values, labels, where)
        for key in ("store_path", "metadata_path", "read_ahead_disk_cache_path"):
            if values.get(key) is not None:
                values[key] = _resolve(values[key], base_dir)
        driver = _canonical_driver(values.get("driver", cls.driver), labels.get("driver", "driver"), where)
        values["driver"] = driver
        option_labels = {k[len("options."):]: v for k, v in labels.items() if k.startswith("options.")}
        values["driver_options"] = _check_driver_options(driver, dict(options), base_dir, where,
                                                         labels.get("driver_options", "options"), option_labels)
        if "metadata" in values:
            values["metadata"] = _check_metadata(values["metadata"], labels.get("metadata", "metadata"), where)
        return cls(**values, source=source)

    def with_env(self, environ: Mapping[str, str] = os.environ) -> "StoreConfig":
        """A copy with the ``TIERED_*`` overrides of ``environ`` applied (see the module doc)."""
        changes: dict[str, Any] = {}
        labels: dict[str, str] = {}
        options: dict[str, tuple[str, str]] = {}  # lower-case option name -> (variable, value)
        for name, value in environ.items():
            if not name.startswith("TIERED_"):
                continue
            rest = name[len("TIERED_"):]
            if rest.startswith("OPTION_") and len(rest) > len("OPTION_"):
                options[rest[len("OPTION_"):].lower()] = (name, value)
                continue
            key = rest.lower()
            if key in _FIELD_NAMES and key not in ("driver_options", "source"):
                changes[key] = None if value == "" and _FIELD_TYPES[key] == "path?" else value
                labels[key] = f"environment variable {name}"
        if not changes and not options:
            return self
        where = "environment"
        values = _normalize_fields(changes, labels, where)
        cwd = os.getcwd()
        for key in ("store_path", "metadata_path", "read_ahead_disk_cache_path"):
            if values.get(key) is not None:
                values[key] = _resolve(values[key], cwd)
        driver_options = dict(self.driver_options)
        if "driver" in values:
            values["driver"] = _canonical_driver(values["driver"], labels["driver"], where)
            if values["driver"] != self.driver:
                driver_options = {}
        option_labels: dict[str, str] = {}
        if options:
            accepted = _driver_option_names(values.get("driver", self.driver))
            by_lower = {n.lower(): n for n in accepted}
            for low, (var, value) in options.items():
                driver_options[by_lower.get(low, low)] = value
                option_labels[by_lower.get(low, low)] = f"environment variable {var}"
        values["driver_options"] = _check_driver_options(
            values.get("driver", self.driver), driver_options, cwd, where, "options", option_labels)
        if "metadata" in values:
            values["metadata"] = _check_metadata(values["metadata"], labels["metadata"], where)
        return dataclasses.replace(self, **values)

    def replace(self, **changes: Any) -> "StoreConfig":
        """A copy with ``changes`` (field names) applied and checked like a file's values.

        Relative paths resolve against the source file's directory (else the working directory).
        """
        unknown = sorted(set(changes) - (_FIELD_NAMES - {"source"}))
        if unknown:
            raise ConfigError(f"StoreConfig has no field(s) {', '.join(map(repr, unknown))}; "
                              f"accepted: {', '.join(sorted(_FIELD_NAMES - {'source'}))}",
                              key=unknown[0], accepted=sorted(_FIELD_NAMES - {"source"}))
        values = {f.name: getattr(self, f.name) for f in _FIELDS if f.name != "source"}
        if "driver" in changes and "driver_options" not in changes:
            if _canonical_driver(changes["driver"], "driver", self.source or "replace") != self.driver:
                values["driver_options"] = {}  # they were for the old driver
        values.update(changes)
        base_dir = os.path.dirname(os.path.abspath(self.source)) if self.source else os.getcwd()
        return type(self)._build(values, {}, base_dir, self.source)

    # -- derived values ---------------------------------------------------------------

    def effective_metadata_path(self) -> str:
        """``metadata_path``, or the default file of the metadata store under ``store_path``."""
        if self.metadata_path is not None:
            return self.metadata_path
        if self.metadata == "json":
            return os.path.join(self.store_path, "config", "tieredStoreMetadata.json")
        if self.metadata == "sqlite":
            return os.path.join(self.store_path, "tiered-metadata.db")
        return os.path.join(self.store_path, f"tiered-metadata.{self.metadata}")

    def effective_driver_options(self) -> dict[str, Any]:
        """``driver_options`` with defaults filled in (a ``root`` option defaults to ``{store_path}/tiered``)."""
        options = dict(self.driver_options)
        if "root" not in options and "root" in _driver_option_names(self.driver):
            options["root"] = os.path.join(self.store_path, "tiered")
        return options

    # -- opening what it describes ---------------------------------------------------------

    def open_driver(self) -> "SegmentDriver":
        """The configured driver, through the plugin registry."""
        from tiered_core.plugins import open_driver

        return open_driver(self.driver, **self.effective_driver_options())

    def open_metadata(self) -> "TieredMetadataStore":
        """The configured metadata store (created if absent)."""
        from tiered_core.metadata import open_metadata_store

        return open_metadata_store(self.metadata, self.effective_metadata_path())

    def flat_config(self) -> "FlatFileConfig":
        """The container layer's settings."""
        from tiered_core.flat.config import FlatFileConfig

        return FlatFileConfig(
            cluster=self.cluster,
            broker=self.broker,
            commit_log_max_size=self.commit_log_max_size,
            consume_queue_max_size=self.consume_queue_max_size,
            max_group_commit_count=self.max_group_commit_count,
            rolling_min_size=self.rolling_min_size,
            rolling_interval_ms=self.rolling_interval_ms,
            file_reserved_hours=self.file_reserved_hours,
        )

    # -- output ---------------------------------------------------------------------------

    def to_toml(self) -> str:
        """This config as a TOML document that :meth:`from_text` reads back equal.

        Secrets are included: write it to a protected file, never to a log.
        """
        lines = ["[tiered]"]
        for f in _FIELDS:
            if f.name in ("driver_options", "source"):
                continue
            value = getattr(self, f.name)
            if value is not None:
                lines.append(f"{f.name} = {_toml_value(value)}")
        lines += ["", "[tiered.options]"]
        for key, value in sorted(self.driver_options.items()):
            if value is not None:
                lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"

    def describe(self) -> dict[str, Any]:
        """Every setting, for printing: driver options with defaults, secrets redacted."""
        out: dict[str, Any] = {}
        for f in _FIELDS:
            out[f.name] = getattr(self, f.name)
        out["driver_options"] = self.describe_options()
        out["metadata_path"] = self.effective_metadata_path()
        return out

    def describe_options(self, *, defaults: bool = True) -> dict[str, Any]:
        """Driver options (with defaults filled in unless ``defaults=False``), secrets redacted."""
        from tiered_core.spi.driver import redact

        options = self.effective_driver_options() if defaults else dict(self.driver_options)
        try:
            secret = _driver_class(self.driver).secret_options
        except TieredStoreError:
            secret = frozenset(options)  # cannot tell which are secret: hide every value
        return redact(options, secret)


_FIELDS = dataclasses.fields(StoreConfig)
_FIELD_NAMES = frozenset(f.name for f in _FIELDS)

# How each field's value is checked: see _normalize_fields.
_FIELD_TYPES: dict[str, str] = {
    "store_path": "path",
    "driver": "name",
    "driver_options": "options",
    "metadata": "name",
    "metadata_path": "path?",
    "cluster": "component",
    "broker": "component",
    "storage_level": "level",
    "commit_log_max_size": "size",
    "consume_queue_max_size": "size",
    "max_group_commit_count": "count",
    "group_commit_count": "count",
    "group_commit_size": "size",
    "group_commit_interval_ms": "ms",
    "max_pending_limit": "count",
    "rolling_min_size": "size0",
    "rolling_interval_ms": "ms",
    "file_reserved_hours": "hours",
    "read_ahead_cache_bytes": "size0",
    "read_ahead_cache_expire_ms": "ms",
    "read_ahead_disk_cache_path": "path?",
    "local_commit_log_file_size": "size",
    "local_flush": "flush",
    "local_retention_hours": "hours",
    "metadata_recovery": "recovery",
    "append_prop_crc": "bool",
    "verify_prop_crc": "bool",
    "source": "source",
}
assert set(_FIELD_TYPES) == _FIELD_NAMES

#: Lower bounds the store needs (a smaller value would only fail, or silently stall, later).
_MINIMUM: dict[str, int] = {
    "commit_log_max_size": 128,
    "consume_queue_max_size": 20,
    "local_commit_log_file_size": 4096,
    "file_reserved_hours": 1,
}
_MINIMUM_WHY = {
    "commit_log_max_size": "a tiered segment must hold one whole message",
    "consume_queue_max_size": "a segment must hold one 20-byte consume-queue unit, or nothing is tiered",
    "local_commit_log_file_size": "the local commit log's smallest file",
    "file_reserved_hours": "0 would expire everything; tieredStoreDeleteFileEnable=false keeps files for good",
}
#: Longest cluster and broker names in UTF-8 bytes: each is one file name ({md5[:8]}_{cluster}).
_COMPONENT_BYTES = {"cluster": 255 - 9, "broker": 255}
#: ``file_reserved_hours`` meaning "never expire" (about 245,000 years).
NEVER_EXPIRE_HOURS = (1 << 31) - 1


# -- value checks ---------------------------------------------------------------------


def _bad(where: str, label: str, value: Any, accepted: str, key: str) -> ConfigError:
    return ConfigError(f"{where}: {label} = {_shown(value)} is invalid; accepted: {accepted}",
                       key=key, source=where, value=value, accepted=accepted)


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 80
_SHOWN.maxlevel = 3


def _shown(value: Any) -> str:
    """``repr(value)``, cut short: an error message must stay readable for a 5000-digit value
    and must not recurse through a value nested thousands deep."""
    try:
        return _SHOWN.repr(value)
    except (ValueError, RecursionError):  # an int past the 4300-digit str() limit
        return f"<{type(value).__name__} too large to show>"


def _not_a(what: str, value: Any, key: str | None, accepted: str) -> ConfigError:
    named = f"{key} = " if key else ""
    return ConfigError(f"{named}{_shown(value)} is not {what}; accepted: {accepted}", key=key, value=value,
                       accepted=accepted)


def parse_size(value: Any, *, key: str | None = None) -> int:
    """Bytes from an int or a string like ``"4MiB"``, ``"1G"``, ``"512k"`` (binary units).

    Raises :class:`~tiered_core.errors.ConfigError` (a ``ValueError``; ``key`` names the
    setting when given) for anything else, including negative numbers and fractions of a byte.
    """
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        if isinstance(value, int):
            if value < 0:
                raise ValueError(value)
            return value
        if isinstance(value, float):
            if value < 0 or not value.is_integer():
                raise ValueError(value)
            return int(value)
        if not isinstance(value, str):
            raise ValueError(value)
        m = _SIZE_RE.fullmatch(value)
        if not m:
            raise ValueError(value)
        return _exact(m.group(1), _UNITS[(m.group(2) or "").lower()], value)
    except ValueError:
        raise _not_a("a size", value, key, _ACCEPTED["size0"]) from None


def parse_duration_ms(value: Any, *, key: str | None = None) -> int:
    """Milliseconds from an int (ms) or a string like ``"30s"``, ``"500ms"``, ``"24h"``, ``"3d"``.

    Raises :class:`~tiered_core.errors.ConfigError` (a ``ValueError``) for anything else,
    including negative values and fractions of a millisecond.
    """
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        if isinstance(value, int):
            if value < 0:
                raise ValueError(value)
            return value
        if not isinstance(value, str):
            raise ValueError(value)
        m = _DURATION_RE.fullmatch(value)
        if not m:
            raise ValueError(value)
        return _exact(m.group(1), _DURATION_MS[(m.group(2) or "ms").lower()], value)
    except ValueError:
        raise _not_a("a duration", value, key, _ACCEPTED["ms"]) from None


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


def _parse_count(value: Any, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, str):
        value = int(value.strip().replace("_", ""), 10)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < minimum:
        raise ValueError(value)
    return value


def _storable_text(text: str) -> bool:
    """True when ``text`` can name a file or a backend object: no NUL (the OS refuses it) and
    a UTF-8 form (no lone surrogate, as a \\uD800 escape in broker.conf can give)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_one(name: str, value: Any, label: str, where: str) -> Any:
    kind = _FIELD_TYPES[name]
    needs_diskcache = False
    try:
        if kind == "source":
            return value
        if kind in ("path", "path?"):
            if value is None and kind == "path?":
                return None
            path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
            if not isinstance(path, str) or not path.strip() or not _storable_text(path):
                raise ValueError(value)
            if name == "read_ahead_disk_cache_path" and importlib.util.find_spec("diskcache") is None:
                needs_diskcache = True
            else:
                return os.path.expanduser(path)
        if kind == "name":
            if not isinstance(value, str) or not value.strip() or not _storable_text(value):
                raise ValueError(value)
            return value.strip()
        if kind == "component":
            if (not isinstance(value, str) or not value or value in (".", "..") or "/" in value
                    or "\\" in value or any(ord(c) < 0x20 for c in value) or not _storable_text(value)
                    or len(value.encode("utf-8")) > _COMPONENT_BYTES[name]):
                raise ValueError(value)
            return value
        if kind == "level":
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(STORAGE_LEVELS):
                return STORAGE_LEVELS[value]
            text = str(value).strip().upper() if isinstance(value, str) else None
            if text is not None and text.isdigit() and int(text) < len(STORAGE_LEVELS):
                return STORAGE_LEVELS[int(text)]
            if text not in STORAGE_LEVELS:
                raise ValueError(value)
            return text
        if kind == "recovery":
            text = str(value).strip().lower() if isinstance(value, str) else None
            if text not in METADATA_RECOVERY_MODES:
                raise ValueError(value)
            return text
        if kind == "flush":
            text = str(value).strip().lower() if isinstance(value, str) else None
            text = {"async_flush": "async", "sync_flush": "sync"}.get(text, text)  # RocketMQ flushDiskType
            if text not in LOCAL_FLUSH_MODES:
                raise ValueError(value)
            return text
        if kind in ("size", "size0"):
            size = parse_size(value)
            if size < _MINIMUM.get(name, 1 if kind == "size" else 0):
                raise ValueError(value)
            return size
        if kind == "count":
            return _parse_count(value, 1)
        if kind == "ms":
            return parse_duration_ms(value)
        if kind == "hours":
            if isinstance(value, str) and not value.strip().isdigit():
                ms = parse_duration_ms(value)
                if ms % 3_600_000:
                    raise ValueError(value)
                hours = ms // 3_600_000
            else:
                hours = _parse_count(value, 0)
            if hours < _MINIMUM.get(name, 0):
                raise ValueError(value)
            return hours
        if kind == "bool":
            return parse_bool(value)
    except (ValueError, TypeError, OverflowError):
        accepted = _ACCEPTED[kind]
        if name in _MINIMUM:
            accepted = re.sub(r"[>]=? 0", f">= {_MINIMUM[name]}", accepted, count=1) + f" ({_MINIMUM_WHY[name]})"
        elif name in _COMPONENT_BYTES:
            accepted += f"; at most {_COMPONENT_BYTES[name]} UTF-8 bytes (one file name)"
        raise _bad(where, label, value, accepted, name) from None
    if needs_diskcache:
        raise ConfigError(f"{where}: {label} = {_shown(value)} needs the diskcache package, which is not "
                          "installed (pip install diskcache); leave it unset for a memory-only cache",
                          key=name, source=where, value=value)
    raise AssertionError(kind)


_ACCEPTED = {
    "path": "a non-empty path (relative to the config file's directory) without NUL or lone surrogates",
    "path?": "a path (relative to the config file's directory) without NUL or lone surrogates, or nothing",
    "name": "a registry name (see `tiered drivers`)",
    "component": "a non-empty name without '/', '\\', control characters or lone surrogates",
    "level": " | ".join(STORAGE_LEVELS) + " (or 0-3)",
    "flush": " | ".join(LOCAL_FLUSH_MODES),
    "recovery": " | ".join(METADATA_RECOVERY_MODES),
    "size": "a size > 0: an int (bytes) or a string like '4MiB', '1GiB', '512k'",
    "size0": "a size >= 0: an int (bytes) or a string like '4MiB', '1GiB', '512k'",
    "count": "an int >= 1",
    "ms": "a duration >= 0: an int (milliseconds) or a string like '500ms', '30s', '24h'",
    "hours": "an int >= 0 (hours) or a string like '72h', '3d'",
    "bool": "true | false (also 1/0, yes/no, on/off)",
}


def _normalize_fields(values: Mapping[str, Any], labels: Mapping[str, str], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name == "driver_options":
            out[name] = value
            continue
        out[name] = _check_one(name, value, labels.get(name, name), where)
    return out


def _reject_unknown(values: Mapping[str, Any], where: str, prefix: str) -> None:
    accepted = sorted((_FIELD_NAMES - {"source", "driver_options"}) | {"options"})
    for key in values:
        if key not in accepted and key != "driver_options":
            raise ConfigError(f"{where}: unknown key {prefix + str(key)!r}; accepted keys: {', '.join(accepted)}",
                              key=f"{prefix}{key}", source=where, accepted=accepted)


def _resolve(path: str, base_dir: str) -> str:
    path = os.path.expanduser(path)
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(os.path.abspath(base_dir), path))


# -- plugins -------------------------------------------------------------------------


def _driver_class(name: str) -> type:
    from tiered_core.plugins import driver_class

    if ":" in name and not _is_class_spec(name):
        # importlib would raise ValueError/TypeError for "", ".rel" or "a..b", not ImportError
        raise ConfigError("module:Class must be a dotted module path, ':' and a class name", key="driver")
    return driver_class(name)


def _driver_option_names(driver: str) -> list[str]:
    try:
        return _driver_class(driver).option_names()
    except TieredStoreError:
        return []


def _canonical_driver(name: str, label: str, where: str) -> str:
    from tiered_core.plugins import get_registry

    try:
        registry = get_registry()
        cls = _driver_class(name) if ":" in name else registry.driver_class(name)
    except TieredStoreError as exc:
        installed = ", ".join(sorted(get_registry().drivers)) or "(none)"
        raise ConfigError(f"{where}: {label} = {_shown(name)} is not an installed driver ({exc.message}); "
                          f"accepted: {installed}, their aliases, or module:Class",
                          key="driver", source=where, value=name) from None
    return name if ":" in name else cls.name


def _is_class_spec(name: str) -> bool:
    """``package.module:Class`` with every part a Python identifier."""
    module, _, attr = name.partition(":")
    return attr.isidentifier() and all(part.isidentifier() for part in module.split("."))


def _check_driver_options(driver: str, options: dict[str, Any], base_dir: str, where: str,
                          label: str, option_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    for key in list(options):
        if not isinstance(key, str) or not key or not _storable_text(key):
            raise ConfigError(f"{where}: driver option name {key!r} must be a non-empty string "
                              "without NUL or lone surrogates",
                              key=f"options.{key}", source=where)
        if isinstance(options[key], str) and not _storable_text(options[key]):
            label_ = (option_labels or {}).get(key, f"{label}: {key}")
            # The value is not shown: it may be a secret.
            raise ConfigError(f"{where}: {label_} holds a NUL character or a lone surrogate, which no "
                              "path, URL or credential can carry", key=f"options.{key}", source=where)
        if key in _PATH_OPTIONS and isinstance(options[key], str) and options[key]:
            options[key] = _resolve(options[key], base_dir)
    cls = _driver_class(driver)
    effective = dict(options)
    if "root" not in effective and "root" in cls.option_names():
        effective["root"] = "(default)"  # filled from store_path when opened
    try:
        coerced = cls.coerce_options(effective)
    except TieredStoreError as exc:
        option = getattr(exc, "option", "?")
        label = (option_labels or {}).get(option, label)
        raise ConfigError(f"{where}: {label}: {exc.message}", key=f"options.{option}", source=where,
                          accepted=cls.option_names()) from None
    return {k: coerced[k] for k in options}


def _check_metadata(name: str, label: str, where: str) -> str:
    from tiered_core.plugins import get_registry

    registry = get_registry()
    name = registry.canonical_metadata_store_name(name)  # aliases are declared by each store
    if name not in registry.metadata_stores:
        installed = ", ".join(sorted(registry.metadata_stores)) or "(none)"
        raise ConfigError(f"{where}: {label} = {name!r} is not an installed metadata store; accepted: "
                          f"{installed} (or {', '.join(registry.metadata_store_aliases())})", key="metadata",
                          source=where, value=name, accepted=sorted(registry.metadata_stores))
    return name


# -- TOML ------------------------------------------------------------------------------


def _from_toml(text: str, where: str) -> tuple[dict[str, Any], dict[str, str]]:
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}", key="config", source=where) from None
    except RecursionError:  # arrays or inline tables nested past the parser's stack
        raise ConfigError(f"{where}: not valid TOML: values are nested too deeply", key="config",
                          source=where) from None
    except ValueError as exc:  # an integer of more than 4300 digits (not a TOMLDecodeError)
        raise ConfigError(f"{where}: not valid TOML: {exc}", key="config", source=where) from None
    table = data.get("tiered")
    if table is None:
        if data:
            raise ConfigError(f"{where}: no [tiered] table (found {', '.join(map(repr, data))}); "
                              "put the settings under [tiered] and driver options under [tiered.options]",
                              key="tiered", source=where)
        return {}, {}
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: 'tiered' must be a table", key="tiered", source=where)
    values = dict(table)
    if "driver_options" in values:
        raise ConfigError(f"{where}: write driver options as the table [tiered.options]",
                          key="tiered.driver_options", source=where)
    _reject_unknown(values, where, "tiered.")
    if "options" in values:
        if not isinstance(values["options"], dict):
            raise ConfigError(f"{where}: tiered.options must be a table", key="tiered.options", source=where)
        values["driver_options"] = values.pop("options")
    labels = {k: f"tiered.{k}" for k in values}
    labels["driver_options"] = "[tiered.options]"
    return values, labels


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_str(key)


def _toml_str(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {value!r} ({type(value).__name__}) to TOML", key="options", value=value)


# -- RocketMQ broker.conf ------------------------------------------------------------------


def _hours_to_ms(value: Any) -> int:
    return _parse_count(value, 0) * 3_600_000


def _pending_to_uploads(value: Any) -> int:
    # RocketMQ divides tieredStoreMaxPendingLimit by 4 for its upload semaphores.
    return max(1, _parse_count(value, 1) // 4)


#: RocketMQ broker keys -> (our field, converter of the raw string or None).
ROCKETMQ_KEYS: dict[str, tuple[str, Callable[[str], Any] | None]] = {
    "brokerClusterName": ("cluster", None),
    "brokerName": ("broker", None),
    "storePathRootDir": ("store_path", None),
    "tieredBackendServiceProvider": ("driver", None),
    "tieredMetadataServiceProvider": ("metadata", None),
    "tieredStorageLevel": ("storage_level", None),
    "tieredStoreCommitLogMaxSize": ("commit_log_max_size", None),
    "tieredStoreConsumeQueueMaxSize": ("consume_queue_max_size", None),
    "tieredStoreMaxGroupCommitCount": ("max_group_commit_count", None),
    "tieredStoreGroupCommitCount": ("group_commit_count", None),
    "tieredStoreGroupCommitSize": ("group_commit_size", None),
    "tieredStoreGroupCommitTimeout": ("group_commit_interval_ms", None),
    "tieredStoreMaxPendingLimit": ("max_pending_limit", _pending_to_uploads),
    "commitLogRollingMinimumSize": ("rolling_min_size", None),
    "commitLogRollingInterval": ("rolling_interval_ms", _hours_to_ms),
    "tieredStoreFileReservedTime": ("file_reserved_hours", None),
    "readAheadCacheExpireDuration": ("read_ahead_cache_expire_ms", None),
    "mappedFileSizeCommitLog": ("local_commit_log_file_size", None),
    "flushDiskType": ("local_flush", None),
    "fileReservedTime": ("local_retention_hours", None),
    "enabledAppendPropCRC": ("append_prop_crc", None),
    "forceVerifyPropCRC": ("verify_prop_crc", None),
}

#: Keys handled specially: the POSIX root, and switches that turn a feature off.
_ROCKETMQ_ROOT_KEYS = ("tieredStoreFilePath", "tieredStoreFilepath")
#: RocketMQ's boolean switches and what ``false`` sets (``true``, their default, sets nothing):
#:
#: - ``readAheadCacheEnable=false``: ``read_ahead_cache_bytes = 0``, no read-ahead cache.
#: - ``tieredStoreGroupCommit=false`` ("false forces every dispatch"): ``group_commit_interval_ms
#:   = 0``, so every dispatch round copies what waits, still in groups of ``group_commit_count``
#:   messages / ``group_commit_size`` bytes (not one commit per message).
#: - ``tieredStoreDeleteFileEnable=false``: ``file_reserved_hours = NEVER_EXPIRE_HOURS``, so
#:   expiry (of segments and of uploaded index files) deletes nothing.
_ROCKETMQ_SWITCHES: dict[str, tuple[str, Any]] = {
    "readAheadCacheEnable": ("read_ahead_cache_bytes", 0),
    "tieredStoreGroupCommit": ("group_commit_interval_ms", 0),
    "tieredStoreDeleteFileEnable": ("file_reserved_hours", NEVER_EXPIRE_HOURS),
}

#: RocketMQ tiered keys accepted without effect here; their values are still checked:
#:
#: - ``tieredStoreIndexFileMaxHashSlotNum`` / ``tieredStoreIndexFileMaxIndexNum`` (ints >= 1):
#:   the tiered index sizes its files itself (``IndexConfig``; an uploaded file records its
#:   own layout).
#: - ``tieredStoreDeleteFileInterval`` (ms >= 0): expiry runs when called
#:   (``TieredMessageStore.delete_expired_tiered``) and, for index files, on the index
#:   service's own interval.
#: - ``tieredStoreCrcCheckEnable`` (a boolean): unused by RocketMQ; here tiered reads always
#:   check the body CRC.
ROCKETMQ_IGNORED_TIERED_KEYS = frozenset({
    "tieredStoreIndexFileMaxHashSlotNum", "tieredStoreIndexFileMaxIndexNum",
    "tieredStoreDeleteFileInterval", "tieredStoreCrcCheckEnable",
})
_IGNORED_CHECKS: dict[str, tuple[Callable[[str], Any], str]] = {
    "tieredStoreIndexFileMaxHashSlotNum": (lambda v: _parse_count(v, 1), _ACCEPTED["count"]),
    "tieredStoreIndexFileMaxIndexNum": (lambda v: _parse_count(v, 1), _ACCEPTED["count"]),
    "tieredStoreDeleteFileInterval": (parse_duration_ms, _ACCEPTED["ms"]),
    "tieredStoreCrcCheckEnable": (parse_bool, "true | false"),
}
assert set(_IGNORED_CHECKS) == ROCKETMQ_IGNORED_TIERED_KEYS


def _accepted_properties_keys() -> list[str]:
    return sorted(set(ROCKETMQ_KEYS) | set(_ROCKETMQ_ROOT_KEYS[:1]) | set(_ROCKETMQ_SWITCHES)
                  | ROCKETMQ_IGNORED_TIERED_KEYS | {"tiered.<field>", "tiered.options.<name>"})


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` text -> ordered key/value strings (the last of duplicate keys wins).

    Handles ``#``/``!`` comments, ``=``, ``:`` or whitespace separators, backslash line
    continuations and escapes (``\\\\``, ``\\t``, ``\\n``, ``\\uXXXX``), as broker.conf is read.
    ``\\uXXXX`` escapes are UTF-16 code units as in Java: a surrogate pair of escapes is one
    character; a lone surrogate is kept as Java keeps it (the loader refuses it in a value).
    """
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes continues the line
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    out: dict[str, str] = {}
    for line in logical:
        key_chars: list[str] = []
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if ch == "\\" and i + 1 < n:
                key_chars.append("\\" + line[i + 1])
                i += 2
                continue
            if ch in "=: \t\f":
                break
            key_chars.append(ch)
            i += 1
        while i < n and line[i] in " \t\f":
            i += 1
        if i < n and line[i] in "=:":
            i += 1
            while i < n and line[i] in " \t\f":
                i += 1
        out[_unescape("".join(key_chars))] = _unescape(line[i:])
    return out


def _unescape(text: str) -> str:
    if "\\" not in text:
        return _utf16_pairs(text)
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
            out.append(chr(int(text[i + 2:i + 6], 16)))
            i += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        i += 2
    return _utf16_pairs("".join(out))


def _utf16_pairs(text: str) -> str:
    """Join surrogate pairs into one character: \\uXXXX escapes are UTF-16 code units, as in
    Java (\\uD83D\\uDE00 is U+1F600). A lone surrogate stays (Java keeps it); the field
    checks refuse it."""
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
    return text


def _from_properties(text: str, where: str) -> tuple[dict[str, Any], dict[str, str]]:
    props = parse_properties(text)
    values: dict[str, Any] = {}
    labels: dict[str, str] = {}
    options: dict[str, str] = {}
    switches: dict[str, bool] = {}
    root: str | None = None
    root_key = _ROCKETMQ_ROOT_KEYS[0]
    for key, raw in props.items():
        value = raw.strip()
        if key in ROCKETMQ_KEYS:
            name, convert = ROCKETMQ_KEYS[key]
            if convert is not None:
                try:
                    value = convert(value)
                except (ValueError, TypeError):
                    raise _bad(where, key, raw, _ACCEPTED["count"] if convert is _pending_to_uploads
                               else "an int >= 0 (hours)", name) from None
            values[name] = value
            labels[name] = f"{key} ({name})"
        elif key in _ROCKETMQ_ROOT_KEYS:
            root, root_key = value or None, key
        elif key in _ROCKETMQ_SWITCHES:
            try:
                switches[key] = parse_bool(value)
            except ValueError:
                raise _bad(where, key, raw, "true | false", key) from None
        elif key.startswith("tiered.options."):
            options[key[len("tiered.options."):]] = value
            labels["options." + key[len("tiered.options."):]] = key
        elif key.startswith("tiered."):
            name = key[len("tiered."):]
            if name in ("options", "driver_options"):  # a table in TOML; one line per option here
                raise ConfigError(f"{where}: {key} needs an option name: write driver options as "
                                  "tiered.options.NAME=value", key=key, source=where)
            if name not in _FIELD_NAMES or name == "source":
                _reject_unknown({name: value}, where, "tiered.")
            values[name] = value
            labels[name] = key
        elif key in ROCKETMQ_IGNORED_TIERED_KEYS:
            check, accepted = _IGNORED_CHECKS[key]
            try:
                check(value)
            except (ValueError, TypeError):
                raise _bad(where, key, raw, accepted + " (accepted, without effect here)", key) from None
        elif key.startswith("tiered"):
            raise ConfigError(f"{where}: unknown tiered-store key {key!r}; accepted keys: "
                              f"{', '.join(_accepted_properties_keys())}", key=key, source=where,
                              accepted=_accepted_properties_keys())
        # Every other broker key belongs to the broker: ignored.
    for switch, enabled in switches.items():
        if not enabled:  # the switch wins over the field's own key in the same file
            name, off = _ROCKETMQ_SWITCHES[switch]
            values[name] = off
            labels[name] = f"{switch}=false ({name})"
    if root is not None and "root" not in options:
        options["root"] = root
        labels["options.root"] = root_key
    if options:
        # tieredStoreFilePath is the POSIX provider's root; a driver without a root ignores it.
        driver = values.get("driver", StoreConfig.driver)
        try:
            names = _driver_class(driver).option_names()
        except TieredStoreError:
            names = None  # reported when the driver is checked
        if names is not None and "root" not in names and root is not None and options.get("root") == root:
            del options["root"]
        values["driver_options"] = options
    labels["driver_options"] = "tiered.options.* / tieredStoreFilePath"
    return values, labels


__all__ = [
    "StoreConfig",
    "STORAGE_LEVELS",
    "LOCAL_FLUSH_MODES",
    "ROCKETMQ_KEYS",
    "ROCKETMQ_IGNORED_TIERED_KEYS",
    "NEVER_EXPIRE_HOURS",
    "parse_properties",
    "parse_size",
    "parse_duration_ms",
    "parse_bool",
]
