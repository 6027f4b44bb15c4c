"""Checks of the local store directory, done before a store opens.

An unusable ``store_path`` (a file, a path below a file, a dangling symlink, a read-only
location) is a :class:`~tiered_core.errors.ConfigError` naming the path and the config
file, never a raw ``OSError`` from somewhere inside the open. So is a local tier ``root``
inside one of the directories the local store manages itself (its commit log, consume
queues, index, given-up history): the store moves and deletes what it finds there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tiered_core.access.continuity import GIVEN_UP_DIR, LOCAL_HISTORY_ENTRIES
from tiered_core.errors import ConfigError
from tiered_core.index.service import INDEX_DIR_NAME

if TYPE_CHECKING:
    from tiered_core.config import StoreConfig


def _where(config: "StoreConfig") -> str:
    return f" (config {config.source!r})" if config.source else ""


def check_store_path(config: "StoreConfig") -> None:
    """Raise :class:`ConfigError` (key ``store_path``) unless the store directory is usable.

    Usable: an existing directory this process may write and enter, or a path whose
    nearest existing ancestor is such a directory (so it can be created). A regular file,
    a path below a regular file, a dangling symlink or a read-only location is refused
    with the path named.
    """
    path = os.path.abspath(config.store_path)
    where = _where(config)

    def refuse(problem: str, **context: Any) -> ConfigError:
        return ConfigError(f"store_path {path!r}{where} {problem}", key="store_path", path=path,
                           source=config.source, **context)

    if os.path.lexists(path) and not os.path.exists(path):
        raise refuse("is a dangling symbolic link")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise refuse("is not a directory (it is a file)")
        target = path
    else:
        target = os.path.dirname(path)
        while not os.path.lexists(target):
            target = os.path.dirname(target)
        if not os.path.isdir(target):
            raise refuse(f"cannot be created: {target!r} is not a directory", blocking=target)
    if not os.access(target, os.W_OK | os.X_OK):
        what = "is" if target == path else f"cannot be created: {target!r} is"
        raise refuse(f"{what} not writable (the store keeps its lock, local files and metadata there)",
                     blocking=target)
    check_tier_root(config)


#: Entries of the local store directory that the local store itself manages (retention
#: deletes in them, a take-over moves them aside): no tier root may lie in one.
MANAGED_ENTRIES = (*LOCAL_HISTORY_ENTRIES, GIVEN_UP_DIR, INDEX_DIR_NAME)


def check_tier_root(config: "StoreConfig") -> None:
    """Raise :class:`ConfigError` (key ``options.root``) when the driver's local ``root``
    lies in one of :data:`MANAGED_ENTRIES` of ``store_path``."""
    root = config.driver_options.get("root")
    if not isinstance(root, str) or not root or "://" in root:
        return
    store = os.path.realpath(config.store_path)
    tier = os.path.realpath(root)
    inside = os.path.relpath(tier, store)
    first = inside.split(os.sep, 1)[0]
    if inside != "." and not inside.startswith("..") and first in MANAGED_ENTRIES:
        raise ConfigError(
            f"option root {root!r}{_where(config)} lies in {os.path.join(store, first)!r}, a directory the local "
            f"store manages itself (it deletes expired files there, and a take-over moves it aside with the "
            f"tier inside): give the tier a directory of its own, e.g. {os.path.join(store, 'tiered')!r} (the "
            "default) or one outside store_path", key="options.root", path=tier, source=config.source)


def make_store_dir(config: "StoreConfig") -> None:
    """:func:`check_store_path`, then create the directory (a failure is a ConfigError too)."""
    check_store_path(config)
    try:
        os.makedirs(config.store_path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"store_path {config.store_path!r}{_where(config)} cannot be created: "
                          f"{exc.strerror or exc}", key="store_path", path=config.store_path,
                          source=config.source) from None


__all__ = ["MANAGED_ENTRIES", "check_store_path", "check_tier_root", "make_store_dir"]
