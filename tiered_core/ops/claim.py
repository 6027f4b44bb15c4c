"""Claiming a store's tier prefix for a job that writes it without opening the store
(Spark import, migrate, reindex, the streaming sink): the same owner record a store writes
at open, under the id of the store the job writes for, so a re-run is the same owner and a
live store of another id is refused (:class:`~tiered_core.errors.PrefixOwned`). The store's
recorded identity is checked first, as a store's open checks it
(:class:`~tiered_core.errors.IdentityMismatch`, nothing written), and recorded when missing."""

from __future__ import annotations

import os
from typing import Any

from tiered_core.flat.ownership import OwnerRecord, PrefixOwnership, load_store_id
from tiered_core.ops import identity as ids


def claim_store_prefix(config: Any, driver: Any) -> OwnerRecord:
    """Claim ``config``'s (cluster, broker) prefix in ``driver``'s backend as the store at
    ``config.store_path`` (whose id file is created if needed), after checking the identity
    recorded in that directory against ``config``."""
    identity = ids.StoreIdentity.of(config)
    recorded = ids.read_local(config.store_path) if os.path.isdir(config.store_path) else None
    found = ids.mismatches(identity, [(repr(ids.identity_path(config.store_path)), recorded)])
    if found:
        raise found[0].error(config)
    os.makedirs(config.store_path, exist_ok=True)
    store_id = load_store_id(config.store_path)
    ownership = PrefixOwnership(driver, config.cluster, config.broker, store_id, config.store_path)
    record = ownership.claim()
    if recorded is None:
        ids.write_local(config.store_path, identity, store_id)
    return record


__all__ = ["claim_store_prefix"]
