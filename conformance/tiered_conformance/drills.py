"""The fault-planting kit: plant each kind of damage ``tiered verify`` finds, for tests and drills.

Run it on a *copy* of a store (:func:`copy_store` makes one of a posix store), never on a
store in service: it writes through the raw driver (``config.open_driver()``, no fence, no
ownership) and the metadata store directly, so the store must be closed.

    from tiered_conformance.drills import FAULTS, copy_store, plant
    drill = copy_store(config, "/tmp/drill")
    planted = plant(drill, "flipped_byte", seed=3)
    # tiered verify --config ... --deep  -> finds planted.expected_kind at planted.subject

Each name in :data:`FAULTS` plants one fault and returns a :class:`PlantedFault`: the kind
of finding verify reports for it (:class:`~tiered_core.ops.findings.FindingKind`), the
subject it names (a backend object path, or the tier prefix for ownership faults), what was
done, and the queue offsets whose messages the fault damaged (None when no message is
lost). ``topic`` / ``queue_id`` choose the queue (default: one picked by ``seed`` among the
queues that allow the fault); :class:`~tiered_core.errors.IllegalParam` says when the store
holds nothing the fault can be planted in (e.g. no uploaded key index, or a queue with a
single consume-queue segment for ``unlisted_segment``).

Rewriting an object is read it, delete it, create it, write the new bytes, seal it again
if it was sealed: fine for a drill, not atomic. Works on every driver (posix, and the
object stores: gcs, azure, s3).
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any

from tiered_conformance.drill_faults import DRILL_OWNER_ID, PLANTERS, Drill, PlantedFault
from tiered_core.codec.naming import parse_segment_path
from tiered_core.common import FileSegmentType
from tiered_core.errors import IllegalParam
from tiered_core.flat.ownership import read_store_id
from tiered_core.ops import identity
from tiered_core.ops.findings import FindingKind

FAULTS: tuple[str, ...] = (
    "flipped_byte", "replaced_message", "truncated_segment", "deleted_object", "extra_object", "unlisted_segment",
    "metadata_past_end", "wrong_sealed_flag", "index_entry_wrong", "index_deleted", "index_unreadable",
    "bad_tail", "bad_times", "stale_owner", "owner_deleted",
)

#: The finding each fault makes ``tiered verify`` report (``--deep`` for the deep ones: :data:`DEEP`).
EXPECTED: dict[str, FindingKind] = {
    "flipped_byte": FindingKind.CORRUPT_MESSAGE,
    "replaced_message": FindingKind.CHECKSUM_MISMATCH,
    "truncated_segment": FindingKind.LOST_BYTES,
    "deleted_object": FindingKind.MISSING_OBJECT,
    "extra_object": FindingKind.UNLISTED_OBJECT,
    "unlisted_segment": FindingKind.UNLISTED_OBJECT,
    "metadata_past_end": FindingKind.LOST_BYTES,
    "wrong_sealed_flag": FindingKind.SEALED_MISMATCH,
    "index_entry_wrong": FindingKind.INDEX_ENTRY_WRONG,
    "index_deleted": FindingKind.INDEX_MISSING,
    "index_unreadable": FindingKind.INDEX_UNREADABLE,
    "bad_tail": FindingKind.BAD_TAIL,
    "bad_times": FindingKind.TIME_BOUNDS_MISMATCH,
    "stale_owner": FindingKind.OWNER_OTHER,
    "owner_deleted": FindingKind.OWNER_MISSING,
}

#: Faults only ``tiered verify --deep`` finds (they need the messages read).
DEEP: frozenset[str] = frozenset({"flipped_byte", "index_entry_wrong", "bad_times"})

#: Faults only ``tiered verify --checksums`` finds (every read check passes).
CHECKSUMS: frozenset[str] = frozenset({"replaced_message"})

#: Faults that need the backend listing only (planted and found the same way on every driver).
LISTING: frozenset[str] = frozenset({"truncated_segment", "deleted_object", "extra_object", "unlisted_segment", "index_deleted",
                                     "metadata_past_end", "wrong_sealed_flag", "bad_tail", "stale_owner",
                                     "owner_deleted"})


def copy_store(config: Any, dest: str | os.PathLike[str]) -> Any:
    """A copy of the closed posix store ``config`` under ``dest``: the store directory to
    ``dest/store`` (with the tier root when it lies inside it, as by default), a tier root
    outside it to ``dest/tier``, a metadata file outside it to ``dest/metadata/``. Returns
    the copy's config (same cluster and broker, so the same paths in the tier). Raises
    :class:`IllegalParam` for another driver than posix or a ``dest`` that exists."""
    dest = os.path.abspath(os.fspath(dest))
    if config.driver != "posix":
        raise IllegalParam(f"copy_store copies posix stores only, not driver {config.driver!r}: copy the "
                           "bucket with the backend's own tools", driver=config.driver)
    if os.path.exists(dest):
        raise IllegalParam(f"copy_store: destination {dest!r} exists; give a new directory", path=dest)
    os.makedirs(dest)
    src = os.path.abspath(config.store_path)
    store = os.path.join(dest, "store")

    def moved(path: str, outside: str) -> str:
        path = os.path.abspath(path)
        if os.path.commonpath([path, src]) == src:
            return os.path.join(store, os.path.relpath(path, src))
        return os.path.join(outside, os.path.basename(path)) if outside.endswith("metadata") else outside

    if os.path.isdir(src):
        shutil.copytree(src, store, symlinks=True, copy_function=copy_sparse)
    else:
        os.makedirs(store)
    root = config.effective_driver_options()["root"]
    new_root = moved(root, os.path.join(dest, "tier"))
    if not os.path.exists(new_root) and os.path.isdir(root):
        shutil.copytree(root, new_root, symlinks=True, copy_function=copy_sparse)
    changes: dict[str, Any] = {"store_path": store, "driver_options": {**dict(config.driver_options),
                                                                       "root": new_root}}
    if config.metadata_path is not None:
        new_meta = moved(config.metadata_path, os.path.join(dest, "metadata"))
        if not os.path.exists(new_meta):
            os.makedirs(os.path.dirname(new_meta), exist_ok=True)
            for suffix in ("", "-wal", "-shm", ".bak"):
                if os.path.exists(config.metadata_path + suffix):
                    copy_sparse(config.metadata_path + suffix, new_meta + suffix)
        changes["metadata_path"] = new_meta
    copy = config.replace(**changes)
    _record_moved_identity(copy)
    with open(os.path.join(dest, CONFIG_FILE), "w", encoding="utf-8") as fh:
        fh.write(copy.to_toml())
    return copy


#: The copy's config file, written by :func:`copy_store` (``tiered verify --config dest/tiered.toml``).
CONFIG_FILE = "tiered.toml"


def _record_moved_identity(copy: Any) -> None:
    """The copy is the same store at a new tier location: record that location as its own
    (in its directory and its metadata), as an operator's first open of a moved store does,
    so that writers (``tiered repair --apply``) accept it."""
    store_id = read_store_id(copy.store_path)
    if store_id is None or identity.read_local(copy.store_path) is None:
        return
    moved = identity.StoreIdentity.of(copy)
    identity.write_local(copy.store_path, moved, store_id)
    metadata = copy.open_metadata()
    try:
        if identity.read_metadata(metadata) is not None:
            identity.write_metadata(metadata, moved)
            metadata.flush()
    finally:
        metadata.close()


def data_regions(fd: int, size: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` byte ranges of the open file ``fd`` (``size`` bytes) that hold data,
    in order; the rest are holes. Where the platform or the filesystem cannot tell
    (no ``SEEK_DATA``, or it refuses), the whole file is one region: never a hole by guess."""
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)] if size else []
    regions, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole from pos to the end
                break
            return [(0, size)]
        end = os.lseek(fd, start, os.SEEK_HOLE)
        regions.append((start, end))
        pos = end
    return regions


