"""``tiered verify``: who owns the tier prefix (read-only).

The newest owner record under ``{prefix}.tiered-owner/`` owns the prefix
(``tiered_core/flat/ownership.py``). Verify reads it and compares its store id with the id
of the store in ``store_path`` (``tiered-store-id``; never created here):

* no record: OWNER_MISSING (the next open, or repair, claims it);
* the newest record cannot be read or decoded: OWNER_UNREADABLE;
* a record of another store id: OWNER_OTHER. When ``store_path`` holds no store id (the tier
  verified without its local store) nothing can be compared and no finding is made.

Every finding's ``facts`` hold the record (``owner``) and the epochs found.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tiered_core.errors import TieredStoreError
from tiered_core.flat.ownership import OwnerRecord, owner_prefix, tier_prefix
from tiered_core.ops.findings import Finding, FindingKind
from tiered_core.spi.driver import SegmentDriver

_UNREADABLE = "(unreadable)"


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


__all__ = ["ownership_findings", "read_owner"]
