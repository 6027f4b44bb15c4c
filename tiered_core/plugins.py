"""Plugin discovery: entry points in the group ``tiered_core``, loaded through pluggy.

Loading is lazy (first use) and tolerant: a plugin that fails to import or to
register is reported with its distribution name and skipped, unless
``TIERED_STRICT_PLUGINS=1`` (CI) makes that an error. ``TIERED_DISABLE_PLUGINS=a,b``
blocks entry points by name.

The core never imports a driver package: first-party drivers are found exactly as a
third party's are.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import logging
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import pluggy

from tiered_core.errors import InvalidOption, PluginLoadError, UnknownDriver
from tiered_core.spi import hookspecs
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.layer import layered

log = logging.getLogger(__name__)

#: RocketMQ's provider class names (``tieredBackendServiceProvider``) -> driver names.
ROCKETMQ_ALIASES = {
    "org.apache.rocketmq.tieredstore.provider.PosixFileSegment": "posix",
    "org.apache.rocketmq.tieredstore.provider.MemoryFileSegment": "memory",
    "PosixFileSegment": "posix",
    "MemoryFileSegment": "memory",
}


class PluginLoadWarning(UserWarning):
    """An installed plugin failed to load and was skipped."""


@dataclass(frozen=True)
class DriverInfo:
    """A registered driver: its class and where it came from."""

    name: str
    cls: type[SegmentDriver]
    plugin: str
    distribution: str
    version: str
    aliases: tuple[str, ...] = ()


@dataclass
class PluginFailure:
    plugin: str
    distribution: str
    error: str


@dataclass
class Registry:
    """Drivers and metadata stores provided by plugins.

    ``strict`` (default: ``TIERED_STRICT_PLUGINS``) turns a broken plugin from a
    warning into :class:`~tiered_core.errors.PluginLoadError`.
    """

    strict: bool = field(default_factory=lambda: os.environ.get("TIERED_STRICT_PLUGINS", "") not in ("", "0"))
    entry_points: bool = True
    drivers: dict[str, DriverInfo] = field(default_factory=dict)
    metadata_stores: dict[str, DriverInfo] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self._aliases: dict[str, str] = dict(ROCKETMQ_ALIASES)
        self._origin: dict[str, tuple[str, str]] = {}  # plugin name -> (distribution, version)
        self._loaded = False
        self._load_error: PluginLoadError | None = None
        self._lock = threading.RLock()

    # -- loading ------------------------------------------------------------------

    def load(self) -> "Registry":
        """Load entry points (once) and collect what every plugin registers."""
        with self._lock:
            if self._loaded:
                if self._load_error is not None:
                    # Strict mode: keep failing, never serve a half-loaded registry.
                    raise self._load_error
                return self
            self._loaded = True
            try:
                if self.entry_points:
                    self._load_entry_points()
                self._collect()
            except PluginLoadError as exc:
                self._load_error = exc
                raise
        return self

    def register_plugin(self, plugin: Any, name: str, distribution: str = "(in-process)",
                        version: str = "") -> None:
        """Register a plugin object directly (tests, embedded use)."""
        with self._lock:
            self._register(plugin, name)
            self._origin[name] = (distribution, version)
            if self._loaded:
                self._collect(only=name)

    def _load_entry_points(self) -> None:
        blocked = {n.strip() for n in os.environ.get("TIERED_DISABLE_PLUGINS", "").split(",") if n.strip()}
        seen: set[str] = set()
        for dist in md.distributions():
            for ep in dist.entry_points:
                if ep.group != hookspecs.PROJECT or ep.name in seen or ep.name in blocked:
                    continue
                seen.add(ep.name)
                dist_name = dist.metadata["Name"] or "?"
                try:
                    plugin = ep.load()
                    self._register(plugin, ep.name)
                except Exception as exc:  # a broken plugin must not take the host down
                    self._fail(ep.name, dist_name, exc)
                    continue
                self._origin[ep.name] = (dist_name, dist.version)

    def _register(self, plugin: Any, name: str) -> None:
        """Register ``plugin``; one implementing a hook we do not define (a typo) is refused.

        Checked per plugin, so the failure names the right plugin and distribution.
        """
        self.pm.register(plugin, name=name)
        unknown = sorted(
            caller.name for caller in self.pm.get_hookcallers(plugin) or ()
            if not caller.has_spec()
            and any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls())
        )
        if unknown:
            self.pm.unregister(plugin, name)
            known = ", ".join(n for n in dir(hookspecs) if n.startswith("tiered_"))
            raise pluggy.PluginValidationError(
                plugin, f"plugin {name!r} implements unknown hook(s) {', '.join(unknown)}; known hooks: {known}")

    def _fail(self, plugin: str, distribution: str, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        self.failures.append(PluginFailure(plugin, distribution, text))
        message = f"tiered-store plugin {plugin!r} from distribution {distribution!r} failed to load: {text}"
        if self.strict:
            raise PluginLoadError(message + " (TIERED_STRICT_PLUGINS is set)",
                                  plugin=plugin, distribution=distribution) from exc
        warnings.warn(message + "; skipped", PluginLoadWarning, stacklevel=3)
        log.warning("%s; skipped", message)

    def _collect(self, only: str | None = None) -> None:
        for hook, table in (
            (self.pm.hook.tiered_register_drivers, self.drivers),
            (self.pm.hook.tiered_register_metadata_stores, self.metadata_stores),
        ):
            for impl in hook.get_hookimpls():
                if only is not None and impl.plugin_name != only:
                    continue
                dist, version = self._origin.get(impl.plugin_name, ("(in-process)", ""))
                register = self._registrar(table, impl.plugin_name, dist, version,
                                           drivers=table is self.drivers)
                try:
                    impl.function(register=register)
                except Exception as exc:
                    self._fail(impl.plugin_name, dist, exc)

    def _registrar(self, table: dict[str, DriverInfo], plugin: str, dist: str, version: str,
                   *, drivers: bool) -> Callable[..., None]:
        def register_driver(cls: type[SegmentDriver]) -> None:
            if not (isinstance(cls, type) and issubclass(cls, SegmentDriver)):
                raise TypeError(f"{cls!r} is not a SegmentDriver subclass")
            info = DriverInfo(cls.name, cls, plugin, dist, version, tuple(cls.aliases))
            taken = table.get(cls.name)
            if taken is not None and taken.cls is not cls:
                # Never let one package silently replace another's driver.
                raise ValueError(f"driver name {cls.name!r} is already registered by distribution "
                                 f"{taken.distribution!r} ({taken.cls.__module__}.{taken.cls.__qualname__})")
            table[cls.name] = info
            for alias in cls.aliases:
                self._aliases[alias] = cls.name

        def register_store(name: str, cls: type) -> None:
            table[name] = DriverInfo(name, cls, plugin, dist, version)

        return register_driver if drivers else register_store

    # -- lookup -------------------------------------------------------------------

    def canonical_name(self, name: str) -> str:
        self.load()
        if name in self.drivers:  # a real name wins over another driver's alias
            return name
        return self._aliases.get(name, name)

    def driver_class(self, name: str) -> type[SegmentDriver]:
        """The driver class registered as ``name`` (or an alias, or ``module:Class``)."""
        self.load()
        if ":" in name:
            return _import_class(name)
        canonical = self.canonical_name(name)
        info = self.drivers.get(canonical)
        if info is None:
            installed = ", ".join(sorted(self.drivers)) or "(none)"
            hint = ""
            broken = [f.distribution for f in self.failures]
            if broken:
                hint = f"; plugins that failed to load: {', '.join(broken)}"
            raise UnknownDriver(f"no driver named {name!r}; installed drivers: {installed}{hint}",
                                name=name, installed=sorted(self.drivers))
        return info.cls

    def open_driver(self, name: str, **options: Any) -> SegmentDriver:
        """Instantiate driver ``name`` with ``options`` (checked and type-converted), wrapped in
        the standard layers (:func:`tiered_core.spi.layer.layered`: validation, retry) --
        whoever wrote the driver. ``.innermost`` is the driver instance itself."""
        cls = self.driver_class(name)
        return layered(cls(**cls.coerce_options(options)))

    def metadata_store_class(self, name: str) -> type:
        self.load()
        info = self.metadata_stores.get(name)
        if info is None:
            installed = ", ".join(sorted(self.metadata_stores)) or "(none)"
            raise UnknownDriver(f"no metadata store named {name!r}; installed: {installed}",
                                name=name, installed=sorted(self.metadata_stores))
        return info.cls


def _import_class(spec: str) -> type[SegmentDriver]:
    module_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:  # importlib raises the last two for bad names
        raise UnknownDriver(f"cannot import driver class {spec!r}: {exc}", name=spec, installed=[]) from exc
    if not (isinstance(obj, type) and issubclass(obj, SegmentDriver)):
        raise InvalidOption(f"{spec!r} is not a SegmentDriver subclass", option=spec)
    return obj


_default: Registry | None = None
_default_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registry()
    return _default.load()


def open_driver(name: str, **options: Any) -> SegmentDriver:
    """Open the installed driver ``name`` with ``options``, in the standard layers.

    Raises :class:`~tiered_core.errors.UnknownDriver` (listing installed drivers) or
    :class:`~tiered_core.errors.InvalidOption` (naming the option).
    """
    return get_registry().open_driver(name, **options)


def driver_class(name: str) -> type[SegmentDriver]:
    return get_registry().driver_class(name)
