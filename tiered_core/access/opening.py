"""What a store checks before it writes anything at open, and what it records afterwards.

:func:`check_before_open` runs first and writes nothing anywhere -- no directory, file,
owner record or metadata row; the metadata is read through a private read-only copy:

1. the identity (:mod:`tiered_core.ops.identity`): the config's cluster, broker, driver and
   tier location against the records in the store directory and the metadata;
2. the owner of the tier prefix: another store's newest owner record refuses the open
   (:class:`~tiered_core.errors.PrefixOwned`) unless it is a take-over;
3. the metadata against the tier's listing: objects it does not list refuse the open
   (:class:`~tiered_core.errors.UnknownObjects`) unless it may rebuild.

An open refused by any of them leaves every place as it was. A writable open then creates
what it needs, claims the prefix, opens the metadata for writing (reusing the listing of
step 3) and calls :meth:`OpenChecks.record`, which writes the identity where it is missing
or out of date. A read-only open keeps the read-only copy as its metadata.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tiered_core.errors import IdentityMismatch, MetadataError, PrefixOwned
from tiered_core.flat.ownership import UNREADABLE_OWNER, OwnerRecord, PrefixOwnership, ReadOnlyDriver, read_store_id
from tiered_core.metadata import open_metadata_read_only
from tiered_core.ops import identity as ids
from tiered_core.ops.reconcile import ReconcileReport, metadata_refusal, proves_sole_writer, reconcile
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import TieredMetadataStore

if TYPE_CHECKING:
    from tiered_core.config import StoreConfig

log = logging.getLogger(__name__)


def rebuild_fix(config: "StoreConfig") -> str:
    """The command that rebuilds ``config``'s metadata from the backend (for a broker of a
    static topics' cluster file: its take-over, which rebuilds it and its mapping)."""
    member = cluster_member(config)
    if member is not None:
        return f"tiered static-topic takeover --cluster {member[0]} --broker {member[1]}"
    return f"tiered metadata rebuild --config {config.source or 'FILE'} --force"


def cluster_member(config: "StoreConfig") -> tuple[str, str] | None:
    """``(cluster file, broker)`` when ``config`` is a ``[[broker]]`` of a static topics'
    cluster file (its source reads ``FILE [[broker]] NAME``; the single-store commands
    refuse such a file), else None."""
    path, sep, broker = (config.source or "").partition(" [[broker]] ")
    return (path, broker) if sep and path and broker else None


@dataclass
class OpenChecks:
    """What :func:`check_before_open` found; ``metadata`` is its read-only copy (None when
    the metadata could not be read and the open may rebuild it)."""

    identity: ids.StoreIdentity
    store_id: str | None
    metadata: TieredMetadataStore | None
    report: ReconcileReport | None
    local: ids.StoreIdentity | None = None
    #: Mismatches the tier proved to be moves (recorded anew by a writable open).
    moved: list[ids.Mismatch] = field(default_factory=list)
    #: Whether the metadata lists everything the prefix holds: proof that a prefix whose owner
    #: records were deleted was written by no other store since (``PrefixOwnership.claim``).
    reclaim: bool = False

    def close(self) -> None:
        if self.metadata is not None:
            self.metadata.close()
            self.metadata = None

    def record(self, store_path: str, store_id: str, metadata: TieredMetadataStore) -> None:
        """After a writable open: record the identity in the store directory and in
        ``metadata`` where it is missing or out of date."""
        if self.local != self.identity:
            ids.write_local(store_path, self.identity, store_id)
        if ids.read_metadata(metadata) != self.identity or ids.metadata_store_id(metadata) != store_id:
            ids.write_metadata(metadata, self.identity, store_id)


def prefix_owner(config: "StoreConfig") -> "OwnerRecord | None":
    """The newest owner record of ``config``'s tier prefix (None: never claimed), read
    through a driver that refuses writes; what the driver raises when it cannot be read."""
    driver = ReadOnlyDriver(config.open_driver(), "reading the owner of a tier prefix")
    try:
        return PrefixOwnership(driver, config.cluster, config.broker, "", config.store_path).current()
    finally:
        driver.close()


