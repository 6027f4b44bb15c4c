"""Copy metadata between stores (``tiered metadata convert``): JSON <-> SQLite, or any registered store.

The copy is exact: topic ids, the topic id sequence, update timestamps, every queue
(also of topics without a topic entry) and every segment. The target is built under
a temporary name, read back and compared with the source, and only then moved into
place, so a failed conversion never leaves a half-written target.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from tiered_core.errors import IllegalParam, MetadataError, NotFound
from tiered_core.spi.metadata import TieredMetadataStore

#: File extension -> store name, used when no format is given.
FORMAT_BY_EXTENSION = {
    ".json": "json",
    ".db": "sqlite",
    ".sqlite": "sqlite",
    ".sqlite3": "sqlite",
}

# Files a store may keep beside its main file (SQLite WAL/SHM, JSON backup/temp).
_COMPANION_SUFFIXES = ("-wal", "-shm", "-journal", ".bak", ".tmp")


@dataclass(frozen=True)
class CopyStats:
    """What :func:`copy_metadata` copied."""

    topics: int
    queues: int
    segments: int
    max_topic_id: int


def format_for_path(path: str, explicit: str | None = None) -> str:
    """The store name for ``path``: ``explicit`` if given, else by extension.

    Raises :class:`IllegalParam` naming the path when the extension is not known.
    """
    if explicit:
        return explicit
    ext = os.path.splitext(path)[1].lower()
    name = FORMAT_BY_EXTENSION.get(ext)
    if name is None:
        known = ", ".join(f"{e} ({n})" for e, n in FORMAT_BY_EXTENSION.items())
        raise IllegalParam(f"cannot tell the metadata format of {path!r} from its extension {ext or '(none)'!r}; "
                           f"known: {known}; or give the format explicitly", path=path)
    return name


def copy_metadata(source: TieredMetadataStore, target: TieredMetadataStore) -> CopyStats:
    """Copy everything in ``source`` into ``target`` in one transaction of the target."""
    topics = queues = segments = 0
    with target.transaction():
        for topic in source.iterate_topics():
            target.update_topic(topic, touch=False)
            topics += 1
        max_topic_id = max(source.max_topic_id, target.max_topic_id)
        target.set_max_topic_id(max_topic_id)
        for queue in source.iterate_queues():
            target.update_queue(queue, touch=False)
            queues += 1
        for segment in source.iterate_file_segments():
            target.update_file_segment(segment)
            segments += 1
        for key, value in _properties(source):
            target.set_property(key, value)
    return CopyStats(topics, queues, segments, max_topic_id)


def _properties(store: TieredMetadataStore) -> list[tuple[str, str]]:
    """The store's properties; none for a third-party store that predates them."""
    if type(store).iterate_properties is TieredMetadataStore.iterate_properties:
        return []
    return list(store.iterate_properties())


def same_contents(a: TieredMetadataStore, b: TieredMetadataStore) -> str | None:
    """None if both stores hold equal entities, else a description of the first difference."""
    if a.max_topic_id != b.max_topic_id:
        return f"max_topic_id {a.max_topic_id} != {b.max_topic_id}"
    for what, xs, ys in (
        ("topic", a.iterate_topics(), b.iterate_topics()),
        ("queue", a.iterate_queues(), b.iterate_queues()),
        ("file segment", a.iterate_file_segments(), b.iterate_file_segments()),
        ("store property", iter(_properties(a)), iter(_properties(b))),
    ):
        for x, y in zip(xs, ys, strict=False):
            if x != y:
                return f"{what} {x!r} != {y!r}"
        leftover = next(xs, None) or next(ys, None)
        if leftover is not None:
            return f"{what} {leftover!r} is in only one store"
    return None


def convert(source_path: str, target_path: str, *, source_format: str | None = None,
            target_format: str | None = None, force: bool = False,
            source_options: dict[str, Any] | None = None,
            target_options: dict[str, Any] | None = None) -> CopyStats:
    """Copy the metadata store at ``source_path`` into a new store at ``target_path``.

    Formats are store names (``json``, ``sqlite``, or a plugin's), taken from the file
    extension unless given. An existing target is refused unless ``force``, which
    replaces it once the new copy is complete and verified. The source is only read.

    Raises :class:`NotFound` (missing source), :class:`IllegalParam` (unknown
    extension, same file, existing target), :class:`MetadataError` (unreadable
    source, failed write or verification), all naming the path.
    """
    from tiered_core.metadata import metadata_store_class

    source_cls = metadata_store_class(format_for_path(source_path, source_format))
    target_cls = metadata_store_class(format_for_path(target_path, target_format))
    if not os.path.isfile(source_path):
        raise NotFound(source_path, "does not exist or is not a file (nothing to convert)")
    if os.path.abspath(source_path) == os.path.abspath(target_path):
        raise IllegalParam(f"source and target are the same file {source_path!r}", path=source_path)
    if os.path.exists(target_path) and not force:
        raise IllegalParam(f"target {target_path!r} exists; remove it or pass --force to replace it",
                           path=target_path)
    staging = target_path + ".converting"
    _remove_store_files(staging)
    # Only read, in place (no schema or row written into the source) where the store can.
    opener = getattr(source_cls, "open_for_reading", None)
    source = (opener or source_cls)(source_path, **(source_options or {}))
    try:
        try:
            target = target_cls(staging, **(target_options or {}))
            try:
                stats = copy_metadata(source, target)
            finally:
                target.close()
            check = target_cls(staging, **(target_options or {}))
            try:
                difference = same_contents(source, check)
            finally:
                check.close()
            if difference is not None:
                raise MetadataError(f"converting {source_path!r} to {target_path!r}: the copy reads back "
                                    f"different: {difference}", path=target_path)
            _remove_store_files(target_path)
            for suffix in _COMPANION_SUFFIXES:  # normally none is left after close
                if os.path.exists(staging + suffix):
                    os.replace(staging + suffix, target_path + suffix)
            os.replace(staging, target_path)
        except OSError as exc:
            raise MetadataError(f"converting {source_path!r} to {target_path!r} failed: {exc}",
                                path=target_path) from exc
    except BaseException:
        _remove_store_files(staging)
        raise
    finally:
        source.close()
    return stats


def _remove_store_files(path: str) -> None:
    for suffix in ("",) + _COMPANION_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)
