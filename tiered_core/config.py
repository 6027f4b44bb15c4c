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

Each key (its type, unit, bounds, default, broker.conf key, environment variable and
meaning) is declared once in :mod:`tiered_core.configdef.keys`; this module makes
``StoreConfig``'s fields, the checks, the broker.conf tables and the overrides from
that declaration, and :meth:`StoreConfig.section` builds each part's sub-config from it.

Every bad value raises :class:`~tiered_core.errors.ConfigError` naming the key, where it came
from (file, environment variable) and the accepted values. Relative paths resolve against
the directory of the file that names them (the working directory for environment values).
Sizes accept ints or strings with binary units (``4MiB``, ``1G``, ``512k``: K/KB/KiB = 1024);
durations accept ints (ms, or hours for ``*_hours``) or strings (``30s``, ``500ms``, ``24h``, ``3d``).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from tiered_core.codec.java_properties import parse_java_properties
from tiered_core.configdef import (
    IGNORED_ROCKETMQ_KEYS, KEYS, NEVER_EXPIRE_HOURS, ROCKETMQ_DRIVER_OPTION_KEYS, section,
)
from tiered_core.configdef.key_spec import bad_value as _bad
from tiered_core.configdef.types import (
    COMPONENT,
    LOCAL_FLUSH_MODES,
    METADATA_RECOVERY_MODES,
    OPTIONAL_PATH,
    OPTIONS,
    STORAGE_LEVELS,
    parse_bool,
    parse_duration_ms,
    parse_size,
)
from tiered_core.configdef.types import shown as _shown
from tiered_core.configdef.types import storable_text as _storable_text
from tiered_core.errors import ConfigError, TieredStoreError

if TYPE_CHECKING:  # imported lazily at run time: keep `import tiered_core` light
    from tiered_core.flat.settings import FlatFileConfig
    from tiered_core.spi.driver import SegmentDriver
    from tiered_core.spi.metadata import TieredMetadataStore

S = TypeVar("S")

#: Driver options holding local paths: relative values resolve against the config file's directory.
_PATH_OPTIONS = ("root", "database")
#: Driver options holding a URL: a local one (``file://``, ``local://``) with a relative path
#: resolves against the config file's directory too, not against where a command runs.
_URL_OPTIONS = ("url",)
#: Keys holding local paths: relative values resolve against the config file's directory.
_PATH_KEYS = tuple(k.name for k in KEYS if k.type.is_path)
#: ``TIERED_OPTION_<NAME>``: the prefix of driver-option variables.
_OPTION_ENV_PREFIX = KEYS.driver_options.env.removesuffix("<NAME>")
#: ``TIERED_<NAME>`` (the part after ``TIERED_``, lower case) -> key; the name is case-insensitive.
_ENV_KEYS = {k.env.removeprefix("TIERED_").lower(): k for k in KEYS if k.type is not OPTIONS}
#: Variables named like a config key's but not one (a typo) that were reported already.
_REPORTED_LOOKALIKES: set[str] = set()

log = logging.getLogger(__name__)


def _declared_fields(cls: type[S]) -> type[S]:
    """Give ``cls`` one field per declared key (in declaration order, before its own
    fields), typed and defaulted by the declaration; ``@dataclass`` then makes them fields."""
    own = dict(cls.__dict__.get("__annotations__", {}))
    annotations: dict[str, Any] = {}
    for key in KEYS:
        annotations[key.name] = key.type.python
        if key.type is OPTIONS:
            setattr(cls, key.name, field(default_factory=dict, hash=False))
        else:
            setattr(cls, key.name, key.default)
    annotations.update(own)
    cls.__annotations__ = annotations
    return cls


