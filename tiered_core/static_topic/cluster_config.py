"""The cluster file: one TOML text describing the brokers of a cluster (see
:meth:`~tiered_core.static_topic.cluster.Cluster.load` and ``examples/cluster.toml``).
"""

from __future__ import annotations

import os
import tomllib

from tiered_core.config import StoreConfig, refuse_keys_outside_tables
from tiered_core.errors import ConfigError


def load_cluster_configs(path: str | os.PathLike) -> list[StoreConfig]:
    """The broker configs of a cluster TOML file (see :meth:`Cluster.load`)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"cluster file {path!r} does not exist", key="cluster", source=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read cluster file {path!r}: {exc}", key="cluster", source=path) from None
    return cluster_configs_from_text(text, os.path.dirname(os.path.abspath(path)), source=path)


def cluster_configs_from_text(text: str, base_dir: str, *, source: str = "<cluster text>") -> list[StoreConfig]:
    """The broker configs of a cluster TOML text (see :meth:`Cluster.load`); relative paths
    resolve against ``base_dir``."""
    path = source
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot read cluster file {path!r}: {exc}", key="cluster", source=path) from None
    refuse_keys_outside_tables(doc, path)
    shared = doc.get("tiered", {})
    brokers = doc.get("broker")
    if not isinstance(shared, dict) or not isinstance(brokers, list) or not brokers:
        raise ConfigError(f"{path}: needs a [tiered] table and at least one [[broker]] table", key="broker",
                          source=path)
    if not isinstance(shared.get("options", {}), dict):
        raise ConfigError(f"{path}: tiered.options must be a table ([tiered.options])", key="tiered.options",
                          source=path)
    out = []
    for i, table in enumerate(brokers):
        if not isinstance(table, dict) or "broker" not in table or "store_path" not in table:
            raise ConfigError(f"{path}: [[broker]] #{i + 1} needs 'broker' and 'store_path'", key="broker",
                              source=path)
        if not isinstance(table.get("options", {}), dict):
            raise ConfigError(f"{path}: options of [[broker]] #{i + 1} ({table['broker']!r}) must be a table "
                              "([broker.options])", key="broker.options", source=path)
        values = {**shared, **table}
        options = {**shared.get("options", {}), **table.get("options", {})}
        values["options"] = options
        out.append(StoreConfig.from_mapping(values, base_dir, source=f"{path} [[broker]] {table['broker']}"))
    return out
