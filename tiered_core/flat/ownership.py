"""Ownership of a tier prefix: one store at a time writes under ``{cluster}/{broker}/``.

Two stores configured with the same tiered backend, cluster and broker name (a
copy-pasted config, a failover that forgot to stop the old broker) would otherwise
append to, roll over and expire each other's segments. A store therefore *claims* its
prefix before it touches it, with an owner record created by the backend's atomic
create-if-absent (:meth:`SegmentDriver.write_if_absent`):

``{cluster dir}/{broker}/.tiered-owner/{epoch, 20 digits}`` holding JSON
``{"store_id", "epoch", "host", "pid", "store_path", "claimed_at"}``.

The newest epoch owns the prefix. A store whose id is on it opens; any other is
refused (:class:`~tiered_core.errors.PrefixOwned`, naming both). A deliberate failover
*takes over*: it creates the record of the next epoch (again create-if-absent, so two
racing take-overs cannot both win), then seals the last segment of every flat file,
so that a write of the old owner either landed before the seal (and is adopted) or
fails. The old owner is *fenced*: :class:`FencedDriver` lists the owner records
before every write, seal, create and delete, and from the first sighting of a newer
epoch -- or of its own record gone -- refuses them all with :class:`~tiered_core.errors.Fenced`.

A prefix that holds data but no owner record (the records were deleted) is claimed again
by a store whose metadata lists everything it holds (no other store wrote there since: a
take-over seals the old owner's segments, so a later owner writes new ones), at the epoch
its local history names or else above any a lost record can have held (the time in ms);
any other store claims it only by a take-over, at such an epoch. A store still writing
there is fenced by it, and two stores never share an epoch.

The ``.tiered-owner`` directory cannot collide with a topic: topic names never hold a dot.
Nor can ``.quarantine`` (where ``tiered repair`` keeps the objects it moved aside, with a
manifest; see ``tiered_core/ops/quarantine.py``). Both are *reserved*
(:func:`is_reserved_path`): nothing that lists the prefix counts what they hold as a
store object.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from dataclasses import asdict, dataclass
from typing import Iterator

from tiered_core.codec.naming import cluster_dir, parse_segment_path
from tiered_core.errors import DriverError, Fenced, IdentityMismatch, IllegalParam, PrefixOwned, StateConflict, TieredStoreError
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.layer import DriverLayer
from tiered_core.common import now_ms

log = logging.getLogger(__name__)

OWNER_DIR = ".tiered-owner"
#: Directory under the prefix where ``tiered repair`` moves objects aside (never a segment).
QUARANTINE_DIR = ".quarantine"
#: Directories directly under a tier prefix that hold no store object.
RESERVED_DIRS = (OWNER_DIR, QUARANTINE_DIR)
#: File in the local store directory holding the store's id (created at first open).
STORE_ID_FILE = "tiered-store-id"
#: File in the local store directory holding the ownership epoch its local history is in
#: step with (written at each writable open, ``tiered_core/access/continuity.py``).
HISTORY_EPOCH_FILE = "tiered-history-epoch"
_CLAIM_ATTEMPTS = 5
#: The store id of the previous owner a take-over of a prefix without owner records names.
_NO_RECORD = "(none: the prefix had no owner record)"


def tier_prefix(cluster: str, broker: str) -> str:
    """``{md5(cluster)[:8]}_{cluster}/{broker}/``: everything one store owns in the backend."""
    return f"{cluster_dir(cluster)}/{broker}/"


def owner_prefix(cluster: str, broker: str) -> str:
    return f"{tier_prefix(cluster, broker)}{OWNER_DIR}/"


def quarantine_prefix(cluster: str, broker: str) -> str:
    """``{prefix}.quarantine/``: where ``tiered repair`` keeps what it moved aside."""
    return f"{tier_prefix(cluster, broker)}{QUARANTINE_DIR}/"


def is_owner_record(path: str) -> bool:
    """Whether ``path`` is an ownership record (never a segment)."""
    return f"/{OWNER_DIR}/" in path


def is_reserved_path(path: str) -> bool:
    """Whether ``path`` (as listed, relative to the backend root) lies in a reserved
    directory of its tier prefix (``{cluster dir}/{broker}/.tiered-owner/`` or
    ``.quarantine/``): an owner record or a quarantined object, never a store object."""
    parts = path.split("/", 3)
    return len(parts) > 3 and parts[2] in RESERVED_DIRS


#: The store id an owner record that cannot be decoded reads as.
UNREADABLE_OWNER = "(unreadable)"


@dataclass(frozen=True)
class OwnerRecord:
    """Who claimed a tier prefix, at which epoch, with which driver. ``claimed_at`` is ms
    since the epoch; ``layout`` is the claiming driver's segment layout
    (``SegmentDriver.layout``), empty in records written before it was recorded."""

    store_id: str
    epoch: int
    host: str = ""
    pid: int = 0
    store_path: str = ""
    claimed_at: int = 0
    layout: str = ""

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, epoch: int) -> "OwnerRecord":
        """The record, or one with store id ``"(unreadable)"`` when the bytes are not a record."""
        try:
            raw = json.loads(data.decode("utf-8"))
            return cls(store_id=str(raw["store_id"]), epoch=int(raw["epoch"]), host=str(raw.get("host", "")),
                       pid=int(raw.get("pid", 0)), store_path=str(raw.get("store_path", "")),
                       claimed_at=int(raw.get("claimed_at", 0)), layout=str(raw.get("layout", "")))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError):
            return cls(store_id=UNREADABLE_OWNER, epoch=epoch)

    def describe(self) -> str:
        where = f"{self.store_path!r} on host {self.host!r}" if self.store_path else "an unknown location"
        return f"store {self.store_id} at {where} (epoch {self.epoch}, pid {self.pid})"


def read_store_id(store_path: str) -> str | None:
    """The id of the store in ``store_path``, or None when it has none yet (nothing is created)."""
    path = os.path.join(store_path, STORE_ID_FILE)
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip() or None
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise IllegalParam(f"cannot read the store id file {path!r}: {exc}", path=path) from None


def read_history_epoch(store_path: str) -> int | None:
    """The epoch recorded in :data:`HISTORY_EPOCH_FILE`; None when there is none (a store
    made before it was recorded, or a new one) or it is unreadable."""
    try:
        with open(os.path.join(store_path, HISTORY_EPOCH_FILE), encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def load_store_id(store_path: str, restore: str | None = None) -> str:
    """The id of the store in ``store_path``, created (durably, once) at first use: ``restore``
    when given (the id the store's other records name, its id file lost), else a new one.
    An empty id file (a kill between its creation and its write: no claim was made with it)
    is written again. The caller holds the store directory's lock."""
    path = os.path.join(store_path, STORE_ID_FILE)
    for _ in range(2):
        try:
            with open(path, encoding="ascii") as fh:
                text = fh.read().strip()
            if text:
                return text
            os.unlink(path)  # empty: never used (under the directory's lock)
            log.warning("the store id file %r was empty (its writer was killed before it wrote the id); written "
                        "again", path)
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError) as exc:
            raise IllegalParam(f"cannot read the store id file {path!r}: {exc}", path=path) from None
        new = restore or uuid.uuid4().hex
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue  # another process created it meanwhile: read theirs
        except OSError as exc:
            raise IllegalParam(f"cannot create the store id file {path!r}: {exc.strerror or exc}",
                               path=path) from None
        try:
            os.write(fd, new.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return new
    raise IllegalParam(f"the store id file {path!r} is empty", path=path)


class PrefixOwnership:
    """Claims, checks and takes over the tier prefix of (``cluster``, ``broker``) for one store.

    Guarantees: :meth:`claim` returns only when this store owns the newest epoch; a store
    whose id is not on the newest record is refused with :class:`PrefixOwned` naming both
    stores. After a take-over by another store, :meth:`check` raises :class:`Fenced` (and
    keeps raising it). Thread-safe.
    """

    def __init__(self, driver: SegmentDriver, cluster: str, broker: str, store_id: str,
                 store_path: str = "") -> None:
        self.driver = driver
        self.cluster, self.broker = cluster, broker
        self.prefix = tier_prefix(cluster, broker)
        self.store_id = store_id
        self.store_path = store_path
        self.record: OwnerRecord | None = None
        #: The record this store took the prefix over from (None: no take-over happened).
        self.took_over_from: OwnerRecord | None = None
        self._fenced: Fenced | None = None
        self._lock = threading.Lock()

    # -- records ----------------------------------------------------------------------

    def _path(self, epoch: int) -> str:
        return f"{owner_prefix(self.cluster, self.broker)}{epoch:020d}"

    def current(self) -> OwnerRecord | None:
        """The newest owner record, or None when the prefix was never claimed."""
        newest: tuple[int, str] | None = None
        for path, _size in self.driver.list(owner_prefix(self.cluster, self.broker)):
            name = path.rsplit("/", 1)[-1]
            if name.isdigit() and (newest is None or int(name) > newest[0]):
                newest = (int(name), path)
        if newest is None:
            return None
        return self._read(*newest)

    def _read(self, epoch: int, path: str) -> OwnerRecord:
        size = self.driver.size(path)
        return OwnerRecord.decode(self.driver.read(path, 0, size) if size else b"", epoch)

    def _new_record(self, epoch: int) -> OwnerRecord:
        return OwnerRecord(self.store_id, epoch, socket.gethostname(), os.getpid(),
                           os.path.abspath(self.store_path) if self.store_path else "", now_ms(), self.driver.layout)

    # -- claiming ---------------------------------------------------------------------

    def claim(self, *, take_over: bool = False, reclaim: bool = False) -> OwnerRecord:
        """Own the prefix: first claim, re-open by the owner, or (``take_over``) a take-over.

        Raises :class:`PrefixOwned` when another store owns it and ``take_over`` is False,
        or when another take-over won a race. A prefix that holds data but no owner record
        is claimed by a take-over, or -- with ``reclaim``, the caller's proof that its
        metadata lists everything the prefix holds -- at the epoch this store's local history
        names (:meth:`own_lost_epoch`), else at one above any a lost record can have held.
        """
        if not self.driver.capabilities.create_if_absent:
            log.warning("driver %r cannot create objects atomically (capability create_if_absent): two "
                        "stores claiming %s at the same moment may both succeed", self.driver.name, self.prefix)
        for _ in range(_CLAIM_ATTEMPTS):
            current = self.current()
            self.check_driver(current)
            if current is None and self.holds_data():
                # Its owner records were deleted (by hand, a lifecycle rule), or a writer that
                # claims nothing wrote it. With the caller's proof that its metadata lists it
                # all (``reclaim``), the store claims it again: at the epoch its local history
                # names, else at one above any the lost records can have held (so a store
                # still writing here is fenced by it). Without, only a take-over claims it.
                if reclaim and not take_over:
                    epoch = self.own_lost_epoch() or max(now_ms(), 2)
                    record = self._new_record(epoch)
                    if self.driver.write_if_absent(self._path(epoch), record.encode()):
                        log.warning("tier prefix %s had data but no owner record, all of it listed by this store's "
                                    "metadata: claimed it (epoch %d)", self.prefix, epoch)
                        return self._own(record)
                    continue
                if not take_over:
                    raise self._no_owner_record()
                record = self._new_record(max(now_ms(), 2))
                if self.driver.write_if_absent(self._path(record.epoch), record.encode()):
                    self.took_over_from = OwnerRecord(_NO_RECORD, 0)
                    log.warning("took tier prefix %s over: it held data but no owner record (epoch %d)",
                                self.prefix, record.epoch)
                    return self._own(record)
                continue
            if current is None:
                record = self._new_record(1)
                if self.driver.write_if_absent(self._path(1), record.encode()):
                    return self._own(record)
                continue  # another store claimed it first: look again
            if current.store_id == self.store_id:
                return self._own(current)
            if not take_over:
                raise self.owned_by(current)
            record = self._new_record(current.epoch + 1)
            if self.driver.write_if_absent(self._path(record.epoch), record.encode()):
                self.took_over_from = current
                log.warning("took tier prefix %s over from %s (epoch %d -> %d)", self.prefix,
                            current.describe(), current.epoch, record.epoch)
                return self._own(record)
            raise PrefixOwned(f"another store took tier prefix {self.prefix!r} over at the same time "
                              f"(epoch {record.epoch}); nothing was changed", prefix=self.prefix,
                              store_id=self.store_id)
        first = self._path(1)
        if self.current() is None and self.driver.exists(first):
            # Not a race: the record is there, and the listing does not show it.
            raise DriverError(
                f"driver {self.driver.name!r}: owner record {first!r} exists, but listing {self.prefix!r} does "
                "not show it: a driver whose list misses objects cannot hold a tier (`tiered conformance "
                f"{self.driver.name}` shows which contract it breaks)", retryable=False, path=first,
                prefix=self.prefix)
        raise PrefixOwned(f"tier prefix {self.prefix!r} changed owner {_CLAIM_ATTEMPTS} times while "
                          "this store tried to claim it", prefix=self.prefix, store_id=self.store_id)

    def owned_by(self, current: OwnerRecord) -> PrefixOwned:
        """The refusal of a claim because ``current`` (the newest record, not this store's) owns the prefix."""
        if current.store_id == UNREADABLE_OWNER:
            return PrefixOwned(
                f"the newest owner record of tier prefix {self.prefix!r} ({self._path(current.epoch)!r}, epoch "
                f"{current.epoch}) cannot be read. A store's claim writes its record whole, so this object is "
                "most likely not a store's (put there by hand or by a tool); but it cannot be told. Nothing was "
                "written. If no other store writes this prefix, move that object out of "
                f"{OWNER_DIR}/ (keep a copy): this store then opens as before, every message kept. "
                "`tiered takeover --config FILE` would claim the prefix too, but it sets this store's messages "
                "not yet tiered aside (given-up-history/) and hands their offsets out again",
                prefix=self.prefix, owner=current.describe(), owner_id=current.store_id,
                store_id=self.store_id, store_path=self.store_path, record=self._path(current.epoch))
        return PrefixOwned(
            f"tier prefix {self.prefix!r} is owned by {current.describe()}; this is store "
            f"{self.store_id or '(new)'} at {self.store_path!r}. Two stores must not share a cluster and "
            "broker name on one backend: give this one its own broker name, or, for a deliberate "
            "failover, stop the old broker and run `tiered takeover --config FILE`",
            prefix=self.prefix, owner=current.describe(), owner_id=current.store_id,
            store_id=self.store_id, store_path=self.store_path)

    def own_lost_epoch(self) -> int | None:
        """The epoch this store claimed the prefix at before, as its local history records
        it (:data:`HISTORY_EPOCH_FILE` in its store_path); None for a store without one.
        Proof that no other store wrote the prefix since is the caller's (``reclaim``): a
        store taken over at a later epoch has that epoch's objects in its prefix that its
        metadata does not list (a take-over seals the old owner's last segments, so the new
        owner writes new ones)."""
        return read_history_epoch(self.store_path) if self.store_path and self.store_id else None

    def holds_data(self) -> bool:
        """Whether the prefix holds any object outside its reserved directories (one listing,
        stopped at the first such object)."""
        return any(not is_reserved_path(path) for path, _size in self.driver.list(self.prefix))

    def _no_owner_record(self) -> PrefixOwned:
        return PrefixOwned(
            f"tier prefix {self.prefix!r} holds data but no owner record ({OWNER_DIR}/ was deleted, or is "
            f"not visible): the store that wrote it may still be writing, and a claim here would let two "
            f"stores hand out the same offsets. Nothing was written. If that store is stopped or lost, take "
            f"the prefix over: `tiered takeover --config FILE` (the store at {self.store_path!r} becomes its "
            "owner, at an epoch that fences any other, so that the store that wrote it is refused from then "
            "on)", prefix=self.prefix, store_id=self.store_id,
            store_path=self.store_path)

    def check_claimable(self, current: OwnerRecord | None, *, take_over: bool = False,
                        reclaim: bool = False) -> None:
        """Raise :class:`PrefixOwned` when :meth:`claim` would refuse because of ``current``
        (the newest owner record, from :meth:`current`): it writes nothing, so an open can
        be refused before it writes anything. (The claim itself decides: another store may
        claim in between.)"""
        self.check_driver(current)
        if current is not None and current.store_id != self.store_id and not take_over:
            raise self.owned_by(current)
        if current is None and not take_over and not reclaim and self.holds_data():
            raise self._no_owner_record()

    def check_driver(self, current: OwnerRecord | None) -> None:
        """Raise :class:`IdentityMismatch` when ``current`` (the newest owner record) was
        claimed with another driver than this one. Drivers lay segments out differently (the
        s3 driver keeps a segment's appends as parts named by its segment id, the fsspec
        driver by one constant id, with its seal in marker objects): a driver that reads,
        seals or repairs another one's segments misreads them and takes their parts for
        garbage. Records from before the driver was recorded are not checked."""
        mine = self.driver.layout
        if current is None or not current.layout or current.layout == mine:
            return
        fix = (f"set driver = {current.layout!r} back, with that driver's options; to move the data to "
               "another driver or backend, copy it to a new store with `tiered spark migrate`")
        raise IdentityMismatch(
            f"tier prefix {self.prefix!r} is laid out by driver {current.layout!r} (owner record of "
            f"{current.describe()}), but this store at {self.store_path!r} opens it with driver {mine!r}: "
            f"{mine!r} would misread its segments and could delete their parts. Nothing was written. "
            f"Fix: {fix}", field="driver", recorded=current.layout, configured=mine, prefix=self.prefix,
            store_path=self.store_path, fix=fix)

    def _own(self, record: OwnerRecord) -> OwnerRecord:
        with self._lock:
            self.record = record
            self._fenced = None
        return record

    # -- fencing ----------------------------------------------------------------------

    @property
    def fenced(self) -> Fenced | None:
        """The error this store was fenced with, or None."""
        return self._fenced

    def check(self) -> None:
        """Raise :class:`Fenced` if a newer epoch than ours exists, or our own record is gone
        (one listing of the owner records)."""
        if self._fenced is not None:
            raise self._fenced
        record = self.record
        if record is None:
            raise Fenced(f"tier prefix {self.prefix!r} was never claimed by this store", prefix=self.prefix,
                         store_id=self.store_id)
        newest, mine = 0, False
        for path, _size in self.driver.list(owner_prefix(self.cluster, self.broker)):
            name = path.rsplit("/", 1)[-1]
            if name.isdigit():
                newest, mine = max(newest, int(name)), mine or int(name) == record.epoch
        if mine and newest <= record.epoch:
            return
        if newest > record.epoch:
            try:
                newer = self._read(newest, self._path(newest)).describe()
            except TieredStoreError:
                newer = f"epoch {newest}"
            why = f"was taken over by {newer}"
        else:
            # Without its record a take-over cannot be told from the prefix alone: stop.
            why = (f"lost this store's owner record {self._path(record.epoch)!r} (deleted by hand or by a "
                   "lifecycle rule); another store may have claimed the prefix meanwhile. Restart this store: "
                   "its open claims the prefix again when no other store did")
        error = Fenced(f"tier prefix {self.prefix!r} {why}; this store (epoch {record.epoch}) stops writing "
                       "to the tier", prefix=self.prefix, epoch=record.epoch, store_id=self.store_id)
        with self._lock:
            if self._fenced is None:
                log.error("%s", error.message)
                self._fenced = error
        raise self._fenced

    def guard(self, driver: SegmentDriver | None = None) -> "FencedDriver":
        """``driver`` (default: the claiming one) behind a layer that checks the fence first."""
        return FencedDriver(driver or self.driver, self)

    # -- take-over --------------------------------------------------------------------

    def seal_tails(self, listed: "set[str] | None" = None) -> list[str]:
        """Seal the last segment of every flat file under the prefix (after a take-over).

        Only the last segment of a flat file is ever written, so sealing it ends every
        append of the old owner. An empty one is left open: it names the base offset the
        new owner writes next, which a sealed empty object would block for good, and the
        owner record already fences the old owner's writes. ``listed``: the segment paths
        the store's metadata records; other objects are never sealed (a seal cannot be
        undone on every backend, and they are not this store's). Returns the paths sealed.
        """
        last: dict[str, tuple[int, str, int]] = {}
        for path, size in self.driver.list(self.prefix):
            if is_reserved_path(path) or (listed is not None and path not in listed):
                continue
            try:
                info = parse_segment_path(path)
            except TieredStoreError:
                continue  # not a segment: nothing of ours writes it
            directory = path.rsplit("/", 1)[0]
            if directory not in last or info.base_offset > last[directory][0]:
                last[directory] = (info.base_offset, path, size)
        sealed = []
        for _base, path, size in sorted(last.values(), key=lambda item: item[1]):
            if size and not self.driver.is_sealed(path):
                self.driver.seal(path)
                sealed.append(path)
        if sealed:
            log.warning("take-over of %s sealed %d segment(s) the previous owner may still write",
                        self.prefix, len(sealed))
        return sealed


class FencedDriver(DriverLayer):
    """Refuses every write, create, seal and delete once the store is fenced.

    Before each of those calls it asks :meth:`PrefixOwnership.check` whether a newer
    owner exists or its own record is gone (one listing of the owner records); reads
    are not checked.
    """

    def __init__(self, inner: SegmentDriver, ownership: PrefixOwnership) -> None:
        super().__init__(inner)
        self.ownership = ownership

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        self.ownership.check()
        self.inner.write(path, position, data)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        self.ownership.check()
        return self.inner.write_if_absent(path, data)

    def create(self, path: str) -> None:
        self.ownership.check()
        self.inner.create(path)

    def seal(self, path: str) -> None:
        self.ownership.check()
        self.inner.seal(path)

    def delete(self, path: str) -> None:
        self.ownership.check()
        self.inner.delete(path)


class ReadOnlyDriver(DriverLayer):
    """Refuses every write, create, seal and delete before it reaches the backend
    (:class:`~tiered_core.errors.StateConflict` naming the operation and the path): the
    driver of a store opened read-only, which owns nothing and writes nothing."""

    def __init__(self, inner: SegmentDriver, why: str = "the store is open read-only", **context: object) -> None:
        super().__init__(inner)
        self.why = why
        self.context = context  # added to every refusal's context (e.g. the broker whose view it is)

    def _refuse(self, op: str, path: str) -> StateConflict:
        return StateConflict(f"{op} of {path!r} refused: {self.why}", path=path, op=op, read_only=True,
                             **self.context)

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        raise self._refuse("write", path)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        raise self._refuse("write_if_absent", path)

    def create(self, path: str) -> None:
        raise self._refuse("create", path)

    def seal(self, path: str) -> None:
        raise self._refuse("seal", path)

    def delete(self, path: str) -> None:
        raise self._refuse("delete", path)


def segment_objects(driver: SegmentDriver, cluster: str, broker: str) -> Iterator[tuple[str, int]]:
    """``(path, size)`` of every object under the store's prefix but those in its reserved
    directories (owner records, the quarantine: :func:`is_reserved_path`)."""
    for path, size in driver.list(tier_prefix(cluster, broker)):
        if not is_reserved_path(path):
            yield path, size


__all__ = [
    "OWNER_DIR",
    "UNREADABLE_OWNER",
    "QUARANTINE_DIR",
    "RESERVED_DIRS",
    "STORE_ID_FILE",
    "FencedDriver",
    "OwnerRecord",
    "PrefixOwnership",
    "ReadOnlyDriver",
    "is_owner_record",
    "is_reserved_path",
    "quarantine_prefix",
    "load_store_id",
    "read_store_id",
    "owner_prefix",
    "segment_objects",
    "tier_prefix",
]
