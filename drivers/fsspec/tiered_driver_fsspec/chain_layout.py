"""The part-chain layout on an fsspec filesystem: the primitives of
:class:`~tiered_core.spi.objectstore.ChainedObjectDriver` as fsspec calls.

The chain logic is the shared one; only the primitives live here:
``pipe_file(mode="create")`` (exclusive create), ``cat_file`` with a range, ``find`` with
detail (no listing cache), ``rm_file``. fsspec has no portable custom metadata (s3fs,
gcsfs and adlfs each take it differently, local files and sftp not at all), so what the
layout keeps in a base object's metadata is kept in marker objects named below the
base's part mark, where the one listing that reads the chain sees them too:

* the segment id is one constant (:data:`SEGMENT_ID`): a deleted segment leaves nothing
  behind for a successor at the same path to inherit, because :meth:`FsspecChain.delete`
  removes the parts and markers first and the base last;
* a seal is ``K#tiered-part/meta/tiered-sealed`` (created exclusively, holding the sealed
  size: of two racing seals one wins) plus ``K#tiered-part/meta/tiered-sealed-size=N``,
  whose name carries the size so that the listing alone gives it.

Marker names are not parts (their position is not a number): the chain never counts them.
"""

from __future__ import annotations

import datetime
import errno
from typing import Any, Callable, Mapping

from tiered_core.errors import NotFound, StateConflict
from tiered_core.spi import Capabilities
from tiered_core.spi.objectstore import (
    META_ID, META_SEALED, META_SEALED_SIZE, PART_MARK, ChainedObjectDriver, ObjectInfo, own_part_names,
)

#: The one segment id of every base this driver writes (see the module doc).
SEGMENT_ID = "s"
META_MARK = PART_MARK + "meta/"
SEAL_LOCK = "tiered-sealed"
SEALED_SIZE_PREFIX = META_SEALED_SIZE + "="

#: ``info`` fields that change when an object is replaced, by backend (first found wins).
_VERSION_FIELDS = ("generation", "ETag", "etag", "mtime", "created", "LastModified", "last_modified")


