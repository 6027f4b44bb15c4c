"""The core's own metadata stores: a built-in plugin, registered directly by the registry
(:data:`tiered_core.plugins.BUILTIN_PLUGINS`), through the same hook and the same
``register(cls)`` as a third party's stores."""

from __future__ import annotations

from typing import Callable

from tiered_core.metadata.json_store import JsonMetadataStore
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.spi.hookspecs import hookimpl
from tiered_core.spi.metadata import TieredMetadataStore


@hookimpl
def tiered_register_metadata_stores(register: Callable[[type[TieredMetadataStore]], None]) -> None:
    register(SqliteMetadataStore)
    register(JsonMetadataStore)