def _with_takeover_fix(exc: PrefixOwned, config: "StoreConfig", *, lost: bool,
                       owner: OwnerRecord | None = None) -> PrefixOwned:
    """``exc`` with the take-over command for ``config`` spelled out (``--create`` when its
    store_path holds no store: a lost disk, or a failover to a new path)."""
    member = cluster_member(config)
    copied = lost and os.path.isdir(os.path.join(config.store_path, "commitlog"))
    if member is not None:
        command = f"tiered static-topic takeover --cluster {member[0]} --broker {member[1]}"
    else:
        command = f"tiered takeover --config {config.source or 'FILE'}" + (" --create" if lost and not copied else "")
    message = exc.message.replace("`tiered takeover --config FILE`", f"`{command}`")
    if copied:
        # a store directory without its id file whose owner record names another directory
        # or host: a copy or a move, which is another store (lost_id_file)
        message += (f". store_path {config.store_path!r} holds a store without its id file (tiered-store-id), "
                    "copied or moved from where the owner record says the owner lives: that makes it another "
                    "store. Take the prefix over only if the original is gone for good; its messages not yet "
                    "tiered are then set aside (kept under given-up-history/), not served")
        remembered = ids.recorded_store_id(config.store_path)
        if owner is not None and remembered == owner.store_id and owner.host == socket.gethostname() \
                and not os.path.exists(owner.store_path):
            # (re-drill 2, F6: a directory moved on this host keeps every message with its id back)
            message += (f". The owner's directory {owner.store_path!r} no longer exists on this host and this "
                        f"directory's identity record names the owner, store {owner.store_id}: if it was moved "
                        f"here, it is that store; write its id back instead and nothing is set aside: put "
                        f"{owner.store_id} into {os.path.join(config.store_path, 'tiered-store-id')!r}")
    elif lost:
        message += (f". store_path {config.store_path!r} holds no store: if it lost its disk, or this is a "
                    "failover to a new store_path, that command makes this the prefix's owner")
    return PrefixOwned(message, **{**exc.context, "fix": command})


def check_before_open(config: "StoreConfig", driver: SegmentDriver, *, take_over: bool = False,
                      read_only: bool = False) -> OpenChecks:
    """Every check that can refuse opening ``config``'s store, writing nothing (see the
    module doc). Raises :class:`IdentityMismatch`, :class:`PrefixOwned` (not when
    ``take_over`` or ``read_only``), :class:`UnknownObjects` or :class:`MetadataError`
    (not when the open may rebuild the metadata: a take-over or ``metadata_recovery =
    "rebuild"``, never read-only)."""
    identity = ids.StoreIdentity.of(config)
    store_dir = os.path.isdir(config.store_path)
    local = ids.read_local(config.store_path) if store_dir else None
    store_id = read_store_id(config.store_path) if store_dir else None
    metadata_path = config.effective_metadata_path()
    rebuild = not read_only and (take_over or config.metadata_recovery == "rebuild")
    try:
        metadata = open_metadata_read_only(config.metadata, metadata_path)
    except MetadataError as exc:
        if not rebuild or exc.context.get("cause"):  # (one in use or out of reach is not rebuilt)
            raise metadata_refusal(exc, metadata_path, rebuild_fix(config)) from exc
        metadata = None  # the writable open sets it aside and rebuilds it
    checks = OpenChecks(identity, store_id, metadata, None, local)
    try:
        recorded = ids.read_metadata(metadata) if metadata is not None else None
        local_where = repr(ids.identity_path(config.store_path))
        meta_where = f"the metadata {metadata_path!r}"
        brokers = ids.metadata_brokers(metadata) if metadata is not None and local is None and recorded is None \
            else set()
        found = ids.mismatches(identity, [(local_where, local), (meta_where, recorded)], brokers,
                               f"the queue records of {meta_where}")
        ownership = PrefixOwnership(driver, config.cluster, config.broker, store_id or "", config.store_path)
        owner = ownership.current()
        ownership.check_driver(owner)  # before any listing reads the prefix as this driver's segments
        if store_id is None and store_dir:
            store_id = checks.store_id = ids.lost_id_file(config, owner)
            if store_id is not None:
                ownership = PrefixOwnership(driver, config.cluster, config.broker, store_id, config.store_path)
        if read_only and store_id is not None and owner is not None and owner.store_id != store_id:
            if owner.store_id == UNREADABLE_OWNER:
                raise _with_takeover_fix(ownership.owned_by(owner), config, lost=False)  # (not a take-over)
            raise _taken_over(config, store_id, owner, ownership.prefix)
        recorded_id = ids.metadata_store_id(metadata) if metadata is not None else None
        if store_id is not None and recorded_id is not None and recorded_id != store_id and not take_over:
            raise ids.another_stores_metadata(config, store_id, recorded_id, meta_where)
        if metadata is not None:
            checks.report = reconcile(driver, metadata, config.cluster, config.broker)
        report = checks.report
        if found:
            if not ids.tier_proves_move(store_id, owner, report):
                raise found[0].error(config)
            checks.moved = found
            log.warning("store %s: %s; the tier at the configured location holds this store's owner record and "
                        "every segment its metadata lists, so the data moved there: %s", config.store_path,
                        "; ".join(f"{m.field} {m.recorded} -> {m.configured}" for m in found),
                        "recording the new identity" if not read_only else "reading it there")
        elif report is not None and local is None and recorded is None and report.missing \
                and report.listed == 0:
            raise _nothing_there(config, identity, report, meta_where)
        elif report is not None and owner is None and report.known and report.listed == 0 and not take_over:
            raise _another_backend(config, identity, report, meta_where)
        ownership.check_driver(owner)  # also for reads: another driver misreads the segments
        # (a prefix without owner records is claimed again only with proof no other store wrote
        # there since; only a writable open claims)
        checks.reclaim = not read_only and report is not None and (
            proves_sole_writer(driver, checks.metadata, config.cluster, report)
            if owner is None and checks.metadata is not None else not report.unknown)
        if not read_only:
            try:
                ownership.check_claimable(owner, take_over=take_over, reclaim=checks.reclaim)
            except PrefixOwned as exc:
                raise _with_takeover_fix(exc, config, lost=store_id is None, owner=owner) from None
        if report is not None and report.unknown and not rebuild:
            raise report.refusal(rebuild_fix(config))
    except BaseException:
        checks.close()
        raise
    return checks


