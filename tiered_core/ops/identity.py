"""A store's identity: the cluster, broker, backend and tier location it was created with.

Tiered paths hold the cluster and broker names, and the driver and its location options
say where those paths are. A store opened under another name or location would read empty
queues where its tiered messages are (a consumer told ``OFFSET_TOO_SMALL`` skips them) and
put new ones where no later open finds them. So a store records its identity and an open
with another one is refused -- :class:`~tiered_core.errors.IdentityMismatch` naming the
field, the recorded and the configured value and the fix -- before anything is written.

**Where it is recorded.** In the local store directory, ``{store_path}/tiered-store-identity.json``
(beside ``tiered-store-id``; it also holds the store id), and in the metadata database, the
store property ``store.identity``. Neither is authoritative over the other: the config must
match every record that exists. Two records that disagree mean a ``store_path`` and a
metadata database of different stores were put together, and the open is refused naming
the record that differs. When only one exists (a lost local disk with the metadata
elsewhere, or a rebuilt or new metadata database) it is checked, and the first writable open
copies it to the other place. When neither exists -- a new store, or one created before
identities were recorded -- the metadata's queue records (they name their broker) are
checked, and the first writable open records the config's identity.

**A move the tier proves.** When the configured location holds this store's owner record
(the same store id) and every segment the metadata lists, the data is there: a recorded
identity that differs is out of date (a tier root moved with its objects, a store directory
restored elsewhere with its default root), and the writable open records the new one.

Never a secret: the location is what the driver declares with ``location_options`` (a root,
a bucket and prefix, a container and prefix), see :meth:`SegmentDriver.location`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from tiered_core.common import fsync_dir, now_ms
from tiered_core.errors import IdentityMismatch, StateConflict
from tiered_core.spi.metadata import TieredMetadataStore

if TYPE_CHECKING:
    from tiered_core.flat.ownership import OwnerRecord
    from tiered_core.ops.reconcile import ReconcileReport

log = logging.getLogger(__name__)

#: File in the local store directory holding the store's identity (JSON).
IDENTITY_FILE = "tiered-store-identity.json"
#: Store property of the metadata database holding the store's identity (JSON).
IDENTITY_PROPERTY = "store.identity"
#: The fields of an identity, in the order they are checked.
FIELDS = ("cluster", "broker", "driver", "tier")


@dataclass(frozen=True)
class StoreIdentity:
    """Who a store is: ``cluster`` and ``broker`` (the first two components of its tiered
    paths), ``driver`` (the backend's name) and ``tier`` (where in the backend: the
    driver's location options, normalised; never a secret)."""

    cluster: str
    broker: str
    driver: str
    tier: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, config: Any) -> "StoreIdentity":
        """The identity a :class:`~tiered_core.config.StoreConfig` describes."""
        from tiered_core.plugins import driver_class

        backend, where = driver_class(config.driver).location(config.effective_driver_options())
        return cls(config.cluster, config.broker, backend, tuple(sorted(where.items())))

    def value(self, field: str) -> str:
        """``field``'s value as shown in errors (``tier`` as ``option='value', ...``)."""
        if field == "tier":
            return ", ".join(f"{k}={v!r}" for k, v in self.tier) or "(the driver declares no location)"
        return getattr(self, field)

    def differences(self, other: "StoreIdentity") -> list[str]:
        """The fields in which ``other`` differs, in :data:`FIELDS` order (a different driver
        makes the tier incomparable: only ``driver`` is named then)."""
        fields = [f for f in FIELDS if getattr(self, f) != getattr(other, f)]
        return ["driver"] if "driver" in fields else fields

    def to_json(self, **extra: Any) -> str:
        return json.dumps({"cluster": self.cluster, "broker": self.broker, "driver": self.driver,
                           "tier": dict(self.tier), **extra}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> "StoreIdentity":
        """Parse a record; :class:`StateConflict` naming ``where`` when it is not one."""
        try:
            raw = json.loads(text)
            tier = raw["tier"]
            if not isinstance(tier, dict) or not all(isinstance(raw[k], str) for k in ("cluster", "broker", "driver")):
                raise TypeError("bad field types")
            return cls(raw["cluster"], raw["broker"], raw["driver"],
                       tuple(sorted((str(k), str(v)) for k, v in tier.items())))
        except (ValueError, KeyError, TypeError) as exc:
            raise StateConflict(f"the store identity recorded in {where} cannot be read ({exc}); it is not "
                                "changed. Restore it from a backup, or move it aside to have the config's "
                                "identity recorded again", path=where) from None


# -- the records ---------------------------------------------------------------------------

def identity_path(store_path: str) -> str:
    return os.path.join(store_path, IDENTITY_FILE)


def read_local(store_path: str) -> StoreIdentity | None:
    """The identity recorded in ``store_path``, or None (no record there)."""
    path = identity_path(store_path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateConflict(f"cannot read the store identity file {path!r}: {exc}", path=path) from None
    return StoreIdentity.from_json(text, repr(path))


def recorded_store_id(store_path: str) -> str | None:
    """The store id the identity record in ``store_path`` names (None: no record, or none in it)."""
    try:
        with open(identity_path(store_path), encoding="utf-8") as fh:
            value = json.loads(fh.read()).get("store_id")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def write_local(store_path: str, identity: StoreIdentity, store_id: str) -> None:
    """Record ``identity`` in ``store_path`` durably (temp file, fsync, rename, directory fsync)."""
    path = identity_path(store_path)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    data = (identity.to_json(store_id=store_id, recorded_at=now_ms()) + "\n").encode()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(store_path)
    except OSError as exc:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise StateConflict(f"cannot record the store identity in {path!r}: {exc.strerror or exc}",
                            path=path) from None


def read_metadata(metadata: TieredMetadataStore) -> StoreIdentity | None:
    """The identity recorded in ``metadata``, or None (none, or a store without properties)."""
    if not keeps_properties(metadata):
        return None
    text = metadata.get_property(IDENTITY_PROPERTY)
    if text is None:
        return None
    return StoreIdentity.from_json(text, f"metadata store {getattr(metadata, 'path', '?')!r} "
                                         f"(property {IDENTITY_PROPERTY!r})")


def write_metadata(metadata: TieredMetadataStore, identity: StoreIdentity, store_id: str | None = None) -> None:
    """Record ``identity`` (and the id of the store it belongs to) in ``metadata`` (a store
    that keeps no properties is skipped, logged)."""
    if not keeps_properties(metadata):
        log.warning("metadata store %r keeps no store properties: the store identity is recorded only "
                    "in the store directory", getattr(metadata, "path", metadata))
        return
    metadata.set_property(IDENTITY_PROPERTY, identity.to_json(**({"store_id": store_id} if store_id else {})))


def metadata_store_id(metadata: TieredMetadataStore) -> str | None:
    """The id of the store whose identity ``metadata`` records (None: none recorded, as in
    metadata written before the id was recorded there)."""
    if not keeps_properties(metadata):
        return None
    try:
        value = json.loads(metadata.get_property(IDENTITY_PROPERTY) or "{}").get("store_id")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def another_stores_metadata(config: Any, store_id: str, recorded_id: str, where: str) -> IdentityMismatch:
    """The refusal of a metadata database that records another store's id than the store
    directory's: one store's database put in another's place (a copied file, a wrong
    metadata_path). Rebuilding it from this store's tier is the fix."""
    fix = (f"put this store's own metadata database back (from a backup), or rebuild it from the tier with "
           f"`tiered metadata rebuild --config {config.source or 'FILE'} --force`")
    return IdentityMismatch(
        f"{where} belongs to store {recorded_id}, but the store at store_path {config.store_path!r} is store "
        f"{store_id}: a metadata database of another store was put in this store's place. Its segment records "
        f"describe that store's tier, not this one. Nothing was written. Fix: {fix}", field="store_id",
        recorded=recorded_id, configured=store_id, record=where, store_path=config.store_path, fix=fix)


def keeps_properties(metadata: TieredMetadataStore) -> bool:
    """Whether ``metadata``'s class implements store properties (the SPI's defaults raise)."""
    return type(metadata).get_property is not TieredMetadataStore.get_property


def metadata_brokers(metadata: TieredMetadataStore) -> set[str]:
    """The broker names the metadata's queue records carry (empty ones left out)."""
    return {q.broker_name for q in metadata.iterate_queues() if q.broker_name}


# -- the check -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Mismatch:
    """One field in which a record differs from the config."""

    field: str
    recorded: str
    configured: str
    record: str  # where it is recorded

    def error(self, config: Any) -> IdentityMismatch:
        """The :class:`IdentityMismatch` an open refused over this mismatch raises."""
        source = f" (config {config.source!r})" if getattr(config, "source", None) else ""
        where = config.source or "the config"
        why, fix = _WHY_AND_FIX[self.field]
        fix = fix.format(recorded=self.recorded, where=where, env=f"TIERED_{self.field.upper()}")
        label = "tier location" if self.field == "tier" else self.field
        return IdentityMismatch(
            f"the store at store_path {config.store_path!r} was created with {label} {self.recorded} "
            f"(recorded in {self.record}) but is opened with {label} {self.configured}{source}. {why} "
            f"Nothing was written. Fix: {fix}",
            field=self.field, recorded=self.recorded, configured=self.configured, record=self.record,
            store_path=config.store_path, fix=fix)


_NEW_PLACE = "or, for a new store under the new one, use another store_path (and metadata_path)"
_WHY_AND_FIX = {
    "cluster": ("Tiered paths begin with the cluster name: under another one the store finds none of its "
                "tiered messages (a consumer would skip them) and strands new ones.",
                "set cluster = {recorded} back (in {where}; or its override {env}), " + _NEW_PLACE),
    "broker": ("Tiered paths hold the broker name: under another one the store finds none of its tiered "
               "messages (a consumer would skip them) and strands new ones.",
               "set broker = {recorded} back (in {where}; or its override {env}), " + _NEW_PLACE),
    "driver": ("The store's tiered messages are in that backend.",
               "set driver = {recorded} back (in {where}; or its override {env}); to move the data to "
               "another backend, `tiered spark migrate` it to a new store"),
    "tier": ("The store's tiered messages are at that location.",
             "set the driver option(s) back to {recorded} (in {where}; or the TIERED_OPTION_<NAME> overrides), "
             + _NEW_PLACE + "; a location the tier's objects were moved to is accepted once it holds them "
             "with this store's owner record (.tiered-owner/)"),
}


def mismatches(configured: StoreIdentity, records: Iterable[tuple[str, StoreIdentity | None]],
               brokers: set[str] | None = None, brokers_record: str = "") -> list[Mismatch]:
    """Every field in which a record of ``records`` (``(where, identity or None)``) differs from
    ``configured``; with no record at all, the metadata's queue ``brokers`` are the evidence
    (a configured broker none of them names is a mismatch)."""
    found: list[Mismatch] = []
    any_record = False
    for where, recorded in records:
        if recorded is None:
            continue
        any_record = True
        for field in configured.differences(recorded):
            found.append(Mismatch(field, _shown(recorded, field), _shown(configured, field), where))
    if not any_record and brokers and configured.broker not in brokers:
        shown = ", ".join(repr(b) for b in sorted(brokers))
        found.append(Mismatch("broker", shown if len(brokers) > 1 else repr(next(iter(brokers))),
                              repr(configured.broker), brokers_record))
    return found


def tier_proves_move(store_id: str | None, owner: "OwnerRecord | None",
                     report: "ReconcileReport | None") -> bool:
    """Whether the configured tier location proves the data moved there (module doc): it
    holds the owner record of this store (``store_id``, from the store directory) and the
    reconcile of its listing against the metadata (``report``) found every listed segment,
    at least one, none shorter than the metadata records. Used by a store's open and by a writer job's prefix claim alike."""
    return (store_id is not None and owner is not None and owner.store_id == store_id
            and report is not None and report.known > 0 and not report.missing and not report.short)


def lost_id_file(config: Any, owner: "OwnerRecord | None") -> str | None:
    """The id of the store whose directory lost only its id file: its identity record names
    the store the tier prefix's owner record names, claimed from this directory on this host
    (None otherwise). A writable open writes
    the id file again; without it the directory would pass for a new store, and following
    the take-over that error suggests would set its untiered messages aside and hand their
    offsets out again."""
    remembered = recorded_store_id(config.store_path)
    if remembered is None or owner is None or owner.store_id != remembered:
        return None
    # ...and claimed it from this very directory on this host: a replica of the directory
    # (a failover to another store_path) is another store, which takes the prefix over
    if owner.host != socket.gethostname() or os.path.abspath(owner.store_path) != os.path.abspath(config.store_path):
        return None
    log.warning("store %s: the store id file is missing, but its identity record and the owner record of the tier "
                "prefix both name store %s: this is that store (a writable open writes its id file again)",
                config.store_path, remembered)
    return remembered


def _shown(identity: StoreIdentity, field: str) -> str:
    value = identity.value(field)
    return value if field == "tier" else repr(value)


__all__ = [
    "FIELDS",
    "IDENTITY_FILE",
    "IDENTITY_PROPERTY",
    "Mismatch",
    "StoreIdentity",
    "identity_path",
    "keeps_properties",
    "lost_id_file",
    "metadata_brokers",
    "metadata_store_id",
    "another_stores_metadata",
    "mismatches",
    "read_local",
    "read_metadata",
    "tier_proves_move",
    "write_local",
    "write_metadata",
]