@dataclass(frozen=True)
@_declared_fields
class StoreConfig:
    """Validated, immutable settings of one tiered store.

    The fields (one per key, in order), their defaults, bounds and meaning are declared
    once in :mod:`tiered_core.configdef.keys` (:data:`~tiered_core.configdef.KEYS`) and
    listed in README.md's key table, which is generated from there.

    Contract: an instance made by :meth:`load`, :meth:`from_text`, :meth:`from_mapping`,
    :meth:`with_env` or :meth:`replace` holds only valid values (driver and metadata names
    installed, driver options accepted by the driver, values within the declared bounds);
    otherwise those raise :class:`~tiered_core.errors.ConfigError` naming the key, its
    source and the accepted values. ``driver`` is stored as the registry's canonical name
    (aliases such as RocketMQ's ``PosixFileSegment`` class name are resolved). Secrets in
    ``driver_options`` are kept (needed to open the driver) but :meth:`describe` redacts
    them. A value the store could not open with is refused here, not when the store opens.
    ``source`` (not a key) is the file the values came from.
    """

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
        values.setdefault("store_path", KEYS.store_path.default)  # the default is relative to the file too
        values = _normalize_fields(values, labels, where)
        for key in _PATH_KEYS:
            if values.get(key) is not None:
                values[key] = _resolve(values[key], base_dir)
        driver = _canonical_driver(values.get("driver", KEYS.driver.default), labels.get("driver", "driver"), where)
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
            if name.startswith(_OPTION_ENV_PREFIX) and len(name) > len(_OPTION_ENV_PREFIX):
                options[name[len(_OPTION_ENV_PREFIX):].lower()] = (name, value)
                continue
            key = _ENV_KEYS.get(name[len("TIERED_"):].lower())
            if key is not None:
                changes[key.name] = None if value == "" and key.type is OPTIONAL_PATH else value
                labels[key.name] = f"environment variable {name}"
            else:
                _report_lookalike(name)
        if not changes and not options:
            return self
        where = "environment"
        values = _normalize_fields(changes, labels, where)
        cwd = os.getcwd()
        for key in _PATH_KEYS:
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
        """``driver_options`` with defaults filled in: the posix driver's ``root`` defaults to
        ``{store_path}/tiered`` (the embedded default). Another driver's options are its own:
        one it requires stays required, whatever its name."""
        options = dict(self.driver_options)
        if "root" not in options and _is_posix(self.driver):
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

    def section(self, cls: type[S], **overrides: Any) -> S:
        """The sub-config ``cls`` (``FlatFileConfig``, ``LocalStoreConfig``, ``IndexConfig``,
        ``DispatchConfig``...) with this config's values in its key-bound fields;
        ``overrides`` set fields directly. See :func:`tiered_core.configdef.section`."""
        return section(cls, self, **overrides)

    def flat_config(self) -> "FlatFileConfig":
        """The container layer's settings."""
        from tiered_core.flat.settings import FlatFileConfig

        return self.section(FlatFileConfig)

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
            cls = _driver_class(self.driver)
        except TieredStoreError:
            return redact(options, frozenset(options))  # cannot tell which are secret: hide every value
        return cls.redact_options(options)


_FIELDS = dataclasses.fields(StoreConfig)
_FIELD_NAMES = frozenset(f.name for f in _FIELDS)


def _normalize_fields(values: Mapping[str, Any], labels: Mapping[str, str], where: str) -> dict[str, Any]:
    """Each value checked (and normalized) by its key's type; driver options and the source
    pass through (the driver checks its options)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name in ("driver_options", "source"):
            out[name] = value
            continue
        out[name] = KEYS[name].check(value, labels.get(name, name), where)
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


def _report_lookalike(name: str) -> None:
    """Warn (once) about ``TIERED_<X>`` when X is not a key but nearly one's name: a typo would
    else be ignored without a word. (Other ``TIERED_*`` variables belong to tools and tests.)"""
    if name in _REPORTED_LOOKALIKES:
        return
    rest = name[len("TIERED_"):]
    close = difflib.get_close_matches(rest.lower(), list(_ENV_KEYS), n=1, cutoff=0.85)
    word, _, option = rest.partition("_")
    meant = _ENV_KEYS[close[0]].env if close else None
    if meant is None and option and difflib.SequenceMatcher(None, word.lower(), "option").ratio() >= 0.7:
        meant = f"{_OPTION_ENV_PREFIX}{option}"  # TIERED_OPTIONS_ROOT: a driver option meant
    if meant is not None:
        _REPORTED_LOOKALIKES.add(name)
        log.warning("environment variable %s is not a config key and is ignored: did you mean %s?", name, meant)


def _resolve_local_url(url: str, base_dir: str) -> str:
    """``file://rel/dir`` -> ``file:///{base_dir}/rel/dir``; any other URL as it is."""
    head, sep, rest = url.strip().partition("://")
    if not sep or head.lower() not in ("file", "local") or not rest or rest.startswith("/"):
        return url
    return f"{head}://{_resolve(rest, base_dir)}"


