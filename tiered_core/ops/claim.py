"""Claiming a store's tier prefix for a job that writes it without opening the store
(Spark import and migrate): the same owner record a store writes at open, under the id
of the store the job writes for, so a re-run is the same owner and a live store of
another id is refused (:class:`~tiered_core.errors.PrefixOwned`)."""

from __future__ import annotations

import os
from typing import Any

from tiered_core.flat.ownership import OwnerRecord, PrefixOwnership, load_store_id


def claim_store_prefix(config: Any, driver: Any) -> OwnerRecord:
    """Claim ``config``'s (cluster, broker) prefix in ``driver``'s backend as the store at
    ``config.store_path`` (whose id file is created if needed)."""
    os.makedirs(config.store_path, exist_ok=True)
    ownership = PrefixOwnership(driver, config.cluster, config.broker, load_store_id(config.store_path),
                                config.store_path)
    return ownership.claim()


__all__ = ["claim_store_prefix"]