def copy_sparse(src: str, dst: str, *, follow_symlinks: bool = True) -> str:
    """``shutil.copy2`` that keeps holes: a store's local index files are large and mostly
    never written (sparse), and a plain copy would write every zero."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        for start, end in data_regions(fin.fileno(), size):
            fin.seek(start)
            fout.seek(start)
            remaining = end - start
            while remaining:
                chunk = fin.read(min(remaining, 8 << 20))
                if not chunk:
                    break
                fout.write(chunk)
                remaining -= len(chunk)
        fout.truncate(size)
    shutil.copystat(src, dst, follow_symlinks=follow_symlinks)
    return dst


def plant(config: Any, fault: str, *, topic: str | None = None, queue_id: int | None = None,
          seed: int = 0) -> PlantedFault:
    """Plant ``fault`` (a name of :data:`FAULTS`) in the closed store ``config`` (a
    :class:`~tiered_core.config.StoreConfig`) through its raw driver and its metadata store;
    ``topic`` / ``queue_id`` restrict the queue, ``seed`` makes every choice repeatable.
    Returns what was planted. Raises :class:`IllegalParam` for an unknown fault or a store
    with nothing to plant it in, and what the driver or the metadata raise."""
    planter = PLANTERS.get(fault)
    if planter is None:
        raise IllegalParam(f"unknown drill fault {fault!r}; known: {', '.join(FAULTS)}", fault=fault)
    drill = Drill(config, seed)
    try:
        return planter(drill, topic, queue_id)
    finally:
        drill.close()


def segment_of(path: str) -> tuple[str, int, FileSegmentType, int] | None:
    """``(topic, queue id, type, base offset)`` of a segment path, None for another object."""
    try:
        info = parse_segment_path(path)
    except IllegalParam:
        return None
    return info.topic, info.queue_id, info.file_type, info.base_offset


assert set(FAULTS) == set(EXPECTED) == set(PLANTERS)

__all__ = ["CHECKSUMS", "DEEP", "DRILL_OWNER_ID", "EXPECTED", "FAULTS", "LISTING", "PlantedFault", "copy_sparse",
           "copy_store", "data_regions", "plant", "segment_of"]