def _taken_over(config: "StoreConfig", store_id: str, owner: "OwnerRecord", prefix: str) -> PrefixOwned:
    """A read-only open of a store whose tier prefix another store owns now: what it would
    read is stale (the owner wrote the tier since), and the metadata it would blame is not
    the cause. Names the owner, and where to read instead."""
    return PrefixOwned(
        f"tier prefix {prefix!r} is owned by {owner.describe()}: this store ({store_id} at {config.store_path!r}) "
        "was taken over, so its metadata and local directory no longer describe the tier. Nothing was read. "
        "Read the tier through the owner's config (its store_path is named above); do not take the prefix back "
        "while the owner runs (a take-over fences it)", prefix=prefix, owner=owner.describe(),
        owner_id=owner.store_id, store_id=store_id, store_path=config.store_path, read_only=True)


def _nothing_there(config: "StoreConfig", identity: ids.StoreIdentity, report: ReconcileReport,
                   meta_where: str) -> IdentityMismatch:
    """A store with no identity recorded (made before identities were) whose metadata lists
    segments of which the configured location holds none."""
    configured = f"cluster {identity.cluster!r}, driver {identity.driver!r}, {identity.value('tier')}"
    fix = ("set cluster, driver and the driver options back to the ones the store was created with, or, "
           "if the tier's objects are gone, rebuild the metadata from what is there with "
           f"`{rebuild_fix(config)}`")
    return IdentityMismatch(
        f"{meta_where} lists {report.known} tiered segment(s) of the store at store_path "
        f"{config.store_path!r}, but {report.prefix!r} of the configured tier ({configured}) holds none of "
        f"them (e.g. {report.missing[0]!r}): was the cluster name or the tier location changed? (The store "
        f"was created before stores recorded their identity.) Nothing was written. Fix: {fix}",
        field="tier", recorded="(not recorded)", configured=configured, record=meta_where,
        store_path=config.store_path, fix=fix)


def _another_backend(config: "StoreConfig", identity: ids.StoreIdentity, report: ReconcileReport,
                     meta_where: str) -> IdentityMismatch:
    """A store whose metadata lists tiered segments, opened on a backend that holds neither
    its prefix's owner record nor any of them: the identity names a bucket and prefix, not
    which service holds them (another endpoint, account or region with a bucket of the same
    name). A writable open would claim the empty prefix there and call every segment lost."""
    configured = f"driver {identity.driver!r}, {identity.value('tier')}"
    fix = ("point the driver options (endpoint, account, region, credentials) back at the backend the store "
           "tiered to; if that backend really lost the whole tier, `" + rebuild_fix(config) + "` makes the "
           "store continue from what is there")
    return IdentityMismatch(
        f"{meta_where} lists {report.known} tiered segment(s) of the store at store_path {config.store_path!r}, "
        f"but the configured backend ({configured}) holds neither the owner record of {report.prefix!r} nor any "
        f"of them (e.g. {report.missing[0]!r}): is it the backend the store tiered to? Nothing was written. "
        f"Fix: {fix}", field="tier", recorded=f"{report.known} segment(s) in the metadata",
        configured=configured, record=meta_where, store_path=config.store_path, fix=fix)


__all__ = ["OpenChecks", "check_before_open", "rebuild_fix"]
