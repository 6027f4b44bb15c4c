"""The hooks a tiered-store plugin may implement.

A plugin is a module named by an entry point in the group ``tiered_core``::

    [project.entry-points.tiered_core]
    mydriver = "tiered_driver_mine"

and marks its implementations with :data:`tiered_core.hookimpl`::

    from tiered_core import hookimpl

    @hookimpl
    def tiered_register_drivers(register):
        register(MyDriver)

Drivers and metadata stores register the same way: the host passes a ``register``
callable and the plugin calls ``register(cls)`` once per class it provides. The class
carries everything the registry needs: ``name`` (what config selects) and ``aliases``
(other names it answers to, e.g. RocketMQ class names). So a plugin can provide several
classes, and a name is declared in exactly one place, the class.

A third hook, :func:`tiered_conformance_environment`, gives the conformance suite (and
benchmarks) a throw-away location for a driver, starting whatever test server that
needs. It is test tooling: implementations import their launchers lazily, inside the
hook, so that production code never loads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ContextManager

import pluggy

PROJECT = "tiered_core"

hookspec = pluggy.HookspecMarker(PROJECT)
#: Marks a plugin's hook implementations.
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:
    from tiered_core.spi.driver import SegmentDriver
    from tiered_core.spi.metadata import TieredMetadataStore


@hookspec
def tiered_register_drivers(register: "Callable[[type[SegmentDriver]], None]") -> None:
    """Register :class:`~tiered_core.spi.driver.SegmentDriver` subclasses.

    :param register: call ``register(DriverClass)`` for each driver this plugin provides.
        The class's ``name`` and ``aliases`` are what config and ``open_driver`` select.
        A name (or alias) two plugins' classes claim is refused for both, whichever was
        loaded first, and both are reported as broken: one package can never silently
        replace another's driver. The core's own classes keep their names.
    """


@hookspec
def tiered_register_metadata_stores(register: "Callable[[type[TieredMetadataStore]], None]") -> None:
    """Register :class:`~tiered_core.spi.metadata.TieredMetadataStore` subclasses.

    :param register: call ``register(StoreClass)`` for each metadata store this plugin
        provides, exactly as for drivers: the class's ``name`` and ``aliases`` are what
        config's ``[tiered] metadata`` selects (e.g. the JSON store declares RocketMQ's
        ``DefaultMetadataStore``). Prove a store with
        ``tiered_conformance.MetadataStoreConformance``.
    """


@hookspec(firstresult=True)
def tiered_conformance_environment(driver_name: str, workdir: str) -> "ContextManager[dict[str, Any]] | None":
    """A throw-away test location for driver ``driver_name``, or None if not yours.

    Called by the conformance suite (``pytest --pyargs tiered_conformance --tiered-driver
    NAME``, ``tiered conformance NAME``) and the benchmarks before they open the driver.
    The first non-None answer wins.

    :param driver_name: the registered name of the driver under test (never an alias).
    :param workdir: a fresh scratch directory the environment may use (server data,
        files); it outlives the context manager.
    :return: a context manager whose ``__enter__`` starts what the location needs (an
        emulator, a bucket) and returns the driver options for it (as ``open_driver``
        takes them), and whose ``__exit__`` stops it; or None when this plugin does not
        provide ``driver_name``. A driver for which no plugin answers falls back to its
        class's ``conformance_environment(workdir)`` (empty options by default).

    Implementations must import their launchers inside the hook, so that loading the
    plugin to open a driver never loads test tooling. Example (the gcs driver's plugin
    module; its launcher lives in the driver distribution's ``emulator`` module)::

        @hookimpl
        def tiered_conformance_environment(driver_name, workdir):
            if driver_name != GcsDriver.name:
                return None
            from . import emulator  # test tooling: loaded only when asked
            return emulator.conformance_environment(workdir)
    """
