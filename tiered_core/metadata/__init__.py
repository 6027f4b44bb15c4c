"""Metadata stores: SQLite (default) and RocketMQ's ``tieredStoreMetadata.json``.

Stores are found through the plugin registry (``tiered_register_metadata_stores``),
so a third-party store is chosen by name exactly like these two.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tiered_core.metadata.json_store import JsonMetadataStore
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.spi.metadata import TieredMetadataStore

#: The store used when the configuration names none.
DEFAULT_STORE = "sqlite"


def metadata_store_class(name: str) -> type[TieredMetadataStore]:
    """The store class registered as ``name``; raises UnknownDriver listing the installed ones."""
    from tiered_core.plugins import get_registry

    return get_registry().metadata_store_class(name)


def open_metadata_store(name: str, path: str, **options: Any) -> TieredMetadataStore:
    """Open (or create) the metadata store ``name`` at ``path``.

    Raises :class:`~tiered_core.errors.UnknownDriver` for an unknown name,
    :class:`~tiered_core.errors.InvalidOption` naming a bad option and
    :class:`~tiered_core.errors.MetadataError` naming an unreadable file.
    """
    return metadata_store_class(name)(path, **options)


def open_metadata_read_only(name: str, path: str, **options: Any) -> TieredMetadataStore:
    """The metadata store ``name`` at ``path`` opened read-only: a private in-memory copy
    (the store class's ``open_read_only``) that nothing written to it ever leaves. Opening
    it creates nothing; a missing file reads as an empty store.

    Raises :class:`~tiered_core.errors.MetadataError` for a store class without
    ``open_read_only`` (it cannot promise not to write), and as :func:`open_metadata_store`.
    """
    from tiered_core.errors import MetadataError

    cls = metadata_store_class(name)
    opener = getattr(cls, "open_read_only", None)
    if opener is None:
        raise MetadataError(f"metadata store {name!r} ({cls.__module__}.{cls.__qualname__}) cannot be opened "
                            f"read-only (it has no open_read_only), so a read-only command cannot use {path!r}",
                            path=path, store=name)
    return opener(path, **options)


def open_metadata_for_reading(name: str, path: str, **options: Any) -> TieredMetadataStore:
    """Open the existing metadata store ``name`` at ``path`` for reading it in place (Spark's
    readers: no copy, unlike :func:`open_metadata_read_only`, whose private copy takes
    recovery's writes).

    Nothing is created: a missing file raises :class:`~tiered_core.errors.NotFound` naming
    the path (a JSON store's ``.bak`` counts, as that store loads it). A store class with an
    ``open_for_reading`` constructor (SQLite: :meth:`SqliteMetadataStore.open_for_reading`) refuses
    every write; another one is opened normally (its file exists, so opening creates nothing).
    """
    from tiered_core.errors import NotFound

    if not (os.path.isfile(path) or os.path.isfile(path + ".bak")):
        raise NotFound(path, "does not exist (the metadata store is opened read-only and never created)")
    cls = metadata_store_class(name)
    opener = getattr(cls, "open_for_reading", None)
    return opener(path, **options) if callable(opener) else cls(path, **options)


def set_aside(path: str) -> list[str]:
    """Move a damaged metadata file (and SQLite's ``-wal``/``-shm`` companions) out of the way,
    to ``{name}.damaged-{ms}``; nothing is deleted. Returns the new paths."""
    stamp = time.time_ns() // 1_000_000
    moved = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        src = path + suffix
        if os.path.exists(src):
            dst = f"{path}.damaged-{stamp}{suffix}"
            os.replace(src, dst)
            moved.append(dst)
    return moved


__all__ = [
    "set_aside",
    "DEFAULT_STORE",
    "JsonMetadataStore",
    "SqliteMetadataStore",
    "metadata_store_class",
    "open_metadata_read_only",
    "open_metadata_store",
    "open_metadata_for_reading",
]
