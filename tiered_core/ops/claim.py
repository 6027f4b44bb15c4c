"""Claiming a store's tier prefix for a job that writes it without opening the store
(Spark import, migrate, reindex, the streaming sink, ``tiered repair --apply``): the same
owner record a store writes at open, under the id of the store the job writes for, so a
re-run is the same owner and a live store of another id is refused
(:class:`~tiered_core.errors.PrefixOwned`). The store's recorded identity is checked
first, as a store's open checks it (:class:`~tiered_core.errors.IdentityMismatch`,
nothing written), and recorded when missing or when the tier was moved."""

from __future__ import annotations

import logging
import os
from typing import Any

from tiered_core.errors import TieredStoreError
from tiered_core.flat.ownership import OwnerRecord, PrefixOwnership, load_store_id, read_store_id
from tiered_core.metadata import open_metadata_read_only
from tiered_core.ops import identity as ids
from tiered_core.ops.reconcile import proves_sole_writer, reconcile

log = logging.getLogger(__name__)


def claim_store_prefix(config: Any, driver: Any) -> OwnerRecord:
    """Claim ``config``'s (cluster, broker) prefix in ``driver``'s backend as the store at
    ``config.store_path`` (whose id file is created if needed), after checking the identity
    recorded in that directory against ``config``. A recorded tier location that differs
    is accepted when the tier was moved to the configured one (:func:`moved_here`); the
    new location is then recorded."""
    identity = ids.StoreIdentity.of(config)
    recorded = ids.read_local(config.store_path) if os.path.isdir(config.store_path) else None
    found = ids.mismatches(identity, [(repr(ids.identity_path(config.store_path)), recorded)])
    if found:
        if not moved_here(config, driver, found):
            raise found[0].error(config)
        log.warning("store %s: the tier moved from %s to %s (it holds this store's owner record and every "
                    "segment its metadata lists): recording the new location", config.store_path,
                    found[0].recorded, found[0].configured)
    # Whether the claim can succeed is known before the directory gets an id: a refused job
    # must not leave a new id behind (the directory would pass for another store for good).
    store_id = read_store_id(config.store_path) if os.path.isdir(config.store_path) else None
    probe = PrefixOwnership(driver, config.cluster, config.broker, store_id or "", config.store_path)
    owner = probe.current()
    if store_id is None:
        store_id = ids.lost_id_file(config, owner)  # the id file alone was lost: the same store
    reclaim = owner is None and _lists_everything(config, driver)
    PrefixOwnership(driver, config.cluster, config.broker, store_id or "", config.store_path).check_claimable(
        owner, reclaim=reclaim)
    os.makedirs(config.store_path, exist_ok=True)
    store_id = load_store_id(config.store_path, restore=store_id)
    ownership = PrefixOwnership(driver, config.cluster, config.broker, store_id, config.store_path)
    record = ownership.claim(reclaim=reclaim)
    if recorded is None or found:
        ids.write_local(config.store_path, identity, store_id)
    return record


def _lists_everything(config: Any, driver: Any) -> bool:
    """Whether the store's metadata proves no other store wrote its prefix since
    (:func:`~tiered_core.ops.reconcile.proves_sole_writer`). Reads only."""
    try:
        metadata = open_metadata_read_only(config.metadata, config.effective_metadata_path())
    except TieredStoreError:
        return False
    try:
        return proves_sole_writer(driver, metadata, config.cluster,
                                  reconcile(driver, metadata, config.cluster, config.broker))
    finally:
        metadata.close()


def moved_here(config: Any, driver: Any, found: list[ids.Mismatch]) -> bool:
    """Whether ``found`` (the recorded identity's differences from ``config``) only says the
    tier moved, and the configured location proves it, as a store's open requires: it
    holds this store's owner record and every segment the store's metadata lists. Reads only."""
    store_id = read_store_id(config.store_path)
    if store_id is None or any(m.field != "tier" for m in found):
        return False
    owner = PrefixOwnership(driver, config.cluster, config.broker, store_id, config.store_path).current()
    if owner is None or owner.store_id != store_id:
        return False  # checked first: without the owner record the metadata is not read
    try:
        metadata = open_metadata_read_only(config.metadata, config.effective_metadata_path())
    except TieredStoreError:  # no proof: the identity mismatch stands
        return False
    try:
        report = reconcile(driver, metadata, config.cluster, config.broker)
    finally:
        metadata.close()
    return ids.tier_proves_move(store_id, owner, report)


__all__ = ["claim_store_prefix", "moved_here"]
