"""Broker configs for the static-topic tests: three brokers (a, b, c) of one cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiered_core import StoreConfig


def broker_configs(root: Path, names=("a", "b", "c"), *, driver: str = "posix",
                   options: dict[str, Any] | None = None, **overrides: Any) -> list[StoreConfig]:
    """One StoreConfig per broker: its own store_path under ``root``; one shared tiered
    backend (``driver`` with ``options``; posix at ``root/tier`` by default) and cluster."""
    options = {"root": str(root / "tier")} if options is None else options
    return [StoreConfig.from_mapping({"store_path": str(root / name), "driver": driver, "cluster": "static-it",
                                      "broker": name, "options": dict(options), "read_ahead_cache_bytes": 0,
                                      **overrides})
            for name in names]
