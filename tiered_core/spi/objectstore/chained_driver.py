"""ChainedObjectDriver: the segment operations of every object-store driver, written once.

The layout (a base object plus exclusively created parts chained by position, see
:mod:`tiered_core.spi.objectstore.layout`) and everything that keeps it exact -- the
position check, the confirmation that a part joined the chain when writers race, the
recovery of a consolidation whose answer was lost, the seal, the clean-up of garbage --
live here. A backend subclass provides only a handful of primitives on single objects
(the ``_..._object`` methods and ``_consolidate``), each documented with its contract.

Why the racing-writer confirmation is needed: writer A checks the size (``P``), then
writer B writes at ``P`` and consolidates (deleting the part at ``P``), then A's exclusive
create of the part at ``P`` succeeds -- its name is free again -- but the part lies inside
the base and is never counted. So after creating a part, a driver on a backend that
enforces preconditions (``capabilities.conditional_append``) lists the segment once more
and reports success only if its part (same name and version) is in the chain, or if the
bytes at ``P`` are exactly its bytes; otherwise it withdraws the part and raises
``PositionMismatch`` (or ``SegmentSealed``).
"""

from __future__ import annotations

import abc
import contextlib
import logging
import uuid
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Sequence

from tiered_core.errors import (
    DriverError, IllegalParam, InvalidOption, InvalidPath, NotFound, PositionMismatch, SegmentSealed, StateConflict,
)
from tiered_core.spi.driver import SegmentDriver, key_prefix
from tiered_core.spi.objectstore.layout import (
    META_ID, META_SEALED, META_SEALED_SIZE, PART_MARK, ObjectInfo, Part, SegmentView, group_listing, interpret,
    parse_part, part_key,
)

log = logging.getLogger("tiered_core.spi.objectstore")

#: The path component no path or prefix may contain (it separates a key from its parts).
RESERVED = PART_MARK.rstrip("/")


def new_segment_id() -> str:
    """A random segment id (a deleted predecessor's parts never match it)."""
    return uuid.uuid4().hex