# -- plugins -------------------------------------------------------------------------


def _driver_class(name: str) -> type:
    from tiered_core.plugins import driver_class

    if ":" in name and not _is_class_spec(name):
        # importlib would raise ValueError/TypeError for "", ".rel" or "a..b", not ImportError
        raise ConfigError("module:Class must be a dotted module path, ':' and a class name", key="driver")
    return driver_class(name)


def _is_posix(driver: str) -> bool:
    """Whether ``driver`` names the posix driver or a class derived from it (its name, an
    alias, or ``module:Class``)."""
    try:
        cls = _driver_class(driver)
    except TieredStoreError:
        return False
    return any(vars(c).get("name") == "posix" for c in getattr(cls, "__mro__", ()))


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
        elif key in _URL_OPTIONS and isinstance(options[key], str):
            options[key] = _resolve_local_url(options[key], base_dir)
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


def refuse_keys_outside_tables(data: Mapping[str, Any], where: str) -> None:
    """Raise :class:`ConfigError` naming every key of ours (a :class:`StoreConfig` field), or a
    near miss of one (``stor_path``), at the top level of a TOML document: written above the
    first ``[table]`` header, it belongs to no table and would be ignored while its default took
    its place (a store_path left behind for ./demo-data). Other tools' keys and tables may share
    the file."""
    ours = sorted(_FIELD_NAMES - {"source", "driver_options"})
    named: dict[str, str | None] = {}  # key -> the name it misspells (None: it is ours as written)
    for key, value in data.items():
        if isinstance(value, (dict, list)):
            continue
        if key in ours:
            named[key] = None
        elif close := difflib.get_close_matches(key.lower(), ours, n=1, cutoff=0.85):
            named[key] = close[0]
    if not named:
        return
    shown = ", ".join(repr(k) if m is None else f"{k!r} (did you mean {m!r}?)" for k, m in named.items())
    one = len(named) == 1
    raise ConfigError(f"{where}: {shown} {'is' if one else 'are'} outside the [tiered] table (a key written before "
                      f"the first [table] header belongs to none), so {'it' if one else 'they'} would be ignored: "
                      f"move {'it' if one else 'them'} under [tiered]", key=next(iter(named)), source=where,
                      keys=list(named))


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
    refuse_keys_outside_tables(data, where)
    if "broker" in data:  # (other tools' tables may share the file; [[broker]] is ours)
        # A static topics' cluster file: read as one store it would name a default broker,
        # and a take-over with it would fence the cluster's live broker of that name.
        raise ConfigError(f"{where}: a cluster file ([[broker]] tables) is not one store's config: use the "
                          "`tiered static-topic` commands with --cluster FILE, or a config naming one store "
                          "(its broker and store_path under [tiered])", key="broker", source=where)
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


#: RocketMQ broker keys -> (our field, converter of the raw string or None); from the declaration.
ROCKETMQ_KEYS: dict[str, tuple[str, Callable[[str], Any] | None]] = {
    k.rocketmq: (k.name, k.rocketmq_unit.convert if k.rocketmq_unit else None)
    for k in KEYS if k.rocketmq and k.type is not OPTIONS
}
_ROCKETMQ_BY_KEY = {k.rocketmq: k for k in KEYS if k.rocketmq and k.type is not OPTIONS}

