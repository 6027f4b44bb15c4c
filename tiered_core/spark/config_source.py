"""A store (or cluster) configuration as text that travels from the Spark driver to executors,
and the read-only opening of a store's metadata every Spark source and job shares.

Executors may not see the driver's files: the configuration is carried as text (secrets
included, so it is never logged or shown in ``repr``). A Spark read never creates a store:
:func:`open_metadata_readonly` raises :class:`StoreNotReadable` when its metadata is missing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from tiered_core.errors import ConfigError, InvalidOption, NotFound, TieredStoreError

#: Formats a configuration given as text (option ``config_format``) may have.
CONFIG_FORMATS = ("toml", "properties")


@dataclass(frozen=True)
class ConfigSource:
    """A store configuration as text, so it can travel to executors (which may not see the file).

    ``text`` holds secrets (driver credentials): it is never logged or shown in ``repr``.
    """

    text: str
    fmt: str = "toml"
    base_dir: str = "."

    def __repr__(self) -> str:
        return f"ConfigSource(fmt={self.fmt!r}, base_dir={self.base_dir!r}, text=<{len(self.text)} chars>)"

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "ConfigSource":
        """Load ``path`` here (with ``TIERED_*`` overrides applied) and keep its full meaning as TOML."""
        from tiered_core.config import StoreConfig

        path = os.fspath(path)
        config = StoreConfig.load(path)
        return cls(config.to_toml(), "toml", os.path.dirname(os.path.abspath(path)))

    def load(self):
        """The :class:`~tiered_core.config.StoreConfig` (no environment overrides: they were applied
        where the file was read)."""
        from tiered_core.config import StoreConfig

        return StoreConfig.from_text(self.text, self.fmt, self.base_dir)


@dataclass(frozen=True)
class ClusterSource:
    """A cluster TOML (static topics) as text, so it can travel to executors."""

    text: str
    base_dir: str

    def __repr__(self) -> str:
        return f"ClusterSource(base_dir={self.base_dir!r}, text=<{len(self.text)} chars>)"

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "ClusterSource":
        """The cluster file ``path`` read here; :class:`ConfigError` naming it when it cannot be read."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigError(f"cannot read cluster file {path!r}: {exc}", key="cluster", source=path) from None
        return cls(text, os.path.dirname(os.path.abspath(path)))

    def configs(self):
        from tiered_core.static_topic import cluster_configs_from_text

        return cluster_configs_from_text(self.text, self.base_dir)


def config_source(options: Mapping[str, Any]) -> ConfigSource:
    """The configuration named by the options: ``config`` (or ``path``), a file read here, or
    ``config_text`` (+ ``config_format``, ``config_base_dir``) given inline."""
    opts = {str(k).lower(): v for k, v in options.items()}
    text = opts.get("config_text")
    path = opts.get("config") or opts.get("path")
    if text and path:
        raise InvalidOption("give option 'config' (a file) or option 'config_text', not both", option="config")
    if text:
        fmt = str(opts.get("config_format") or "toml")
        if fmt not in CONFIG_FORMATS:
            raise InvalidOption(f"option 'config_format' of data source 'tiered' must be 'toml' or 'properties', "
                                f"got {fmt!r}", option="config_format", value=fmt)
        return ConfigSource(str(text), fmt, str(opts.get("config_base_dir") or os.getcwd()))
    if not path:
        raise InvalidOption("data source 'tiered' needs option 'config' (the store's tiered.toml or broker.conf)",
                            option="config")
    return ConfigSource.from_file(str(path))


def require_shared_backend(config, role: str = "store") -> None:
    """Spark tasks run in other processes than the one that plans them: a backend whose bytes
    live inside one process (the memory driver) cannot be used. Raises :class:`ConfigError`."""
    from tiered_core.plugins import driver_class

    if not driver_class(config.driver).outlives_process(config.effective_driver_options()):
        raise ConfigError(f"{config.source or 'config'}: the {role}'s driver {config.driver!r} keeps its bytes "
                          "inside one process, and Spark tasks run in others; use a shared backend "
                          "(posix, gcs, azure...)", key="driver", source=config.source)


class StoreNotReadable(NotFound):
    """A Spark read (the data source, the stream source, ``tiered spark export``) named a store
    whose metadata does not exist. Nothing was created: Spark reads never write a store."""

    def __init__(self, config) -> None:
        path = config.effective_metadata_path()
        where = f" (config {config.source!r})" if config.source else ""
        TieredStoreError.__init__(
            self, f"no tiered store to read at store_path {config.store_path!r}{where}: its metadata file "
                  f"{path!r} does not exist. Spark reads a store and never creates one: check the config's "
                  "store_path and metadata_path; if the tier still holds the data, `tiered metadata rebuild "
                  "--config FILE` rebuilds the metadata", path=path, key="metadata_path",
            store_path=config.store_path, source=config.source)


def open_metadata_readonly(config):
    """``config``'s metadata store opened read-only (nothing is created or written);
    :class:`StoreNotReadable` when it does not exist."""
    from tiered_core.metadata import open_metadata_for_reading

    try:
        return open_metadata_for_reading(config.metadata, config.effective_metadata_path())
    except NotFound:
        raise StoreNotReadable(config) from None


__all__ = ["CONFIG_FORMATS", "ClusterSource", "ConfigSource", "StoreNotReadable", "config_source",
           "open_metadata_readonly", "require_shared_backend"]