class ChainedObjectDriver(SegmentDriver, abc.ABC):
    """A :class:`~tiered_core.spi.SegmentDriver` over an object store with exclusive create.

    Guarantees the driver contract on immutable objects: each ``write`` creates one part
    object exclusively, so it lands whole or not at all (``atomic_write``), and ``size``
    is recomputed from one listing, exact after a crash at any point. The position is
    checked before the upload and, where the backend enforces preconditions
    (``capabilities.conditional_append``), confirmed after it: the part must continue the
    chain, so two racing writers cannot both succeed. ``seal`` consolidates the parts into
    the base (backends with :attr:`can_consolidate`) or records the final size, and marks
    the base sealed in its metadata; later writes raise
    :class:`~tiered_core.errors.SegmentSealed`. ``write_if_absent`` is one exclusive
    create of the base. Failures of the primitives surface as the typed errors the
    primitives raise (``DriverError`` with ``retryable``, ``NotFound``).

    A subclass sets :attr:`root` through :meth:`_set_root`, implements the abstract
    primitives, and may override :meth:`_where` / :meth:`_error_context` so that messages
    name its bucket or container.
    """

    #: Whether :meth:`_consolidate` concatenates objects server-side (GCS compose).
    #: Without it parts are never consolidated and a seal records the final size.
    can_consolidate: ClassVar[bool] = False
    #: Most sources one :meth:`_consolidate` call takes, the base included.
    max_consolidate_sources: ClassVar[int] = 32
    #: Consolidate the chain into the base once it has this many parts: keeps listings
    #: and ranged reads short, while a run of large commits (the usual 4 MiB batches) is
    #: not slowed by consolidations it does not need.
    compact_at: ClassVar[int] = 64

    #: The key prefix below which this driver's objects live ("" for the whole bucket).
    root: str = ""

    # -- the backend primitives ---------------------------------------------------------
    #
    # Names and signatures are stable: backends in other distributions implement them.
    # ``what`` describes the request for messages and request hooks (e.g. "write 'seg'
    # at 5", "compose 'seg'"); it never contains credentials. Every primitive raises
    # DriverError (retryable for transient failures, naming the bucket or container and
    # saying what was denied for access errors), never a library's own exception.

    @abc.abstractmethod
    def _list_objects(self, prefix: str, *, what: str) -> list[ObjectInfo]:
        """Every object whose name starts with ``prefix`` (all pages, no delimiter),
        fresh from the backend (no listing cache: another writer's object must show).

        ``metadata`` may be None where the listing does not carry custom metadata; the
        driver then calls :meth:`_stat_object` for the bases it needs. A missing bucket
        or container raises ``DriverError(retryable=False)`` naming it.
        """

    @abc.abstractmethod
    def _create_object(self, name: str, data: bytes, metadata: Mapping[str, str] | None, *,
                       what: str) -> ObjectInfo | None:
        """Create object ``name`` holding ``data`` and custom ``metadata``, exclusively:
        None (and nothing changed) when an object of that name exists.

        Atomic where the backend has exclusive create (``If-None-Match: *``,
        ``ifGenerationMatch=0``): of racing creators exactly one gets an
        :class:`ObjectInfo` (its ``version`` at least), and no reader sees a partial
        object. A create the transport resent after a lost answer may find its own first
        attempt and return None: the driver recognises its own object (segment id in the
        metadata, or the part's size and checksum).
        """

    @abc.abstractmethod
    def _read_object(self, name: str, start: int, length: int, *, what: str) -> bytes:
        """Bytes ``[start, start + length)`` of object ``name`` (one ranged read).

        Raises :class:`~tiered_core.errors.NotFound` when the object does not exist (or is
        now shorter than ``start``: it was replaced); the driver then lists again. May
        return fewer bytes only when the object is shorter than the range.
        """

    @abc.abstractmethod
    def _delete_object(self, name: str, *, version: str | None = None, what: str) -> bool:
        """Delete object ``name``; with ``version``, only if it is still at that version.

        True when deleted; False when it did not exist or (with ``version``) is at
        another version, where the backend can tell. Never deletes another object.
        """

    @abc.abstractmethod
    def _update_metadata(self, name: str, metadata: Mapping[str, str], *, version: str,
                         what: str) -> ObjectInfo | None:
        """Set the custom metadata of object ``name`` to ``metadata`` (a superset of its
        current metadata: the layout never removes a key, so a backend that merges keys
        is fine), only if the object is at ``version``; its bytes stay as they are.

        Returns the object's new info, or None when it is at another version (or gone).
        Used to seal a base and to adopt an object this driver did not create.
        """

    def _consolidate(self, name: str, sources: Sequence[ObjectInfo], metadata: Mapping[str, str], *,
                     version: str, what: str) -> ObjectInfo | None:
        """Replace object ``name`` (only if at ``version``) by its bytes followed by the
        bytes of ``sources`` in order, with custom ``metadata``; server-side and atomic
        (GCS compose). At most :attr:`max_consolidate_sources` objects, ``name`` included.

        Returns the new info, or None when ``name`` is at another version. Raises
        :class:`~tiered_core.errors.NotFound` when a source vanished. Send it at most once
        (no transport-level resend): after a lost answer the driver looks at the base to
        learn whether it happened. Only called when :attr:`can_consolidate` is True; the
        default raises ``NotImplementedError``.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot consolidate objects")

    def _stat_object(self, name: str, *, what: str) -> ObjectInfo | None:
        """The info of object ``name`` with its metadata, or None when absent. Needed only
        by backends whose listings leave ``metadata`` None; the default raises
        ``NotImplementedError``."""
        raise NotImplementedError(f"{type(self).__name__} lists no metadata and has no _stat_object")

    def _content_checksum(self, data: bytes) -> str | None:
        """``data``'s checksum in the format of :attr:`ObjectInfo.checksum` for a part
        created with it, or None (the driver then compares by reading the part back)."""
        return None

    # -- naming and messages -------------------------------------------------------------

    def _set_root(self, prefix: str, *, option: str = "prefix") -> None:
        """Use ``prefix`` (surrounding slashes ignored) as :attr:`root`; refuses the reserved
        mark and empty, ``.`` or ``..`` segments (:func:`~tiered_core.spi.driver.key_prefix`)."""
        root = key_prefix(prefix, driver=self.name, option=option)
        if RESERVED in root:
            raise InvalidOption(f"option {option!r} of driver {self.name!r} ({prefix!r}) contains the reserved "
                                f"{RESERVED!r}", option=option)
        self.root = root

    def _key(self, path: str) -> str:
        if RESERVED in path:
            raise InvalidPath(f"path {path!r} contains the reserved {RESERVED!r}", path=path)
        return f"{self.root}/{path}" if self.root else path

    def _rel(self, key: str) -> str:
        return key[len(self.root) + 1:] if self.root else key

    def _where(self, path: str) -> str:
        """``path`` and where it is, for messages, e.g. ``'seg' in bucket 'b'``."""
        return repr(path)

    def _error_context(self) -> dict[str, Any]:
        """Context every error of this driver carries, e.g. ``{"bucket": ...}``."""
        return {}

    def _changed(self, path: str, during: str) -> DriverError:
        return DriverError(f"{self.name}: {self._where(path)} changed during {during}", retryable=True,
                           path=path, **self._error_context())

    # -- views ----------------------------------------------------------------------------

    def _with_metadata(self, key: str, items: list[ObjectInfo], path: str) -> list[ObjectInfo]:
        """``items`` with the base's metadata filled in where the listing left it out."""
        out = []
        for item in items:
            if item.name == key and item.metadata is None:
                stat = self._stat_object(key, what=f"look up {path!r}")
                if stat is None:
                    continue  # deleted since the listing
                item = stat
            out.append(item)
        return out

    def _view(self, key: str, path: str) -> SegmentView:
        items = self._list_objects(key, what=f"list {path!r}")
        return self._refuse_another_layout(interpret(key, self._with_metadata(key, items, path)), path)

    #: Segment ids of another driver's layout of the same part names: the fsspec driver's
    #: constant id and its marker objects (``tiered_driver_fsspec.chain_layout``). A driver
    #: of that layout sets none.
    OTHER_LAYOUT_IDS: ClassVar[tuple[str, ...]] = ("s", "meta")

    def _refuse_another_layout(self, view: SegmentView, path: str) -> SegmentView:
        """``view``, unless parts below it are another layout's: read as this layout's, their
        bytes would not count (sizes too short, offsets handed out again). StateConflict,
        naming the object, even where the prefix's owner record is gone. Below a base this
        layout wrote (it carries this layout's segment id) such a part is someone else's
        object: never counted, never removed, and no reason to refuse the segment."""
        if view.segment_id and view.segment_id not in self.OTHER_LAYOUT_IDS:
            return view
        for part in view.garbage:
            if part.segment_id in self.OTHER_LAYOUT_IDS:
                raise StateConflict(
                    f"{self.name}: {part.name!r} below {path!r} belongs to the fsspec driver's layout (its parts are "
                    f"named by segment id {part.segment_id!r}): the {self.name} driver neither reads nor removes "
                    "it. Open this tier with the driver that wrote it", path=path, object=part.name)
        return view

    # -- the operations ---------------------------------------------------------------------

    def size(self, path: str) -> int:
        return self._view(self._key(path), path).size

    def exists(self, path: str) -> bool:
        return self._view(self._key(path), path).exists

    def is_sealed(self, path: str) -> bool:
        return self._view(self._key(path), path).sealed

    def create(self, path: str) -> None:
        key = self._key(path)
        if self._view(key, path).exists:
            return
        # None: someone created it meanwhile -- fine.
        self._create_object(key, b"", {META_ID: new_segment_id()}, what=f"create {path!r}")

    def write_if_absent(self, path: str, data: bytes) -> bool:
        """One exclusive create of the base: refused when the object exists. A create the
        transport resent after a lost answer is recognised by its segment id."""
        if not data:
            raise IllegalParam(f"write_if_absent of {path!r} needs data", path=path)
        key = self._key(path)
        if self._view(key, path).exists:
            return False  # the only guard where the backend ignores the precondition
        segment_id = new_segment_id()
        if self._create_object(key, bytes(data), {META_ID: segment_id}, what=f"create {path!r}") is not None:
            return True
        return self._view(key, path).segment_id == segment_id

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        key = self._key(path)
        payload = bytes(data)
        view = self._view(key, path)
        if view.sealed:
            raise SegmentSealed(path)
        if view.size != position:
            raise PositionMismatch(path, position, view.size)
        if not payload:
            if not view.exists:
                self.create(path)
            return
        if not view.exists:
            self._write_base(key, path, position, payload)
            return
        if not view.segment_id:  # an object this driver did not create: adopt it
            meta = {**view.metadata, META_ID: new_segment_id()}
            if self._update_metadata(key, meta, version=view.version, what=f"adopt {path!r}") is None:
                raise self._changed(path, "its adoption")
            view = self._view(key, path)
            if view.size != position or view.sealed or not view.segment_id:
                raise self._changed(path, "its adoption")
        self._write_part(key, path, position, payload, view)

    def _refused(self, key: str, path: str, position: int) -> Exception:
        """The error for a write whose object or part was taken by another writer."""
        now = self._view(key, path)
        if now.sealed:
            return SegmentSealed(path)
        return PositionMismatch(path, position, now.size)

    def _write_base(self, key: str, path: str, position: int, payload: bytes) -> None:
        """First bytes of a segment that does not exist: the base itself, created exclusively."""
        segment_id = new_segment_id()
        if self._create_object(key, payload, {META_ID: segment_id}, what=f"write {path!r} at {position}") is not None:
            return
        now = self._view(key, path)
        if now.segment_id == segment_id and now.base_size == len(payload):
            return  # this call's own object: the transport resent the create after a lost answer
        raise self._refused(key, path, position)

    def _write_part(self, key: str, path: str, position: int, payload: bytes, view: SegmentView) -> None:
        name = part_key(key, view.segment_id, position)
        created = self._create_object(name, payload, None, what=f"write {path!r} at {position}")
        if created is None:
            created = self._same_part(key, path, name, payload)
            if created is None:
                raise self._refused(key, path, position)
        if not self.capabilities.conditional_append:
            # The backend cannot exclude racing writers (an emulator ignoring
            # preconditions), so there is no race to confirm against: one writer's part
            # at the checked position always continues the chain.
            if self.can_consolidate and len(view.chain) + 1 >= self.compact_at:
                self._compact(key, path, self._view(key, path), seal=False, best_effort=True)
            return
        # Confirm the part continues the chain: a writer racing with a consolidation
        # could otherwise have created a part at a position the base already covers.
        now = self._view(key, path)
        if any(p.name == name and p.version == created.version for p in now.chain):
            if self.can_consolidate and len(now.chain) >= self.compact_at:
                self._compact(key, path, now, seal=False, best_effort=True)
            return
        if not now.sealed and now.size >= position + len(payload) and self._holds(path, now, position, payload):
            return  # consolidated into the base by a concurrent compaction
        with contextlib.suppress(DriverError):  # outside the chain it is never counted anyway
            self._delete_object(name, version=created.version, what=f"withdraw part of {path!r}")
        if now.sealed:
            raise SegmentSealed(path)
        raise PositionMismatch(path, position, now.size)

    def _holds(self, path: str, view: SegmentView, position: int, payload: bytes) -> bool:
        """Whether ``view`` reads ``payload`` at ``position``. A piece gone meanwhile (another
        compaction) leaves the write's outcome unknown, as a lost answer does: a retryable
        DriverError (the layers never resend a write, see :mod:`tiered_core.spi.layer`)."""
        try:
            return self._read_view(path, view, position, len(payload)) == payload
        except NotFound:
            raise DriverError(f"{self.name}: {self._where(path)} changed while a write at {position} was confirmed",
                              retryable=True, path=path, position=position, **self._error_context()) from None

    def _same_part(self, key: str, path: str, name: str, payload: bytes) -> ObjectInfo | None:
        """The existing part ``name`` when it holds exactly ``payload`` (this write's own
        first attempt, resent by the transport, or an identical write), else None."""
        for item in self._list_objects(name, what=f"list {path!r}"):
            if item.name != name or item.size != len(payload):
                continue
            checksum = self._content_checksum(payload)
            if checksum and item.checksum:
                return item if checksum == item.checksum else None
            try:
                same = self._read_object(name, 0, len(payload), what=f"read {path!r}") == payload
            except NotFound:
                return None
            return item if same else None
        return None

    def _compact(self, key: str, path: str, view: SegmentView, *, seal: bool, best_effort: bool) -> None:
        """Consolidate the chain into the base, a batch a call; with ``seal``, mark it sealed.

        A backend without consolidation keeps its parts: a seal then records the final
        size in the base's metadata (one conditional metadata update).
        """
        meta = dict(view.metadata)
        if not self.can_consolidate:
            if seal:
                meta.update({META_SEALED: "true", META_SEALED_SIZE: str(view.size)})
                if self._update_metadata(key, meta, version=view.version, what=f"seal {path!r}") is None:
                    raise self._changed(path, "the seal")
                self._remove(view.own_garbage(), path, "remove part of")
            return
        version, base_size, chain = view.version, view.base_size, list(view.chain)
        done: list[Part] = []
        batch_size = self.max_consolidate_sources - 1
        try:
            while chain or seal:
                batch, chain = chain[:batch_size], chain[batch_size:]
                last = not chain
                if seal and last:
                    meta[META_SEALED] = "true"
                if batch:
                    info = self._consolidate_once(key, path, batch, meta, version, base_size)
                else:
                    info = self._update_metadata(key, meta, version=version, what=f"seal {path!r}")
                    if info is None:
                        raise self._changed(path, "the seal")
                version, base_size = info.version, base_size + sum(p.size for p in batch)
                done.extend(batch)
                if last:
                    break
        except DriverError:
            if not best_effort:
                raise
            log.info("%s: compaction of %r deferred (backend unavailable)", self.name, path)
        self._remove(done + view.own_garbage(), path, "remove composed part of")

    def _consolidate_once(self, key: str, path: str, batch: list[Part], meta: dict[str, str], version: str,
                          base_size: int) -> ObjectInfo:
        """One consolidation of the base and ``batch``; after a failure, whether it happened.

        A consolidation whose answer was lost may have happened, and sending it again
        would append the parts twice wherever the version precondition is not enforced
        (an emulator). So it is never resent: after a transient failure or a refused
        precondition the base tells whether it landed (new version, expected size); if
        not, the error goes up, and a retry of the whole operation starts from a fresh view.
        """
        expected = base_size + sum(p.size for p in batch)
        failure: DriverError | None = None
        try:
            info = self._consolidate(key, [p.info() for p in batch], meta, version=version,
                                     what=f"compose {path!r}")
        except NotFound:  # a part vanished: another writer compacted meanwhile
            raise DriverError(f"{self.name}: parts of {self._where(path)} vanished during a compose",
                              retryable=True, path=path, **self._error_context()) from None
        except DriverError as exc:
            if not exc.retryable:
                raise
            failure = exc
        else:
            if info is not None:
                return info
        now = self._view(key, path)
        if now.version != version and now.base_size == expected:
            return ObjectInfo(key, now.base_size, now.version, now.metadata)  # only the answer was lost
        if failure is not None and now.version == version:
            raise failure
        raise self._changed(path, "a compose")

    def _remove(self, parts: Sequence[Part], path: str, why: str) -> None:
        """Delete parts the chain no longer counts (best effort: leftovers are garbage that the
        next compaction or seal of ``path`` removes). The first failed delete ends the clean-up:
        the backend is failing, and each further delete would spend its own retries on it."""
        for part in parts:
            try:
                self._delete_object(part.name, what=f"{why} {path!r}")
            except DriverError as exc:
                log.info("%s: clean-up of %r deferred after a failed delete (%s)", self.name, path, exc.code.value)
                return

    def read(self, path: str, position: int, length: int) -> bytes:
        key = self._key(path)
        for _attempt in range(3):
            view = self._view(key, path)
            if not view.exists:
                raise NotFound(path)
            try:
                return self._read_view(path, view, position, length)
            except NotFound:
                continue  # a concurrent compaction removed a part: look again
        raise DriverError(f"{self.name}: {self._where(path)} kept changing during a read", retryable=True,
                          path=path, **self._error_context())

    def _read_view(self, path: str, view: SegmentView, position: int, length: int) -> bytes:
        """``length`` bytes at ``position`` of the segment ``view`` shows; NotFound when one
        of its pieces is gone since (see :meth:`_read_pieces`)."""
        if position + length > view.size:
            raise IllegalParam(f"read of {path!r} [{position}, {position + length}) passes its size {view.size}",
                               path=path, position=position, length=length)
        end = position + length
        reads = []
        for name, start, size in view.pieces():
            lo, hi = max(position, start), min(end, start + size)
            if lo < hi:
                reads.append((ObjectInfo(name, size), lo - start, hi - lo))
        return b"".join(self._read_pieces(path, position, reads))

    def _read_pieces(self, path: str, position: int, reads: list[tuple[ObjectInfo, int, int]]) -> list[bytes]:
        """The bytes of each ``(object, start, length)`` range of a read of ``path`` at
        ``position``, in order, one :meth:`_read_object` after another (a backend that can
        read them concurrently overrides this). A piece gone since the view was taken raises
        NotFound (the read looks again); a short one a retryable DriverError."""
        out = []
        for piece, start, length in reads:
            body = self._read_object(piece.name, start, length, what=f"read {path!r} at {position}")
            if len(body) != length:
                raise DriverError(f"{self.name}: short read of {self._where(path)} at {position}: {len(body)} of "
                                  f"{length} bytes", retryable=True, path=path, **self._error_context())
            out.append(body)
        return out

    def seal(self, path: str) -> None:
        key = self._key(path)
        view = self._view(key, path)
        if not view.exists:
            raise NotFound(path, "cannot be sealed: it does not exist")
        if view.sealed:
            self._remove(view.own_garbage(), path, "remove part of")
            return
        if not view.segment_id:
            view.metadata[META_ID] = new_segment_id()
        self._compact(key, path, view, seal=True, best_effort=False)

    def delete(self, path: str) -> None:
        key = self._key(path)
        view = self._view(key, path)  # whose parts are this segment's, up to where (see own_garbage)
        # Base first: from then on the size is 0 and leftover parts are garbage.
        self._delete_object(key, what=f"delete {path!r}")
        for name in own_part_names(key, self._list_objects(key + PART_MARK, what=f"list parts of {path!r}"),
                                   view.segment_id, path, self.name, end=view.size):
            self._delete_object(name, what=f"delete part of {path!r}")

    def _groups(self, prefix: str) -> Iterator[tuple[str, list[ObjectInfo], bool]]:
        """One listing below ``prefix``, grouped by segment key: ``(key, objects, has parts)``;
        a group with parts carries its base's metadata (the chain needs its segment id)."""
        full = f"{self.root}/{prefix}" if self.root else prefix
        for key, group in group_listing(self._list_objects(full, what=f"list prefix {prefix!r}")).items():
            if self.root and not key.startswith(self.root + "/"):
                continue
            has_parts = any(item.name != key for item in group)
            yield key, (self._with_metadata(key, group, self._rel(key)) if has_parts else group), has_parts

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        out = []
        for key, group, _ in self._groups(prefix):
            view = self._refuse_another_layout(interpret(key, group), self._rel(key))
            if view.exists:
                out.append((self._rel(key), view.size))
        return iter(sorted(out))

    def _is_marker(self, key: str, name: str) -> bool:
        """Whether ``name`` is one of this layout's marker objects below base ``key`` (none
        here: the base's metadata holds what markers would)."""
        return False

    def foreign_objects(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Objects below ``prefix`` named with the part mark that are neither a part of their
        segment's chain nor its own garbage (:meth:`SegmentView.own_garbage`, which its
        seal removes): parts of another segment id, past a gap, without a base, or with a
        name no part has. :meth:`list` hides them; nothing here reads or removes them."""
        out = []
        for key, group, has_parts in self._groups(prefix):
            if not has_parts:
                continue
            view = interpret(key, group)
            known = {p.name for p in view.chain} | {p.name for p in view.own_garbage()}
            out.extend((self._rel(item.name), int(item.size)) for item in group
                       if item.name != key and item.name not in known and not self._is_marker(key, item.name))
        return iter(sorted(out))

    def leftover_objects(self, prefix: str = "") -> Iterator[tuple[str, str, int]]:
        """Each existing segment's own garbage parts (:meth:`SegmentView.own_garbage`): of its
        id, behind or at its chain's end. Its seal removes them (nothing reads them)."""
        out = []
        for key, group, has_parts in self._groups(prefix):
            if not has_parts:
                continue
            view = interpret(key, group)
            if view.exists:
                out.extend((self._rel(key), self._rel(p.name), int(p.size)) for p in view.own_garbage())
        return iter(sorted(out))


def own_part_names(key: str, items: Iterable[ObjectInfo], segment_id: str, path: str, driver: str, *,
                   end: int) -> list[str]:
    """The names of ``items`` (listed below ``key``'s part mark) that are parts of segment id
    ``segment_id`` starting at or before ``end`` (the segment's size); the others are kept
    and logged (see :meth:`SegmentView.own_garbage`)."""
    own, kept = [], []
    for item in items:
        part = parse_part(key, item)
        mine = part is not None and bool(segment_id) and part.segment_id == segment_id and part.position <= end
        (own if mine else kept).append(item.name)
    if kept:
        log.warning("%s: %d object(s) below segment %r are not parts of its id %r up to its end %d; kept "
                    "(e.g. %r)", driver, len(kept), path, segment_id, end, kept[0])
    return own


__all__ = ["ChainedObjectDriver", "RESERVED", "new_segment_id", "own_part_names"]