class FsspecChain(ChainedObjectDriver):
    """The chained-object segment operations on one fsspec filesystem below ``root``.

    Not registered: :class:`~tiered_driver_fsspec.driver.FsspecDriver` delegates to it
    for filesystems without append. ``call`` runs one filesystem call, turning a missing
    object into ``NotFound`` and other failures into ``DriverError`` (``FileExistsError``
    passes). ``capabilities`` are the driver instance's (derived from the filesystem).
    """

    name = "fsspec"
    OTHER_LAYOUT_IDS = ()  # its own ids (another driver's parts are refused by _check_own_part)

    def __init__(self, *, fs: Any, root: str, call: Callable[..., Any], capabilities: Capabilities,
                 url: str, object_store: bool) -> None:
        #: A flat key namespace that lists by key prefix (s3fs, gcsfs, adlfs: ``find(prefix=)``)
        #: and needs no directories; otherwise directories are made before a create.
        self.object_store = object_store
        self.fs = fs
        self.root = root.rstrip("/")  # kept as the filesystem spells it (a local root starts with "/")
        self.call = call
        self.capabilities = capabilities
        self.url = url

    def _where(self, path: str) -> str:
        return f"{path!r} below {self.url}"

    def _error_context(self) -> dict[str, Any]:
        return {"url": self.url}

    # -- primitives --------------------------------------------------------------------

    def _list_objects(self, prefix: str, *, what: str) -> list[ObjectInfo]:
        parent, _, base = prefix.rpartition("/")
        kwargs = {"prefix": base} if self.object_store else {}
        try:
            found = self.call(what, prefix, self.fs.find, parent or self.root, detail=True, **kwargs)
        except NotFound:
            return []
        items: dict[str, dict[str, Any]] = {}
        for name, info in found.items():
            name = str(name).rstrip("/")
            if info.get("type") != "file" or not name.startswith(prefix):
                continue
            items[name] = info
        out = []
        for name, info in sorted(items.items()):
            is_base = PART_MARK not in name
            if not is_base:
                _check_own_part(name, self.url)
            meta = self._metadata(name, items, what) if is_base else None
            out.append(ObjectInfo(name, int(info.get("size") or 0), _version(info) if is_base else "", meta))
        return out

    def _is_marker(self, key: str, name: str) -> bool:
        return name.startswith(key + META_MARK)

    def _metadata(self, key: str, items: Mapping[str, Mapping[str, Any]], what: str) -> dict[str, str]:
        """The base ``key``'s metadata, from the markers in the same listing."""
        meta = {META_ID: SEGMENT_ID}
        mark = key + META_MARK
        if mark + SEAL_LOCK not in items:
            return meta
        meta[META_SEALED] = "true"
        for name in items:
            if name.startswith(mark + SEALED_SIZE_PREFIX):
                meta[META_SEALED_SIZE] = name[len(mark + SEALED_SIZE_PREFIX):]
                break
        else:  # a seal cut short before its second marker: the lock holds the size
            meta[META_SEALED_SIZE] = self._read_text(mark + SEAL_LOCK, what)
        return meta

    def _read_text(self, name: str, what: str) -> str:
        try:
            return bytes(self.call(what, name, self.fs.cat_file, name)).decode("ascii", "replace").strip()
        except NotFound:
            return ""

    def _create_object(self, name: str, data: bytes, metadata: Mapping[str, str] | None, *,
                       what: str) -> ObjectInfo | None:
        # The metadata the layout gives a new base is only the segment id, which is constant here.
        parent = name.rsplit("/", 1)[0]
        if parent and not self.object_store:
            self.call(what, name, self.fs.makedirs, parent, exist_ok=True)
        is_base = PART_MARK not in name
        try:
            self.call(what, name, self.fs.pipe_file, name, bytes(data), mode="create")
        except FileExistsError:
            # The segment id is constant here, so the layout cannot tell this call's own
            # base (a create the library resent after a lost answer: s3fs and gcsfs retry)
            # from another writer's by its id: by its bytes it can. Identical bytes are the
            # state this create would have made; anything else is someone else's object.
            if is_base and data and self._holds(name, bytes(data), what):
                return ObjectInfo(name, len(data), "", {META_ID: SEGMENT_ID})
            return None
        return ObjectInfo(name, len(data), "", {META_ID: SEGMENT_ID} if is_base else None)

    def _holds(self, name: str, data: bytes, what: str) -> bool:
        try:
            info = self.call(what, name, self.fs.info, name)
            if int(info.get("size") or 0) != len(data):
                return False
            return bytes(self.call(what, name, _cat_range, self.fs, name, 0, len(data))) == data
        except (NotFound, _PastEnd):
            return False

    def _read_object(self, name: str, start: int, length: int, *, what: str) -> bytes:
        try:
            return bytes(self.call(what, name, _cat_range, self.fs, name, start, start + length))
        except _PastEnd:
            raise NotFound(name, "is shorter than the range: it was replaced") from None

    def _delete_object(self, name: str, *, version: str | None = None, what: str) -> bool:
        if version:
            try:
                info = self.call(what, name, self.fs.info, name)
            except NotFound:
                return False
            if _version(info) != version:
                return False
        try:
            self.call(what, name, self.fs.rm_file, name)
        except NotFound:
            return False
        return True

    def _update_metadata(self, name: str, metadata: Mapping[str, str], *, version: str,
                         what: str) -> ObjectInfo | None:
        try:
            info = self.call(what, name, self.fs.info, name)
        except NotFound:
            return None
        if version and _version(info) != version:
            return None
        if metadata.get(META_SEALED) == "true":
            size = str(metadata.get(META_SEALED_SIZE, ""))
            if not size.isdigit():
                raise ValueError(f"a seal needs {META_SEALED_SIZE}")  # the layout always gives it
            mark = name + META_MARK
            if self._create_object(mark + SEAL_LOCK, size.encode("ascii"), None, what=what) is None:
                if self._read_text(mark + SEAL_LOCK, what) != size:
                    return None  # another seal, of another size, won
            self._create_object(mark + SEALED_SIZE_PREFIX + size, b"", None, what=what)
        meta = {META_ID: SEGMENT_ID, **{k: v for k, v in metadata.items() if k != META_ID}}
        return ObjectInfo(name, int(info.get("size") or 0), _version(info), meta)

    # -- operations that differ ------------------------------------------------------------

    def delete(self, path: str) -> None:
        """Parts (last first), then the seal markers, then the base: a crash at any point
        leaves a shorter segment that the next delete finishes, and never parts or a seal
        that a new segment at this path would inherit. A part after a gap is not the
        segment's (see :meth:`SegmentView.own_garbage`): it is kept, and logged."""
        key = self._key(path)
        end = self._view(key, path).size
        items = self._list_objects(key + PART_MARK, what=f"list parts of {path!r}")
        parts = sorted(own_part_names(key, [i for i in items if not i.name.startswith(key + META_MARK)],
                                      SEGMENT_ID, path, self.name, end=end), reverse=True)
        marks = sorted((i.name for i in items if i.name.startswith(key + META_MARK)), reverse=True)
        for name in parts + marks:
            self._delete_object(name, what=f"delete part of {path!r}")
        self._delete_object(key, what=f"delete {path!r}")


class _PastEnd(Exception):
    pass


def _check_own_part(name: str, url: str) -> None:
    """Refuse a part named by another segment id than this layout's constant one: another
    layout wrote it (the s3 driver names each segment's parts by a random id). Read as this
    layout's, its bytes would be missing from the segment and taken for garbage at the next
    seal or delete, so nothing of the segment is touched."""
    seg_id = name.split(PART_MARK, 1)[1].partition("/")[0]
    if seg_id not in (SEGMENT_ID, META_MARK[len(PART_MARK):].rstrip("/")):
        raise StateConflict(
            f"fsspec: {name!r} below {url} is a part of another driver's layout (segment id {seg_id!r}); the "
            "fsspec driver neither reads nor removes it. Open this tier with the driver that wrote it "
            "(the s3 driver names parts this way)", path=name, url=url)


def _cat_range(fs: Any, name: str, start: int, end: int) -> bytes:
    try:
        return fs.cat_file(name, start=start, end=end)
    except OSError as exc:  # s3fs: a range past the end is EINVAL
        if exc.errno == errno.EINVAL:
            raise _PastEnd() from None
        raise
    except Exception as exc:  # gcsfs: HttpError 416 (not an OSError)
        if getattr(exc, "code", None) == 416 or getattr(exc, "status", None) == 416:
            raise _PastEnd() from None
        raise


def _version(info: Mapping[str, Any]) -> str:
    """The object's version token; the same whether ``info`` came from a listing or a stat
    (some filesystems give a datetime in one and its timestamp in the other)."""
    for field in _VERSION_FIELDS:
        value = info.get(field)
        if value in (None, ""):
            continue
        if isinstance(value, datetime.datetime):
            value = value.timestamp()
        return repr(float(value)) if isinstance(value, (int, float)) and field != "generation" else str(value)
    return ""
