"""The core's own metadata stores, registered through the ``tiered_core`` entry point
exactly as a third party's would be (``metadata = "tiered_core.metadata.plugin"``)."""

from __future__ import annotations

from typing import Callable

from tiered_core.spi.hookspecs import hookimpl
from tiered_core.metadata.json_store import JsonMetadataStore
from tiered_core.metadata.sqlite import SqliteMetadataStore


@hookimpl
def tiered_register_metadata_stores(register: Callable[[str, type], None]) -> None:
    register("sqlite", SqliteMetadataStore)
    register("json", JsonMetadataStore)
