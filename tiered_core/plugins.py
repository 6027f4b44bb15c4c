"""Plugin discovery: entry points in the group ``tiered_core``, loaded through pluggy.

Loading is lazy (first use) and tolerant: a plugin that fails to import or to
register is reported with its distribution name and skipped, unless
``TIERED_STRICT_PLUGINS=1`` (CI) makes that an error. ``TIERED_DISABLE_PLUGINS=a,b``
blocks entry points by name.

Drivers and metadata stores are registered the same way (``register(cls)``; the class
declares its ``name`` and ``aliases``) and looked up the same way (name, alias or
``module:Class``). The core's own metadata stores are a built-in plugin, registered
directly rather than through an entry point; the core never imports a driver package:
first-party drivers are found exactly as a third party's are.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import inspect
import logging
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

import pluggy

from tiered_core.errors import InvalidOption, PluginLoadError, UnknownDriver
from tiered_core.spi import hookspecs
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.layer import layered
from tiered_core.spi.metadata import TieredMetadataStore

log = logging.getLogger(__name__)

#: Plugins of the core itself (plugin name -> module), registered directly on load:
#: they cannot be blocked and need no entry point pointing back into the core.
BUILTIN_PLUGINS = {"tiered_core.metadata": "tiered_core.metadata.plugin"}
_CORE_DISTRIBUTION = "tiered-core"


class PluginLoadWarning(UserWarning):
    """An installed plugin failed to load and was skipped."""


@dataclass(frozen=True)
class PluginEntry:
    """A registered class (driver or metadata store) and where it came from."""

    name: str
    cls: type
    plugin: str
    distribution: str
    version: str
    aliases: tuple[str, ...] = ()


@dataclass
class PluginFailure:
    plugin: str
    distribution: str
    error: str


@dataclass(frozen=True)
class _Kind:
    """What one register hook registers: its base class and the words errors use."""

    label: str
    base: type


_DRIVER = _Kind("driver", SegmentDriver)
_METADATA_STORE = _Kind("metadata store", TieredMetadataStore)


@dataclass
class Registry:
    """Drivers and metadata stores provided by plugins.

    ``strict`` (default: ``TIERED_STRICT_PLUGINS``) turns a broken plugin from a
    warning into :class:`~tiered_core.errors.PluginLoadError`. ``entry_points=False``
    loads only the built-in plugins (and what :meth:`register_plugin` adds).
    """

    strict: bool = field(default_factory=lambda: os.environ.get("TIERED_STRICT_PLUGINS", "") not in ("", "0"))
    entry_points: bool = True
    drivers: dict[str, PluginEntry] = field(default_factory=dict)
    metadata_stores: dict[str, PluginEntry] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        # kind -> alias -> registered name; filled from each class's ``aliases``.
        self._aliases: dict[_Kind, dict[str, str]] = {_DRIVER: {}, _METADATA_STORE: {}}
        # kind -> a name or alias two classes claimed -> their distributions (refused for all)
        self._contested: dict[_Kind, dict[str, set[str]]] = {_DRIVER: {}, _METADATA_STORE: {}}
        self._origin: dict[str, tuple[str, str]] = {}  # plugin name -> (distribution, version)
        self._loaded = False
        self._load_error: PluginLoadError | None = None
        self._lock = threading.RLock()

    def _table(self, kind: _Kind) -> dict[str, PluginEntry]:
        return self.drivers if kind is _DRIVER else self.metadata_stores

    # -- loading ------------------------------------------------------------------

    def load(self) -> "Registry":
        """Load the built-in plugins and entry points (once); collect what every plugin registers."""
        with self._lock:
            if self._loaded:
                if self._load_error is not None:
                    # Strict mode: keep failing, never serve a half-loaded registry.
                    raise self._load_error
                return self
            self._loaded = True
            try:
                self._load_builtins()
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

    def _load_builtins(self) -> None:
        try:
            version = md.version(_CORE_DISTRIBUTION)
        except md.PackageNotFoundError:  # running from a source tree that is not installed
            version = ""
        for name, module in BUILTIN_PLUGINS.items():
            # A failure here is a bug of the core, not a broken third-party plugin: let it raise.
            self._register(importlib.import_module(module), name)
            self._origin[name] = (_CORE_DISTRIBUTION, version)

    def _load_entry_points(self) -> None:
        blocked = {n.strip() for n in os.environ.get("TIERED_DISABLE_PLUGINS", "").split(",") if n.strip()}
        builtin_modules = set(BUILTIN_PLUGINS.values())
        seen: dict[str, str] = {}  # entry point name -> the distribution that declared it
        for dist in md.distributions():
            for ep in dist.entry_points:
                if ep.group != hookspecs.PROJECT or ep.name in blocked:
                    continue
                if ep.value in builtin_modules:  # a stale entry point of an older tiered-core
                    continue
                dist_name = dist.metadata["Name"] or "?"
                if ep.name in seen:
                    if seen[ep.name] != dist_name:  # (the same distribution found twice on sys.path: one)
                        self._refuse_entry_point(ep.name, seen[ep.name], dist_name)
                        blocked.add(ep.name)
                    continue
                seen[ep.name] = dist_name
                try:
                    plugin = ep.load()
                    self._register(plugin, ep.name)
                except Exception as exc:  # a broken plugin must not take the host down
                    self._fail(ep.name, dist_name, exc)
                    continue
                self._origin[ep.name] = (dist_name, dist.version)

    def _refuse_entry_point(self, name: str, first: str, second: str) -> None:
        """Two distributions declare entry point ``name``: neither is loaded (which one won
        would depend on the order of sys.path), and both are reported."""
        if self.pm.get_plugin(name) is not None:
            self.pm.unregister(name=name)
        self._origin.pop(name, None)
        why = ValueError(f"entry point {name!r} (group {hookspecs.PROJECT!r}) is declared by distributions "
                         f"{first!r} and {second!r}: neither is loaded; rename one of them")
        self._fail(name, first, why)
        self._fail(name, second, why)

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
        registered: dict[str, int] = {}
        for hook, kind in (
            (self.pm.hook.tiered_register_drivers, _DRIVER),
            (self.pm.hook.tiered_register_metadata_stores, _METADATA_STORE),
        ):
            for impl in hook.get_hookimpls():
                if only is not None and impl.plugin_name != only:
                    continue
                dist, version = self._origin.get(impl.plugin_name, ("(in-process)", ""))
                registered.setdefault(impl.plugin_name, 0)
                try:
                    impl.function(register=self._registrar(kind, impl.plugin_name, dist, version, registered))
                except Exception as exc:
                    self._fail(impl.plugin_name, dist, exc)
        self._report_idle(only, registered)

    def _report_idle(self, only: str | None, registered: dict[str, int]) -> None:
        """A plugin of an entry point that registers nothing is reported: a register hook that
        returned classes instead of calling ``register``, or a module without ``@hookimpl``."""
        for name, plugin in self.pm.list_name_plugin():
            if (only is not None and name != only) or name in BUILTIN_PLUGINS or name not in self._origin:
                continue
            dist = self._origin[name][0]
            if dist == "(in-process)" or any(f.plugin == name for f in self.failures):
                continue
            if name in registered and registered[name] == 0:
                self._fail(name, dist, ValueError(
                    "its register hook registered no class: call register(cls) for each driver or metadata "
                    "store (a hook's return value is ignored)"))
            elif name not in registered and not self.pm.get_hookcallers(plugin):
                self._fail(name, dist, ValueError(
                    f"it implements no {hookspecs.PROJECT} hook: are its functions marked with "
                    "tiered_core.spi.hookspecs.hookimpl?"))

    def _registrar(self, kind: _Kind, plugin: str, dist: str, version: str,
                   registered: dict[str, int]) -> Callable[[type], None]:
        """The ``register(cls)`` callable handed to one plugin's register hook."""
        table = self._table(kind)
        aliases = self._aliases[kind]
        contested = self._contested[kind]

        def register(cls: type) -> None:
            if not (isinstance(cls, type) and issubclass(cls, kind.base)):
                raise TypeError(f"{cls!r} is not a {kind.base.__name__} subclass")
            where = f"{cls.__module__}.{cls.__qualname__}"
            name = getattr(cls, "name", None)
            if not isinstance(name, str) or not name:
                raise TypeError(f"{kind.label} class {where} declares no `name`")
            if inspect.isabstract(cls):
                raise TypeError(f"{kind.label} class {where} ({name!r}) does not implement "
                                f"{', '.join(sorted(cls.__abstractmethods__))}")
            # Never let one package silently replace another's driver or store: a name (or
            # alias) two classes claim is refused for both, whichever was loaded first.
            for claimed in (name, *cls.aliases):
                if claimed in contested and dist not in contested[claimed]:
                    raise ValueError(f"{kind.label} name {claimed!r} is claimed by several distributions "
                                     f"({', '.join(sorted(contested[claimed]))}): refused for all of them")
            clash = self._clash(kind, cls, name)
            if clash is not None and clash[0].distribution == _CORE_DISTRIBUTION:
                taken, claimed = clash  # the core's own (loaded first, always): it keeps the name
                raise ValueError(f"{kind.label} name {claimed!r} is already registered by distribution "
                                 f"{taken.distribution!r} ({taken.cls.__module__}.{taken.cls.__qualname__})")
            if clash is not None:
                taken, claimed = clash
                contested[claimed] = {taken.distribution, dist}
                self._withdraw(kind, taken)
                why = (f"{kind.label} name {claimed!r} is claimed by distribution {taken.distribution!r} "
                       f"({taken.cls.__module__}.{taken.cls.__qualname__}) and by distribution {dist!r} ({where}): "
                       "refused for both")
                # (the second plugin's failure, raised below, names both; the first's is noted)
                self.failures.append(PluginFailure(taken.plugin, taken.distribution, f"ValueError: {why}"))
                raise ValueError(why)
            table[name] = PluginEntry(name, cls, plugin, dist, version, tuple(cls.aliases))
            for alias in cls.aliases:
                aliases[alias] = name
            registered[plugin] = registered.get(plugin, 0) + 1

        return register

    def _clash(self, kind: _Kind, cls: type, name: str) -> tuple[PluginEntry, str] | None:
        """The entry of another class registered under ``name``, or with one of ``cls``'s
        aliases as its own alias, and the contested name; None when there is none. (An alias
        that is another class's name is no clash: a real name always wins, whatever the order.)"""
        table, aliases = self._table(kind), self._aliases[kind]
        owner = table.get(name)
        if owner is not None and owner.cls is not cls:
            return owner, name
        for alias in cls.aliases:
            owner = table.get(aliases.get(alias, ""))
            if owner is not None and owner.cls is not cls:
                return owner, alias
        return None

    def _withdraw(self, kind: _Kind, entry: PluginEntry) -> None:
        """Take ``entry`` (its name and aliases) out of the tables."""
        self._table(kind).pop(entry.name, None)
        aliases = self._aliases[kind]
        for alias in [a for a, n in aliases.items() if n == entry.name]:
            del aliases[alias]

    # -- lookup -------------------------------------------------------------------

    def _canonical(self, kind: _Kind, name: str) -> str:
        self.load()
        if name in self._table(kind):  # a real name wins over another class's alias
            return name
        return self._aliases[kind].get(name, name)

    def _class(self, kind: _Kind, name: str) -> type:
        self.load()
        if ":" in name:
            return _import_class(name, kind)
        table = self._table(kind)
        entry = table.get(self._canonical(kind, name))
        if entry is None:
            installed = ", ".join(sorted(table)) or "(none)"
            hint = ""
            broken = [f.distribution for f in self.failures]
            if broken:
                hint = f"; plugins that failed to load: {', '.join(broken)}"
            what = "drivers" if kind is _DRIVER else "metadata stores"
            raise UnknownDriver(f"no {kind.label} named {name!r}; installed {what}: {installed}{hint}",
                                name=name, installed=sorted(table))
        return entry.cls

    def canonical_name(self, name: str) -> str:
        """The registered driver name for ``name`` (a name or an alias); unknown names unchanged."""
        return self._canonical(_DRIVER, name)

    def canonical_metadata_store_name(self, name: str) -> str:
        """The registered metadata store name for ``name`` (a name or an alias); unknown names unchanged."""
        return self._canonical(_METADATA_STORE, name)

    def metadata_store_aliases(self) -> list[str]:
        """Every alias a registered metadata store declares."""
        self.load()
        return sorted(self._aliases[_METADATA_STORE])

    def driver_class(self, name: str) -> type[SegmentDriver]:
        """The driver class registered as ``name`` (or an alias, or ``module:Class``)."""
        return self._class(_DRIVER, name)

    def open_driver(self, name: str, **options: Any) -> SegmentDriver:
        """Instantiate driver ``name`` with ``options`` (checked and type-converted), wrapped in
        the standard layers (:func:`tiered_core.spi.layer.layered`: validation, retry) --
        whoever wrote the driver. ``.innermost`` is the driver instance itself."""
        cls = self.driver_class(name)
        return layered(cls(**cls.coerce_options(options)))

    def metadata_store_class(self, name: str) -> type[TieredMetadataStore]:
        """The metadata store class registered as ``name`` (or an alias, or ``module:Class``)."""
        return self._class(_METADATA_STORE, name)

    def conformance_environment(self, name: str, workdir: str) -> ContextManager[dict[str, Any]]:
        """Options of a throw-away location for driver ``name`` (a context manager).

        Asks the plugins (``tiered_conformance_environment``, which may start an emulator)
        and falls back to the driver class's ``conformance_environment(workdir)``.
        """
        cls = self.driver_class(name)
        registered = self.canonical_name(name) if ":" not in name else cls.name
        env = self.pm.hook.tiered_conformance_environment(driver_name=registered, workdir=str(workdir))
        if env is not None:
            return env
        return cls.conformance_environment(str(workdir))


def _import_class(spec: str, kind: _Kind = _DRIVER) -> type:
    module_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:  # importlib raises the last two for bad names
        raise UnknownDriver(f"cannot import {kind.label} class {spec!r}: {exc}", name=spec, installed=[]) from exc
    if not (isinstance(obj, type) and issubclass(obj, kind.base)):
        raise InvalidOption(f"{spec!r} is not a {kind.base.__name__} subclass", option=spec)
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


def conformance_environment(name: str, workdir: str) -> ContextManager[dict[str, Any]]:
    """Options of a throw-away location for driver ``name``; see :meth:`Registry.conformance_environment`."""
    return get_registry().conformance_environment(name, workdir)
