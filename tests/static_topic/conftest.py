"""Three brokers (a, b, c) of one cluster on one POSIX tiered backend, in temporary directories."""

from __future__ import annotations

import pytest

from tiered_core import StoreConfig


def broker_configs(root, names=("a", "b", "c"), **overrides) -> list[StoreConfig]:
    """One StoreConfig per broker: own store_path, shared posix root and cluster."""
    return [StoreConfig.from_mapping({"store_path": str(root / name), "driver": "posix", "cluster": "static-it",
                                      "broker": name, "options": {"root": str(root / "tier")},
                                      "read_ahead_cache_bytes": 0, **overrides})
            for name in names]


@pytest.fixture
def configs(tmp_path) -> list[StoreConfig]:
    return broker_configs(tmp_path)
