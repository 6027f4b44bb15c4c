"""``tiered verify``: who owns the tier prefix (read-only).

The newest owner record under ``{prefix}.tiered-owner/`` owns the prefix
(``tiered_core/flat/ownership.py``). Verify reads it and compares its store id with the id
of the store in ``store_path`` (``tiered-store-id``; never created here):

* no record: OWNER_MISSING (the next open, or repair, claims it);
* the newest record cannot be read or decoded: OWNER_UNREADABLE;
* a record of another store id: OWNER_OTHER. When ``store_path`` holds no store id (the tier
  verified without its local store) nothing can be compared and no finding is made.

Every finding's ``facts`` hold the record (``owner``) and the epochs found.

Before any of that, :func:`identity_findings` asks whether the config describes the store
in ``store_path`` at all (``tiered_core/ops/identity.py``: the cluster, broker, driver and
tier location it was created with): a renamed broker's config points verify at an empty
prefix, where "no owner" and "nothing tiered yet" would be true and misleading.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tiered_core.errors import TieredStoreError
from tiered_core.flat.ownership import UNREADABLE_OWNER, OwnerRecord, owner_prefix, tier_prefix
from tiered_core.ops import identity
from tiered_core.ops.findings import Finding, FindingKind
from tiered_core.spi.metadata import TieredMetadataStore
from tiered_core.spi.driver import SegmentDriver

_UNREADABLE = UNREADABLE_OWNER


def read_owner(driver: SegmentDriver, cluster: str, broker: str) -> tuple[OwnerRecord | None, list[int], str | None]:
    """``(newest record or None, every epoch found, why the newest cannot be read or None)``."""
    epochs: dict[int, str] = {}
    for path, _size in driver.list(owner_prefix(cluster, broker)):
        name = path.rsplit("/", 1)[-1]
        if name.isdigit():
            epochs[int(name)] = path
    if not epochs:
        return None, [], None
    newest = max(epochs)
    try:
        size = driver.size(epochs[newest])
        data = driver.read(epochs[newest], 0, size) if size else b""
    except TieredStoreError as exc:
        return OwnerRecord(_UNREADABLE, newest), sorted(epochs), f"reading it failed: {exc.message}"
    record = OwnerRecord.decode(data, newest)
    why = None
    if record.store_id == _UNREADABLE:
        why = f"its {len(data)} bytes are not an owner record"
    elif record.epoch != newest:
        why = f"it names epoch {record.epoch}, its name epoch {newest}"
    return record, sorted(epochs), why


def ownership_findings(driver: SegmentDriver, cluster: str, broker: str, store_id: str | None) -> list[Finding]:
    """The ownership findings of the prefix of (``cluster``, ``broker``) for the store
    whose id is ``store_id`` (None: unknown, see the module doc). Reads only."""
    prefix = tier_prefix(cluster, broker)
    record, epochs, why = read_owner(driver, cluster, broker)
    facts: dict[str, Any] = {"epochs": epochs, "store_id": store_id}
    if record is None:
        return [Finding(FindingKind.OWNER_MISSING, prefix,
                        f"no owner record under {owner_prefix(cluster, broker)}: no store has claimed the prefix",
                        facts=facts)]
    facts["owner"] = asdict(record)
    if why is not None:
        return [Finding(FindingKind.OWNER_UNREADABLE, prefix,
                        f"the newest owner record (epoch {record.epoch}) cannot be read: {why}", facts=facts)]
    if store_id is not None and record.store_id != store_id:
        return [Finding(FindingKind.OWNER_OTHER, prefix,
                        f"the prefix is owned by {record.describe()}; this store is {store_id}",
                        facts=facts)]
    return []


def identity_findings(config: Any, driver: SegmentDriver, metadata: TieredMetadataStore,
                      store_id: str | None) -> list[Finding]:
    """IDENTITY_MISMATCH findings, one per field in which the store's records (its
    directory's identity file, its metadata) differ from ``config``; none when they agree
    or nothing is recorded. A tier location that differs is no finding when the configured
    location holds this store's owner record (the tier was moved, as the store's open
    accepts; any readable record when ``store_id`` is None). Reads only."""
    configured = identity.StoreIdentity.of(config)
    records = [(repr(identity.identity_path(config.store_path)), identity.read_local(config.store_path)),
               (f"metadata store {getattr(metadata, 'path', '?')!r}", identity.read_metadata(metadata))]
    recorded_id = identity.metadata_store_id(metadata)
    if store_id is not None and recorded_id is not None and recorded_id != store_id:
        where = f"metadata store {getattr(metadata, 'path', '?')!r}"
        err = identity.another_stores_metadata(config, store_id, recorded_id, where)
        return [Finding(FindingKind.IDENTITY_MISMATCH, config.store_path,
                        f"{where} belongs to store {recorded_id}, not to this store ({store_id}): its segment records "
                        "describe another store's tier", facts={"field": "store_id", "recorded": recorded_id,
                                                                 "configured": store_id, "record": where},
                        fix_text=err.context.get("fix"))]
    found = identity.mismatches(configured, records, identity.metadata_brokers(metadata),
                                f"the queue records of metadata store {getattr(metadata, 'path', '?')!r}")
    if found and all(m.field == "tier" for m in found):
        # moved: the configured location holds an owner record of this store (any readable
        # one when store_path holds no store id: the tier verified without its local store)
        record, _epochs, why = read_owner(driver, config.cluster, config.broker)
        if record is not None and why is None and store_id in (None, record.store_id):
            return []
    out = []
    seen: set[str] = set()
    for m in found:
        if m.field in seen:  # recorded alike in the directory and the metadata: one finding
            continue
        seen.add(m.field)
        err = m.error(config)
        label = "tier location" if m.field == "tier" else m.field
        out.append(Finding(FindingKind.IDENTITY_MISMATCH, config.store_path,
                           f"the store was created with {label} {m.recorded} (recorded in {m.record}) but the "
                           f"config names {label} {m.configured}: its tier is not where this config looks",
                           facts={"field": m.field, "recorded": m.recorded, "configured": m.configured,
                                  "record": m.record},
                           fix_text=err.context.get("fix")))
    return out


__all__ = ["identity_findings", "ownership_findings", "read_owner"]
