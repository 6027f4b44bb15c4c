"""The hooks a tiered-store plugin may implement.

A plugin is a module named by an entry point in the group ``tiered_core``::

    [project.entry-points.tiered_core]
    mydriver = "tiered_driver_mine"

and marks its implementations with :data:`tiered_core.hookimpl`::

    from tiered_core import hookimpl

    @hookimpl
    def tiered_register_drivers(register):
        register(MyDriver)

Hooks use the register-callback pattern: the host passes a callable and the plugin
calls it once per thing it provides, so a plugin can provide several.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

PROJECT = "tiered_core"

hookspec = pluggy.HookspecMarker(PROJECT)
#: Marks a plugin's hook implementations.
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:
    from tiered_core.spi.driver import SegmentDriver


@hookspec
def tiered_register_drivers(register: "Callable[[type[SegmentDriver]], None]") -> None:
    """Register :class:`~tiered_core.spi.driver.SegmentDriver` subclasses.

    :param register: call ``register(DriverClass)`` for each driver this plugin provides.
        The class's ``name`` and ``aliases`` are what config and ``open_driver`` select.
    """


@hookspec
def tiered_register_metadata_stores(register: "Callable[[str, type], None]") -> None:
    """Register metadata store classes.

    :param register: call ``register(name, StoreClass)`` for each
        :class:`~tiered_core.spi.metadata.TieredMetadataStore` this plugin provides.
    """