#: The keys of the POSIX provider's root (RocketMQ's tieredStoreFilePath, and an old spelling):
#: they set the driver option ``root``.
_ROCKETMQ_ROOT_KEYS = (KEYS.driver_options.rocketmq, *KEYS.driver_options.rocketmq_aliases)
#: RocketMQ's boolean switches and what ``false`` sets (``true``, their default, sets nothing);
#: declared with their key (``Key.switch``): ``readAheadCacheEnable=false`` turns the read-ahead
#: cache off, ``tieredStoreGroupCommit=false`` dispatches what waits at every round (still in
#: groups), ``tieredStoreDeleteFileEnable=false`` makes expiry delete nothing.
_ROCKETMQ_SWITCHES: dict[str, tuple[str, Any]] = {
    k.switch.rocketmq: (k.name, k.switch.off) for k in KEYS if k.switch is not None
}

#: RocketMQ tiered keys accepted without effect here; their values are still checked (see
#: ``IGNORED_ROCKETMQ_KEYS`` in the declaration for why each has no effect).
ROCKETMQ_IGNORED_TIERED_KEYS = frozenset(k.rocketmq for k in IGNORED_ROCKETMQ_KEYS)
_IGNORED_BY_KEY = {k.rocketmq: k for k in IGNORED_ROCKETMQ_KEYS}


def _accepted_properties_keys() -> list[str]:
    return sorted(set(ROCKETMQ_KEYS) | set(_ROCKETMQ_ROOT_KEYS[:1]) | set(_ROCKETMQ_SWITCHES)
                  | ROCKETMQ_IGNORED_TIERED_KEYS | {"tiered.<field>", "tiered.options.<name>"})


def _from_properties(text: str, where: str) -> tuple[dict[str, Any], dict[str, str]]:
    props = parse_java_properties(text)
    values: dict[str, Any] = {}
    labels: dict[str, str] = {}
    options: dict[str, str] = {}
    switches: dict[str, bool] = {}
    root: str | None = None
    root_key = _ROCKETMQ_ROOT_KEYS[0]
    mapped: dict[str, tuple[str, str]] = {}  # driver option -> (value, RocketMQ key)
    for key, raw in props.items():
        value = raw.strip()
        if key in _ROCKETMQ_BY_KEY:
            declared = _ROCKETMQ_BY_KEY[key]
            name, unit = declared.name, declared.rocketmq_unit
            if declared.type is COMPONENT:
                # A broker or cluster name keeps the trailing blanks Java gives it (RocketMQ's
                # broker would name its tier prefix "broker-a "): checked, and refused, as written.
                value = raw
            if unit is not None:
                try:
                    value = unit.convert(value)
                except (ValueError, TypeError):
                    raise _bad(where, key, raw, unit.accepted, name) from None
            values[name] = value
            labels[name] = f"{key} ({name})"
        elif key in _ROCKETMQ_ROOT_KEYS:
            root, root_key = value or None, key
        elif key in ROCKETMQ_DRIVER_OPTION_KEYS:
            if value:
                mapped[ROCKETMQ_DRIVER_OPTION_KEYS[key]] = (value, key)
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
        elif key in _IGNORED_BY_KEY:
            ignored = _IGNORED_BY_KEY[key]
            try:
                ignored.type.parse(value, ignored)
            except (ValueError, TypeError, OverflowError):
                raise _bad(where, key, raw, ignored.accepted + " (accepted, without effect here)", key) from None
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
    if mapped:  # RocketMQ's objectStore* keys, for a driver that has the option
        driver = values.get("driver", KEYS.driver.default)
        try:
            names = set(_driver_class(driver).option_names())
        except TieredStoreError:
            names = set()  # an unknown driver is reported when the driver is checked
        for option, (value, key) in mapped.items():
            if option in names and option not in options:
                options[option] = value
                labels["options." + option] = key
    if options:
        # tieredStoreFilePath is the POSIX provider's root; a driver without a root ignores it.
        driver = values.get("driver", KEYS.driver.default)
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
    "refuse_keys_outside_tables",
    "STORAGE_LEVELS",
    "LOCAL_FLUSH_MODES",
    "METADATA_RECOVERY_MODES",
    "ROCKETMQ_KEYS",
    "ROCKETMQ_IGNORED_TIERED_KEYS",
    "NEVER_EXPIRE_HOURS",
    "parse_java_properties",
    "parse_size",
    "parse_duration_ms",
    "parse_bool",
]
