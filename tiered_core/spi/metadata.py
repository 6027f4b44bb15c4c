"""The metadata store SPI (RIP-65 ``TieredMetadataStore``, snake_case).

A metadata store remembers what the tiered store has written: topics (with the
numeric id the index uses), queues (min/max offsets) and file segments (path,
type, base offset, committed size, status and timestamps). At start the flat files
are rebuilt from it, so it is the source of truth for which segments exist.

Entities are plain mutable dataclasses with RocketMQ's fields in snake_case. A
store hands out copies: changing a returned entity changes nothing until it is
passed back to an ``update_*`` method.

Timestamps are milliseconds since the epoch (Java ``currentTimeMillis``).
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from tiered_core.common import NO_TIMESTAMP, FileSegmentType, SegmentStatus, now_ms
from tiered_core.errors import IllegalParam, InvalidOption, MetadataError



@dataclass
class TopicMetadata:
    """A topic: ``topic_id`` is allocated by the store (0, 1, 2... never reused).

    ``reserve_time`` is in hours; -1 or 0 means "use the configured default".
    ``status`` has no defined codes (RocketMQ leaves it 0).
    """

    topic_id: int
    topic: str
    reserve_time: int = -1
    status: int = 0
    update_timestamp: int = 0


@dataclass
class QueueMetadata:
    """A queue of a topic. A new queue has ``min_offset == max_offset == base offset``.

    ``broker_name`` is RocketMQ's ``MessageQueue.brokerName``, kept so a
    ``tieredStoreMetadata.json`` round-trips; it is not part of the key.
    """

    topic: str
    queue_id: int
    min_offset: int = -1
    max_offset: int = -1
    update_timestamp: int = 0
    broker_name: str = ""


@dataclass
class FileSegmentMetadata:
    """One file segment, keyed by ``(type, path, base_offset)``.

    ``path`` is the flat file's logical path (the segment's directory), ``type`` a
    ``FileSegmentType`` value, ``size`` the committed size (commit position).
    ``begin_timestamp``/``end_timestamp`` are :data:`NO_TIMESTAMP` while empty.

    ``checksum`` is the CRC-32 (zlib's) of the object's first ``checksum_size`` bytes as
    this store wrote them, or None when the store does not know it (a record made by a
    rebuild, an older version, or a metadata store that keeps no checksums). A segment
    is append-only, so the pair stays true when ``size`` grows past it; ``tiered verify
    --deep`` compares it with the object (RocketMQ has no such field).
    """

    path: str
    type: FileSegmentType
    base_offset: int
    size: int = 0
    status: SegmentStatus = SegmentStatus.NEW
    create_timestamp: int = 0
    begin_timestamp: int = NO_TIMESTAMP
    end_timestamp: int = NO_TIMESTAMP
    seal_timestamp: int = 0
    checksum: int | None = None
    checksum_size: int = 0

    def __post_init__(self) -> None:
        # Plain ints (from a store, a file) become the enums; anything else is left for
        # check_segment_metadata to reject with a typed error.
        if _is_int(self.type) and self.type in _TYPES:
            self.type = FileSegmentType(self.type)
        if _is_int(self.status) and self.status in _STATUSES:
            self.status = SegmentStatus(self.status)

    def mark_sealed(self, timestamp: int | None = None) -> "FileSegmentMetadata":
        """Set status SEALED and the seal time (now unless given); returns self."""
        self.status = SegmentStatus.SEALED
        self.seal_timestamp = now_ms() if timestamp is None else timestamp
        return self

    @property
    def key(self) -> tuple[int, str, int]:
        return (int(self.type), self.path, self.base_offset)


_TYPES = frozenset(int(t) for t in FileSegmentType)
_STATUSES = frozenset(int(s) for s in SegmentStatus)


# -- argument checks shared by every store ------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_topic(topic: Any) -> str:
    if not isinstance(topic, str) or not topic:
        raise IllegalParam(f"topic must be a non-empty string, got {topic!r}", topic=topic)
    return topic


def check_queue_id(queue_id: Any) -> int:
    if not _is_int(queue_id) or queue_id < 0:
        raise IllegalParam(f"queue_id must be an int >= 0, got {queue_id!r}", queue_id=queue_id)
    return int(queue_id)


def check_segment_type(segment_type: Any) -> FileSegmentType:
    if not _is_int(segment_type) or segment_type not in _TYPES:
        raise IllegalParam(
            f"segment type must be a FileSegmentType (0 COMMIT_LOG, 1 CONSUME_QUEUE, 2 INDEX), "
            f"got {segment_type!r}", type=segment_type)
    return FileSegmentType(segment_type)


def check_segment_path(path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise IllegalParam(f"segment path must be a non-empty string, got {path!r}", path=path)
    return path


def check_base_offset(base_offset: Any) -> int:
    if not _is_int(base_offset) or base_offset < 0:
        raise IllegalParam(f"base_offset must be an int >= 0, got {base_offset!r}", base_offset=base_offset)
    return int(base_offset)


def _check_ints(entity: Any, *names: str) -> None:
    if all(type(getattr(entity, name)) is int for name in names):  # the common case, checked fast
        return
    for name in names:
        value = getattr(entity, name)
        if not _is_int(value):
            raise IllegalParam(f"{type(entity).__name__}.{name} must be an int, got {value!r}",
                               **{name: value})


def check_property(key: Any, value: Any = "", *, allow_none: bool = False) -> str:
    """Check a store property's key (a non-empty string) and value (a string, or None when allowed)."""
    if not isinstance(key, str) or not key:
        raise IllegalParam(f"a store property key must be a non-empty string, got {key!r}", key=key)
    if not (isinstance(value, str) or (allow_none and value is None)):
        raise IllegalParam(f"store property {key!r}: the value must be a string, got {type(value).__name__}",
                           key=key)
    return key


def check_topic_metadata(m: Any) -> TopicMetadata:
    if not isinstance(m, TopicMetadata):
        raise IllegalParam(f"expected TopicMetadata, got {type(m).__name__}", value=m)
    check_topic(m.topic)
    _check_ints(m, "topic_id", "reserve_time", "status", "update_timestamp")
    if m.topic_id < 0:
        raise IllegalParam(f"topic_id must be >= 0, got {m.topic_id} for topic {m.topic!r}",
                           topic_id=m.topic_id, topic=m.topic)
    return m


def check_queue_metadata(m: Any) -> QueueMetadata:
    if not isinstance(m, QueueMetadata):
        raise IllegalParam(f"expected QueueMetadata, got {type(m).__name__}", value=m)
    check_topic(m.topic)
    check_queue_id(m.queue_id)
    _check_ints(m, "min_offset", "max_offset", "update_timestamp")
    if not isinstance(m.broker_name, str):
        raise IllegalParam(f"QueueMetadata.broker_name must be a str, got {m.broker_name!r}",
                           broker_name=m.broker_name)
    return m


def check_segment_metadata(m: Any) -> FileSegmentMetadata:
    if not isinstance(m, FileSegmentMetadata):
        raise IllegalParam(f"expected FileSegmentMetadata, got {type(m).__name__}", value=m)
    check_segment_path(m.path)
    check_segment_type(m.type)
    check_base_offset(m.base_offset)
    _check_ints(m, "size", "status", "create_timestamp", "begin_timestamp", "end_timestamp",
                "seal_timestamp")
    if m.size < 0:
        raise IllegalParam(f"size must be >= 0, got {m.size} for segment {m.path!r}@{m.base_offset}",
                           size=m.size, path=m.path)
    if m.checksum is not None and (not _is_int(m.checksum) or not 0 <= m.checksum <= 0xFFFFFFFF):
        raise IllegalParam(f"checksum must be a CRC-32 (0..2**32-1) or None, got {m.checksum!r} "
                           f"for segment {m.path!r}@{m.base_offset}", checksum=m.checksum, path=m.path)
    if not _is_int(m.checksum_size) or m.checksum_size < 0:
        raise IllegalParam(f"checksum_size must be an int >= 0, got {m.checksum_size!r} "
                           f"for segment {m.path!r}@{m.base_offset}", checksum_size=m.checksum_size, path=m.path)
    if m.status not in tuple(SegmentStatus):
        raise IllegalParam(f"status must be 0 NEW, 1 SEALED or 2 DELETED, got {m.status!r} "
                           f"for segment {m.path!r}@{m.base_offset}", status=m.status, path=m.path)
    return m


def parse_options(store: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``options`` against ``defaults`` (name -> default value) and coerce strings.

    Strings (from config files, the CLI, environment) are converted to the type of
    the default (bool, int, float). Raises :class:`InvalidOption` naming every unknown
    option, or the option whose value cannot be converted.
    """
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise InvalidOption(
            f"metadata store {store!r} has no option(s) {', '.join(map(repr, unknown))}; "
            f"accepted options: {', '.join(sorted(defaults)) or '(none)'}",
            option=unknown[0], options=unknown, store=store)
    out = dict(defaults)
    for key, value in options.items():
        default = defaults[key]
        kind = type(default)
        if isinstance(value, str) and kind is not str:
            text = value.strip().lower()
            try:
                if kind is bool:
                    if text not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                        raise ValueError(value)
                    value = text in ("1", "true", "yes", "on")
                else:
                    value = kind(text)
            except ValueError:
                raise InvalidOption(f"option {key!r} of metadata store {store!r} must be "
                                    f"{kind.__name__}, got {value!r}", option=key, store=store) from None
        elif default is not None and not isinstance(value, kind) and not (kind is float and _is_int(value)):
            raise InvalidOption(f"option {key!r} of metadata store {store!r} must be "
                                f"{kind.__name__}, got {value!r}", option=key, store=store)
        out[key] = value
    return out


class TieredMetadataStore(abc.ABC):
    """Topics, queues and file segments of one tiered store (RIP-65).

    Contract (proved by ``tiered_conformance.MetadataStoreConformance``):

    - Constructor ``(path: str, **options)``: opens or creates the store at ``path``
      (a file). Unknown options raise :class:`~tiered_core.errors.InvalidOption`
      naming them; a file that cannot be read raises
      :class:`~tiered_core.errors.MetadataError` naming the path (and, for text
      formats, the position).
    - Durability: a mutating call made outside :meth:`transaction` is durable when
      it returns (it survives a process crash and, with the default settings, a power
      loss). Inside a transaction, the changes become durable together when the
      outermost ``with`` block exits without an exception; if it raises, none of
      them is applied.
    - ``update_*`` methods are upserts and return the stored entity. Getters return
      ``None`` for what does not exist. Every entity returned is a copy.
    - ``iterate_*`` methods yield entries ordered by key and may be consumed lazily;
      the caller may update or delete entries while iterating. An entry that exists
      for the whole iteration is yielded exactly once; one added or changed meanwhile
      may or may not show.
    - Thread-safe: any thread may call any method. A transaction is held by one
      thread; other threads' calls wait for it to finish.
    - Bad arguments raise :class:`~tiered_core.errors.IllegalParam` naming them;
      storage failures raise :class:`~tiered_core.errors.MetadataError` naming the
      store's path; using a closed store raises :class:`MetadataError`.
    """

    #: Registry name (what config's ``[tiered] metadata`` selects; ``register(cls)`` reads it).
    name: str = ""
    #: Other names this store answers to (e.g. RocketMQ metadata provider class names).
    aliases: tuple[str, ...] = ()
    #: The file name used in a store root.
    default_filename: str = ""

    path: str

    # -- topics ---------------------------------------------------------------------

    @abc.abstractmethod
    def get_topic(self, topic: str) -> TopicMetadata | None:
        """The topic's metadata, or None."""

    @abc.abstractmethod
    def add_topic(self, topic: str, reserve_time: int = -1) -> TopicMetadata:
        """Create the topic with the next topic id (the first is 0); if it exists, return it unchanged."""

    @abc.abstractmethod
    def update_topic(self, metadata: TopicMetadata, *, touch: bool = True) -> TopicMetadata:
        """Insert or replace the topic (``update_timestamp`` set to now unless ``touch=False``).

        The topic id sequence is raised to at least ``metadata.topic_id``. Raises
        :class:`MetadataError` if another topic already has that id.
        """

    @abc.abstractmethod
    def delete_topic(self, topic: str) -> bool:
        """Remove the topic entry (its queues and segments are not touched); True if it existed.

        Its id is not handed out again.
        """

    @abc.abstractmethod
    def iterate_topics(self) -> Iterator[TopicMetadata]:
        """Every topic, ordered by name."""

    @property
    @abc.abstractmethod
    def max_topic_id(self) -> int:
        """The last topic id handed out (-1 when none was); the next is ``max_topic_id + 1``."""

    @abc.abstractmethod
    def set_max_topic_id(self, value: int) -> None:
        """Set the topic id sequence (RIP-65 ``setMaxTopicId``), e.g. when copying a store.

        Raises :class:`IllegalParam` if a stored topic has a larger id.
        """

    # -- queues ---------------------------------------------------------------------

    @abc.abstractmethod
    def get_queue(self, topic: str, queue_id: int) -> QueueMetadata | None:
        """The queue's metadata, or None (also for an unknown topic)."""

    @abc.abstractmethod
    def add_queue(self, topic: str, queue_id: int, base_offset: int = -1, *,
                  broker_name: str = "") -> QueueMetadata:
        """Create the queue with ``min_offset = max_offset = base_offset``; if it exists, return it unchanged."""

    @abc.abstractmethod
    def update_queue(self, metadata: QueueMetadata, *, touch: bool = True) -> QueueMetadata:
        """Insert or replace the queue (``update_timestamp`` set to now unless ``touch=False``)."""

    @abc.abstractmethod
    def delete_queue(self, topic: str, queue_id: int) -> bool:
        """Remove the queue entry (its segments are not touched); True if it existed."""

    @abc.abstractmethod
    def iterate_queues(self, topic: str | None = None) -> Iterator[QueueMetadata]:
        """The topic's queues ordered by queue id (nothing for an unknown topic).

        With ``topic=None``: every queue, also of topics without a topic entry,
        ordered by (topic, queue_id).
        """

    # -- file segments --------------------------------------------------------------

    @abc.abstractmethod
    def get_file_segment(self, type: int, path: str, base_offset: int) -> FileSegmentMetadata | None:
        """The segment of flat file ``path`` of ``type`` starting at ``base_offset``, or None."""

    @abc.abstractmethod
    def update_file_segment(self, metadata: FileSegmentMetadata) -> FileSegmentMetadata:
        """Insert or replace the segment keyed by ``(type, path, base_offset)``, stored as given."""

    @abc.abstractmethod
    def delete_file_segment(self, type: int, path: str, base_offset: int | None = None) -> int:
        """Delete one segment, or every segment of ``(type, path)`` when ``base_offset`` is None.

        Returns how many were deleted.
        """

    @abc.abstractmethod
    def iterate_file_segments(self, type: int | None = None, path: str | None = None
                              ) -> Iterator[FileSegmentMetadata]:
        """Segments filtered by type and/or path, ordered by (type, path, base_offset)."""

    # -- store properties -------------------------------------------------------------

    def get_property(self, key: str) -> str | None:
        """The value of store property ``key``, or None.

        Store properties are small named records that tools keep beside the store's
        metadata and change in the same :meth:`transaction` as topics, queues and segments
        (e.g. the Spark streaming sink's ledger of committed micro-batches). A store that
        predates them raises :class:`MetadataError`; every first-party store keeps them.
        """
        raise MetadataError(f"metadata store {type(self).__name__} ({getattr(self, 'path', '?')!r}) keeps no "
                            "store properties", path=getattr(self, "path", None), operation="get_property")

    def set_property(self, key: str, value: str | None) -> None:
        """Set store property ``key`` to ``value`` (a string), or remove it with ``None``.

        Same durability and transaction rules as the other updates. Raises
        :class:`IllegalParam` for a key that is not a non-empty string or a value that is
        neither a string nor None.
        """
        raise MetadataError(f"metadata store {type(self).__name__} ({getattr(self, 'path', '?')!r}) keeps no "
                            "store properties", path=getattr(self, "path", None), operation="set_property")

    def iterate_properties(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        """Every ``(key, value)`` whose key starts with ``prefix``, ordered by key."""
        raise MetadataError(f"metadata store {type(self).__name__} ({getattr(self, 'path', '?')!r}) keeps no "
                            "store properties", path=getattr(self, "path", None), operation="iterate_properties")

    # -- lifecycle ------------------------------------------------------------------

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager["TieredMetadataStore"]:
        """Group updates: all of them are applied and made durable at exit, or none (on an exception).

        Transactions nest: an inner block that raises undoes only its own changes.
        """

    @abc.abstractmethod
    def flush(self) -> None:
        """Make everything written so far durable (a no-op when every commit already is)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store; idempotent. Everything committed stays durable."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Delete every entry and the store's files, then close. Reopening the path gives an empty store."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        ...

    def __enter__(self) -> "TieredMetadataStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self, 'path', '?')!r})"

    def _closed_error(self) -> MetadataError:
        return MetadataError(f"metadata store {self.path!r} is closed", path=self.path)


__all__ = [
    "NO_TIMESTAMP",
    "FileSegmentType",
    "SegmentStatus",
    "TopicMetadata",
    "QueueMetadata",
    "FileSegmentMetadata",
    "TieredMetadataStore",
    "now_ms",
    "parse_options",
    "check_topic",
    "check_queue_id",
    "check_segment_type",
    "check_segment_path",
    "check_base_offset",
    "check_topic_metadata",
    "check_property",
    "check_queue_metadata",
    "check_segment_metadata",
]
