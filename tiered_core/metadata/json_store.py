"""A metadata store in RocketMQ's ``tieredStoreMetadata.json`` format.

RocketMQ's ``DefaultMetadataStore`` keeps everything in memory and rewrites the
whole file on every change. The file is fastjson's pretty output of
``TieredMetadataSerializeWrapper``: properties in alphabetical order, and the maps
keyed by Integer/Long (queue id, base offset) written with **unquoted** keys
(``{0:{...}}``), which is not standard JSON.

This store reads such a file unchanged (bare integer keys are quoted before
parsing, outside string literals only) and writes standard JSON with quoted keys
and the same field names and order. fastjson reads quoted keys into the typed
``Integer``/``Long`` maps, so RocketMQ loads what this store writes.

Persistence is atomic: the new text goes to ``<file>.tmp``, is fsynced, renamed
over the file and the directory is fsynced. ``<file>.bak`` (where RocketMQ moves
the previous version while it writes) is read only when the file itself is
missing or empty.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from typing import Any, Iterator, TypeVar

from tiered_core.common import NO_TIMESTAMP, FileSegmentType, fsync_dir, now_ms
from tiered_core.errors import IllegalParam, MetadataError
from tiered_core.spi.metadata import (
    FileSegmentMetadata,
    QueueMetadata,
    TieredMetadataStore,
    TopicMetadata,
    check_base_offset,
    check_queue_id,
    check_queue_metadata,
    check_segment_metadata,
    check_segment_path,
    check_property,
    check_segment_type,
    check_topic,
    check_topic_metadata,
    parse_options,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The wrapper's segment tables, by FileSegmentType.
SEGMENT_TABLES = {
    FileSegmentType.COMMIT_LOG: "commitLogFileSegmentTable",
    FileSegmentType.CONSUME_QUEUE: "consumeQueueFileSegmentTable",
    FileSegmentType.INDEX: "indexFileSegmentTable",
}

#: Store properties (``get_property``/``set_property``), a field RocketMQ does not have: written
#: only when there are some (fastjson ignores an unknown field), in the alphabetical place.
PROPERTIES_TABLE = "storeProperties"

_MISSING: Any = object()

# A string literal (skipped whole) or a bare integer object key after "{" or ",".
# In valid JSON a number after "{" or "," and before ":" can only be a key, so this
# never touches values.
_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|(?<=[{,])(\s*)(-?\d+)(?=\s*:)', re.S)


class JsonMetadataStore(TieredMetadataStore):
    """:class:`TieredMetadataStore` in a ``tieredStoreMetadata.json`` file (RocketMQ's format).

    Everything lives in memory; every committed change rewrites the whole file
    atomically (temp file, fsync, rename, directory fsync), so one update costs time
    proportional to the store's size: use it for compatibility and small stores, and
    group updates with :meth:`transaction`.

    Options: ``pretty`` (default true: tab-indented like RocketMQ; false writes
    compact JSON), ``fsync`` (default true; false skips the fsyncs, for tests only).

    Opening a file that is not valid JSON (bare integer keys allowed) or does not
    have the wrapper's shape raises :class:`MetadataError` naming the path and the
    line/column or the JSON location.
    """

    name = "json"
    #: RocketMQ's ``tieredMetadataServiceProvider`` class, whose file format this store writes.
    aliases = ("org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore", "DefaultMetadataStore")
    default_filename = "tieredStoreMetadata.json"

    _OPTIONS: dict[str, Any] = {"pretty": True, "fsync": True}

    #: True for a private in-memory copy (:meth:`open_read_only`): nothing reaches the file.
    read_only = False

    def __init__(self, path: str, **options: Any) -> None:
        self._setup(path, options)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        except OSError as exc:
            raise MetadataError(f"cannot create the directory of metadata store {self.path!r}: {exc}",
                                path=self.path) from exc
        source = self._pick_source()
        if source is not None:
            self._load(source)

    @classmethod
    def open_read_only(cls, path: str, **options: Any) -> "JsonMetadataStore":
        """The store at ``path`` (or its ``.bak``) loaded into memory, and never written back:
        updates change only this copy, :meth:`destroy` is refused, nothing is created. A
        missing file reads as an empty store. Raises :class:`MetadataError` like the
        constructor for a file that cannot be read."""
        self = cls.__new__(cls)
        self._setup(path, options)
        self.read_only = True
        source = self._pick_source()
        if source is not None:
            self._load(source)
        return self

    def _setup(self, path: str, options: dict[str, Any]) -> None:
        opts = parse_options(self.name, options, self._OPTIONS)
        self.path = os.fspath(path)
        self.pretty = bool(opts["pretty"])
        self.fsync = bool(opts["fsync"])
        self._lock = threading.RLock()
        self._depth = 0
        self._undo: list[tuple[dict, Any, Any]] = []
        self._closed = False
        self._topics: dict[str, TopicMetadata] = {}
        self._queues: dict[str, dict[int, QueueMetadata]] = {}
        self._segments: dict[int, dict[str, dict[int, FileSegmentMetadata]]] = {t: {} for t in SEGMENT_TABLES}
        self._state: dict[str, int] = {"serial": -1}
        self._properties: dict[str, str] = {}
        # Pretty text of each segment group ("s", type, path) and queue group ("q", topic),
        # so a persist re-renders only the groups changed since the last one.
        self._rendered: dict[tuple, bytes] = {}
        self._stale: set[tuple] = set()

    # -- loading ----------------------------------------------------------------------

    def _pick_source(self) -> str | None:
        for candidate in (self.path, self.path + ".bak"):
            try:
                if os.path.getsize(candidate) > 0:
                    if candidate != self.path:
                        log.warning("metadata file %r is missing or empty; loading the backup %r",
                                    self.path, candidate)
                    return candidate
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise MetadataError(f"cannot read metadata store {candidate!r}: {exc}", path=candidate) from exc
        return None

    def _load(self, source: str) -> None:
        try:
            with open(source, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise MetadataError(f"cannot read metadata store {source!r}: {exc}", path=source) from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MetadataError(f"{source!r} is not UTF-8 text (byte {exc.start})", path=source,
                                position=exc.start) from exc
        doc = parse_json(text, source)
        _Decoder(source).load_into(self, doc)

    # -- encoding ---------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        """The store as the wrapper object (``TieredMetadataSerializeWrapper``) of plain JSON values."""
        with self._lock:
            doc: dict[str, Any] = {}
            for seg_type, table_name in SEGMENT_TABLES.items():
                doc[table_name] = {
                    path: {str(base): _segment_json(m) for base, m in sorted(by_base.items())}
                    for path, by_base in sorted(self._segments[seg_type].items())
                }
            doc["queueMetadataTable"] = {
                topic: {str(qid): _queue_json(m) for qid, m in sorted(by_id.items())}
                for topic, by_id in sorted(self._queues.items())
            }
            if self._properties:  # absent when empty: the file stays exactly RocketMQ's
                doc[PROPERTIES_TABLE] = dict(sorted(self._properties.items()))
            doc["topicMetadataTable"] = {topic: _topic_json(m) for topic, m in sorted(self._topics.items())}
            doc["topicSerialNumber"] = self._state["serial"]
            return doc

    def encode(self) -> str:
        """The store as ``tieredStoreMetadata.json`` text (standard JSON, RocketMQ's fields).

        Pretty output is exactly ``json.dumps(self.document(), indent="\\t",
        separators=(",", ":"), ensure_ascii=False)`` (fastjson's layout with quoted keys).
        """
        return self.encode_bytes().decode("utf-8")

    def encode_bytes(self) -> bytes:
        """:meth:`encode` as UTF-8 bytes.

        The pretty form is built from templates, and each segment group (one flat
        file's segments) and queue group (one topic's queues) is kept rendered
        until it changes, so persisting after one update re-renders one group and
        joins the rest: the generic encoder would re-encode everything, several
        times slower.
        """
        if not self.pretty:
            return (json.dumps(self.document(), separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        with self._lock:
            rendered: dict[tuple, bytes] = {}
            stale, cache = self._stale, self._rendered
            pieces: list[bytes] = [b"{\n"]

            def table(name: str, groups: list[tuple[tuple, str, Any, dict]]) -> None:
                if not groups:
                    pieces.append(b'\t"%s":{}' % name.encode())
                    return
                pieces.append(b'\t"%s":{\n' % name.encode())
                for i, (key, label, render, entries) in enumerate(groups):
                    block = cache.get(key)
                    if block is None or key in stale:
                        body = ",\n".join(render(k, m) for k, m in sorted(entries.items()))
                        block = f"\t\t{q(label)}:{{\n{body}\n\t\t}}".encode()
                    rendered[key] = block
                    if i:
                        pieces.append(b",\n")
                    pieces.append(block)
                pieces.append(b"\n\t}")

            for seg_type, table_name in SEGMENT_TABLES.items():
                by_path = self._segments[seg_type]
                table(table_name, [(("s", seg_type, path), path, _render_segment, by_path[path])
                                   for path in sorted(by_path)])
                pieces.append(b",\n")
            table("queueMetadataTable", [(("q", topic), topic, _render_queue, self._queues[topic])
                                         for topic in sorted(self._queues)])
            if self._properties:
                props = json.dumps(dict(sorted(self._properties.items())), ensure_ascii=False, indent="\t",
                                   separators=(",", ":")).replace("\n", "\n\t")
                pieces.append(b',\n\t"%s":%s' % (PROPERTIES_TABLE.encode(), props.encode()))
            topics = [_TOPIC_TEMPLATE % (q(name), m.reserve_time, m.status, q(m.topic), m.topic_id,
                                         m.update_timestamp)
                      for name, m in sorted(self._topics.items())]
            pieces.append(b",\n\t\"topicMetadataTable\":")
            pieces.append(("{\n" + ",\n".join(topics) + "\n\t}" if topics else "{}").encode())
            pieces.append(b',\n\t"topicSerialNumber":%d\n}\n' % self._state["serial"])
            self._rendered, self._stale = rendered, set()
        return b"".join(pieces)

    def _persist(self) -> None:
        if self.read_only:
            return  # the copy in memory is all there is
        data = self.encode_bytes()
        tmp = self.path + ".tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            if self.fsync:
                fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise MetadataError(f"cannot write metadata store {self.path!r}: {exc}", path=self.path) from exc

    # -- transactions (undo log) ------------------------------------------------------

    def _put(self, table: dict, key: Any, value: Any) -> None:
        """Set (or with ``_MISSING`` remove) ``table[key]``, remembering how to undo it."""
        self._undo.append((table, key, table.get(key, _MISSING)))
        if value is _MISSING:
            table.pop(key, None)
        else:
            table[key] = value

    def _inner(self, table: dict, key: Any) -> dict:
        inner = table.get(key)
        if inner is None:
            inner = {}
            self._put(table, key, inner)
        return inner

    def _drop_if_empty(self, table: dict, key: Any) -> None:
        if key in table and not table[key]:
            self._put(table, key, _MISSING)

    def _rollback_to(self, mark: int) -> None:
        if len(self._undo) > mark:
            self._rendered.clear()  # rare: simply render everything again
        while len(self._undo) > mark:
            table, key, old = self._undo.pop()
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old

    @contextlib.contextmanager
    def transaction(self) -> Iterator["JsonMetadataStore"]:
        with self._lock:
            self._check_open()
            mark = len(self._undo)
            self._depth += 1
            try:
                yield self
            except BaseException:
                self._depth -= 1
                self._rollback_to(mark)
                raise
            self._depth -= 1
            if self._depth == 0:
                if self._undo:
                    try:
                        self._persist()
                    except BaseException:
                        self._rollback_to(0)
                        raise
                self._undo.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        with self._lock:
            self._check_open()
            yield

    @property
    def closed(self) -> bool:
        return self._closed

    # -- topics -----------------------------------------------------------------------

    def get_topic(self, topic: str) -> TopicMetadata | None:
        check_topic(topic)
        with self._reading():
            m = self._topics.get(topic)
            return _clone(m) if m else None

    def add_topic(self, topic: str, reserve_time: int = -1) -> TopicMetadata:
        check_topic(topic)
        if not isinstance(reserve_time, int) or isinstance(reserve_time, bool):
            raise IllegalParam(f"reserve_time must be an int, got {reserve_time!r}", reserve_time=reserve_time)
        with self.transaction():
            existing = self._topics.get(topic)
            if existing:
                return _clone(existing)
            topic_id = self._state["serial"] + 1
            m = TopicMetadata(topic_id, topic, reserve_time, 0, now_ms())
            self._put(self._state, "serial", topic_id)
            self._put(self._topics, topic, m)
        return _clone(m)

    def update_topic(self, metadata: TopicMetadata, *, touch: bool = True) -> TopicMetadata:
        m = check_topic_metadata(metadata)
        stored = TopicMetadata(m.topic_id, m.topic, m.reserve_time, m.status,
                               now_ms() if touch else m.update_timestamp)
        with self.transaction():
            for other in self._topics.values():
                if other.topic_id == stored.topic_id and other.topic != stored.topic:
                    raise MetadataError(f"topic id {stored.topic_id} of topic {stored.topic!r} already belongs "
                                        f"to topic {other.topic!r} in {self.path!r}",
                                        path=self.path, topic=stored.topic, topic_id=stored.topic_id)
            self._put(self._topics, stored.topic, stored)
            if stored.topic_id > self._state["serial"]:
                self._put(self._state, "serial", stored.topic_id)
        return _clone(stored)

    def delete_topic(self, topic: str) -> bool:
        check_topic(topic)
        with self.transaction():
            if topic not in self._topics:
                return False
            self._put(self._topics, topic, _MISSING)
        return True

    def iterate_topics(self) -> Iterator[TopicMetadata]:
        with self._reading():
            snapshot = sorted(self._topics.items())
        for _, m in snapshot:
            yield _clone(m)

    @property
    def max_topic_id(self) -> int:
        with self._reading():
            return self._state["serial"]

    def set_max_topic_id(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < -1:
            raise IllegalParam(f"max_topic_id must be an int >= -1, got {value!r}", max_topic_id=value)
        with self.transaction():
            highest = max((m.topic_id for m in self._topics.values()), default=None)
            if highest is not None and value < highest:
                raise IllegalParam(f"max_topic_id {value} is below the stored topic id {highest}",
                                   max_topic_id=value)
            if value != self._state["serial"]:
                self._put(self._state, "serial", value)

    # -- queues -----------------------------------------------------------------------

    def get_queue(self, topic: str, queue_id: int) -> QueueMetadata | None:
        check_topic(topic)
        check_queue_id(queue_id)
        with self._reading():
            m = self._queues.get(topic, {}).get(queue_id)
            return _clone(m) if m else None

    def add_queue(self, topic: str, queue_id: int, base_offset: int = -1, *,
                  broker_name: str = "") -> QueueMetadata:
        m = check_queue_metadata(QueueMetadata(topic, queue_id, base_offset, base_offset, now_ms(), broker_name))
        with self.transaction():
            existing = self._queues.get(topic, {}).get(queue_id)
            if existing:
                return _clone(existing)
            self._put(self._inner(self._queues, topic), queue_id, m)
            self._stale.add(("q", topic))
        return _clone(m)

    def update_queue(self, metadata: QueueMetadata, *, touch: bool = True) -> QueueMetadata:
        m = check_queue_metadata(metadata)
        stored = QueueMetadata(m.topic, m.queue_id, m.min_offset, m.max_offset,
                               now_ms() if touch else m.update_timestamp, m.broker_name)
        with self.transaction():
            self._put(self._inner(self._queues, stored.topic), stored.queue_id, stored)
            self._stale.add(("q", stored.topic))
        return _clone(stored)

    def delete_queue(self, topic: str, queue_id: int) -> bool:
        check_topic(topic)
        check_queue_id(queue_id)
        with self.transaction():
            by_id = self._queues.get(topic)
            if not by_id or queue_id not in by_id:
                return False
            self._put(by_id, queue_id, _MISSING)
            self._stale.add(("q", topic))
            self._drop_if_empty(self._queues, topic)
        return True

    def iterate_queues(self, topic: str | None = None) -> Iterator[QueueMetadata]:
        if topic is not None:
            check_topic(topic)
        with self._reading():
            topics = sorted(self._queues) if topic is None else [topic]
            snapshot = [m for name in topics for _, m in sorted(self._queues.get(name, {}).items())]
        for m in snapshot:
            yield _clone(m)

    # -- file segments ----------------------------------------------------------------

    def get_file_segment(self, type: int, path: str, base_offset: int) -> FileSegmentMetadata | None:
        seg_type = check_segment_type(type)
        check_segment_path(path)
        check_base_offset(base_offset)
        with self._reading():
            m = self._segments[seg_type].get(path, {}).get(base_offset)
            return _clone(m) if m else None

    def update_file_segment(self, metadata: FileSegmentMetadata) -> FileSegmentMetadata:
        m = check_segment_metadata(metadata)
        stored = FileSegmentMetadata(m.path, int(m.type), m.base_offset, m.size, int(m.status),
                                     m.create_timestamp, m.begin_timestamp, m.end_timestamp,
                                     m.seal_timestamp, m.checksum, m.checksum_size)
        with self.transaction():
            self._put(self._inner(self._segments[stored.type], stored.path), stored.base_offset, stored)
            self._stale.add(("s", stored.type, stored.path))
        return _clone(stored)

    def delete_file_segment(self, type: int, path: str, base_offset: int | None = None) -> int:
        seg_type = check_segment_type(type)
        check_segment_path(path)
        if base_offset is not None:
            check_base_offset(base_offset)
        with self.transaction():
            table = self._segments[seg_type]
            by_base = table.get(path)
            if not by_base:
                return 0
            self._stale.add(("s", seg_type, path))
            if base_offset is None:
                count = len(by_base)
                self._put(table, path, _MISSING)
                return count
            if base_offset not in by_base:
                return 0
            self._put(by_base, base_offset, _MISSING)
            self._drop_if_empty(table, path)
        return 1

    def iterate_file_segments(self, type: int | None = None, path: str | None = None
                              ) -> Iterator[FileSegmentMetadata]:
        types = SEGMENT_TABLES if type is None else (check_segment_type(type),)
        if path is not None:
            check_segment_path(path)
        for seg_type in types:
            with self._reading():
                table = self._segments[seg_type]
                if path is None:
                    snapshot = [m for _, by_base in sorted(table.items()) for _, m in sorted(by_base.items())]
                else:
                    snapshot = [m for _, m in sorted(table.get(path, {}).items())]
            for m in snapshot:
                yield _clone(m)

    # -- store properties -------------------------------------------------------------

    def get_property(self, key: str) -> str | None:
        check_property(key)
        with self._reading():
            return self._properties.get(key)

    def set_property(self, key: str, value: str | None) -> None:
        check_property(key, value, allow_none=True)
        with self.transaction():
            if value is None:
                if key in self._properties:
                    self._put(self._properties, key, _MISSING)
            elif self._properties.get(key) != value:
                self._put(self._properties, key, value)

    def iterate_properties(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        if not isinstance(prefix, str):
            raise IllegalParam(f"prefix must be a string, got {prefix!r}", prefix=prefix)
        with self._reading():
            items = sorted((k, v) for k, v in self._properties.items() if k.startswith(prefix))
        yield from items

    # -- lifecycle --------------------------------------------------------------------

    def flush(self) -> None:
        with self._reading():
            if self._depth == 0 and self._undo:  # only after a failed persist left nothing pending
                self._persist()
                self._undo.clear()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._depth = 0
            self._undo.clear()

    def destroy(self) -> None:
        if self.read_only:
            raise MetadataError(f"metadata store {self.path!r} is open read-only: destroy refused", path=self.path)
        with self._lock:
            self.close()
            self._topics.clear()
            self._queues.clear()
            self._properties.clear()
            for table in self._segments.values():
                table.clear()
            for suffix in ("", ".bak", ".tmp"):
                try:
                    os.remove(self.path + suffix)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise MetadataError(f"cannot delete metadata store file {self.path + suffix!r}: {exc}",
                                        path=self.path + suffix) from exc


# -- JSON text ------------------------------------------------------------------------


def parse_json(text: str, source: str) -> Any:
    """Parse JSON that may have fastjson's bare integer object keys (``{0:{...}}``).

    Raises :class:`MetadataError` naming ``source`` and the line, column and
    character offset of the error in ``text`` as given.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    except (RecursionError, ValueError) as exc:  # nesting too deep; an int of > 4300 digits
        raise _unparsable(source, exc) from None
    inserted: list[int] = []  # original offsets of the bare keys quoted below

    def quote(match: re.Match) -> str:
        if match.group(2) is None:
            return match.group(0)
        inserted.append(match.start(2))
        return f'{match.group(1)}"{match.group(2)}"'

    fixed = _BARE_KEY.sub(quote, text)
    try:
        return json.loads(fixed)
    except (RecursionError, ValueError) as exc:
        if not isinstance(exc, json.JSONDecodeError):
            raise _unparsable(source, exc) from None
        pos = _original_offset(exc.pos, inserted)
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        raise MetadataError(f"{source!r} is not valid JSON: {exc.msg} at line {line} column {column} "
                            f"(char {pos})" + _backup_hint(source),
                            path=source, line=line, column=column, position=pos) from None


def _unparsable(source: str, exc: BaseException) -> MetadataError:
    """The parser gave up without a position: nesting deeper than its stack (RecursionError)
    or a number too long to convert (ValueError)."""
    why = ("is nested too deeply" if isinstance(exc, RecursionError)
           else f"holds a value that cannot be read ({exc})")
    return MetadataError(f"{source!r} is not valid metadata JSON: it {why}" + _backup_hint(source),
                         path=source)


def _original_offset(pos: int, inserted: list[int]) -> int:
    """Map an offset in the quoted text back to the text as read (each quoted key added 2 chars)."""
    shift = 0
    for start in inserted:
        if start + shift >= pos:  # the key's opening quote sits at start + shift
            break
        shift += 2
    return max(0, pos - shift)


def _backup_hint(source: str) -> str:
    if not source.endswith(".bak") and os.path.exists(source + ".bak"):
        return (f"; a previous version is in {source + '.bak'!r} (RocketMQ moves it there while it writes): "
                "check it and move it into place if it is current")
    return ""


q = json.encoder.encode_basestring  # a JSON string literal, non-ASCII kept as is

_SEGMENT_TEMPLATE = (
    '\t\t\t"%d":{\n\t\t\t\t"baseOffset":%d,\n\t\t\t\t"beginTimestamp":%d,\n%s\t\t\t\t"createTimestamp":%d,\n'
    '\t\t\t\t"endTimestamp":%d,\n\t\t\t\t"path":%s,\n\t\t\t\t"sealTimestamp":%d,\n\t\t\t\t"size":%d,\n'
    '\t\t\t\t"status":%d,\n\t\t\t\t"type":%d\n\t\t\t}')
#: A known checksum's two fields (RocketMQ has neither: written only when known, so a record
#: without one is exactly RocketMQ's; fastjson ignores unknown fields).
_CHECKSUM_TEMPLATE = '\t\t\t\t"checksum":%d,\n\t\t\t\t"checksumSize":%d,\n'
_QUEUE_TEMPLATE = (
    '\t\t\t"%d":{\n\t\t\t\t"maxOffset":%d,\n\t\t\t\t"minOffset":%d,\n\t\t\t\t"queue":{\n'
    '\t\t\t\t\t"brokerName":%s,\n\t\t\t\t\t"queueId":%d,\n\t\t\t\t\t"topic":%s\n\t\t\t\t},\n'
    '\t\t\t\t"updateTimestamp":%d\n\t\t\t}')
_TOPIC_TEMPLATE = (
    '\t\t%s:{\n\t\t\t"reserveTime":%d,\n\t\t\t"status":%d,\n\t\t\t"topic":%s,\n\t\t\t"topicId":%d,\n'
    '\t\t\t"updateTimestamp":%d\n\t\t}')


def _render_segment(base: int, m: FileSegmentMetadata) -> str:
    checksum = "" if m.checksum is None else _CHECKSUM_TEMPLATE % (m.checksum, m.checksum_size)
    return _SEGMENT_TEMPLATE % (base, m.base_offset, m.begin_timestamp, checksum, m.create_timestamp,
                                m.end_timestamp, q(m.path), m.seal_timestamp, m.size, m.status, m.type)


def _render_queue(queue_id: int, m: QueueMetadata) -> str:
    return _QUEUE_TEMPLATE % (queue_id, m.max_offset, m.min_offset, q(m.broker_name), m.queue_id, q(m.topic),
                              m.update_timestamp)


#: RocketMQ's JSON field -> our record's attribute, in the file's (sorted) order.
_SEGMENT_FIELDS = {"baseOffset": "base_offset", "beginTimestamp": "begin_timestamp",
                   "createTimestamp": "create_timestamp", "endTimestamp": "end_timestamp", "path": "path",
                   "sealTimestamp": "seal_timestamp", "size": "size", "status": "status", "type": "type"}
_TOPIC_FIELDS = {"reserveTime": "reserve_time", "status": "status", "topic": "topic", "topicId": "topic_id",
                 "updateTimestamp": "update_timestamp"}


def _segment_json(m: FileSegmentMetadata) -> dict[str, Any]:
    out = {name: getattr(m, attr) for name, attr in _SEGMENT_FIELDS.items()}
    if m.checksum is not None:
        out.update(checksum=m.checksum, checksumSize=m.checksum_size)
        out = dict(sorted(out.items()))
    return out


def _queue_json(m: QueueMetadata) -> dict[str, Any]:
    return {
        "maxOffset": m.max_offset,
        "minOffset": m.min_offset,
        "queue": {"brokerName": m.broker_name, "queueId": m.queue_id, "topic": m.topic},
        "updateTimestamp": m.update_timestamp,
    }


def _topic_json(m: TopicMetadata) -> dict[str, Any]:
    return {name: getattr(m, attr) for name, attr in _TOPIC_FIELDS.items()}


class _Decoder:
    """Turns the parsed wrapper into entities; every error names the file and the JSON location."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> MetadataError:
        return MetadataError(f"{self.source!r}: {where}: {problem}", path=self.source, location=where)

    def obj(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {_kind(value)}")
        return value

    def int_(self, obj: dict, name: str, where: str, default: Any = _MISSING) -> int:
        value = obj.get(name, default)
        if value is _MISSING:
            raise self.fail(f"{where}.{name}", "missing")
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"{where}.{name}", f"expected an integer, got {_kind(value)}")
        return value

    def str_(self, obj: dict, name: str, where: str, default: Any = _MISSING) -> str:
        value = obj.get(name, default)
        if value is _MISSING:
            raise self.fail(f"{where}.{name}", "missing")
        if not isinstance(value, str):
            raise self.fail(f"{where}.{name}", f"expected a string, got {_kind(value)}")
        return value

    def key_int(self, key: str, where: str) -> int:
        try:
            return int(key)
        except ValueError:
            raise self.fail(where, f"key {key!r} is not an integer") from None

    def load_into(self, store: JsonMetadataStore, doc: Any) -> None:
        root = self.obj(doc, "$")
        for seg_type, table_name in SEGMENT_TABLES.items():
            table = self.obj(_or_empty(root.get(table_name)), table_name)
            out = store._segments[seg_type]
            for path, by_base in table.items():
                w_path = f"{table_name}[{path!r}]"
                for key, raw in self.obj(by_base, w_path).items():
                    where = f"{w_path}[{key}]"
                    m = self.segment(self.obj(raw, where), where, seg_type, path, self.key_int(key, where))
                    out.setdefault(m.path, {})[m.base_offset] = m
        queues = self.obj(_or_empty(root.get("queueMetadataTable")), "queueMetadataTable")
        for topic, by_id in queues.items():
            w_topic = f"queueMetadataTable[{topic!r}]"
            for key, raw in self.obj(by_id, w_topic).items():
                where = f"{w_topic}[{key}]"
                m = self.queue(self.obj(raw, where), where, topic, self.key_int(key, where))
                store._queues.setdefault(m.topic, {})[m.queue_id] = m
        topics = self.obj(_or_empty(root.get("topicMetadataTable")), "topicMetadataTable")
        ids: dict[int, str] = {}
        for name, raw in topics.items():
            where = f"topicMetadataTable[{name!r}]"
            m = self.topic(self.obj(raw, where), where, name)
            if m.topic_id in ids:
                raise self.fail(where, f"topicId {m.topic_id} is also the id of topic {ids[m.topic_id]!r}")
            ids[m.topic_id] = m.topic
            store._topics[m.topic] = m
        props = self.obj(_or_empty(root.get(PROPERTIES_TABLE)), PROPERTIES_TABLE)
        for key, value in props.items():
            if not isinstance(value, str):
                raise self.fail(f"{PROPERTIES_TABLE}[{key!r}]", f"expected a string, got {_kind(value)}")
            store._properties[key] = value
        serial = self.int_(root, "topicSerialNumber", "$", default=-1)
        store._state["serial"] = max([serial, *ids])

    def _check(self, where: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except IllegalParam as exc:
            raise self.fail(where, exc.message) from None

    def segment(self, raw: dict, where: str, seg_type: int, path: str, base: int) -> FileSegmentMetadata:
        m = FileSegmentMetadata(
            path=self.str_(raw, "path", where, default=path),
            type=self.int_(raw, "type", where, default=seg_type),
            base_offset=self.int_(raw, "baseOffset", where, default=base),
            size=self.int_(raw, "size", where, default=0),
            status=self.int_(raw, "status", where, default=0),
            create_timestamp=self.int_(raw, "createTimestamp", where, default=0),
            begin_timestamp=self.int_(raw, "beginTimestamp", where, default=NO_TIMESTAMP),
            end_timestamp=self.int_(raw, "endTimestamp", where, default=NO_TIMESTAMP),
            seal_timestamp=self.int_(raw, "sealTimestamp", where, default=0),
        )
        if raw.get("checksum") is not None:
            m.checksum = self.int_(raw, "checksum", where)
            m.checksum_size = self.int_(raw, "checksumSize", where, default=0)
        if (m.path, m.type, m.base_offset) != (path, seg_type, base):
            raise self.fail(where, f"entry says path={m.path!r} type={m.type} baseOffset={m.base_offset} "
                                   f"but is filed under path={path!r} type={seg_type} baseOffset={base}")
        self._check(where, check_segment_metadata, m)
        return m

    def queue(self, raw: dict, where: str, topic: str, queue_id: int) -> QueueMetadata:
        mq = self.obj(_or_empty(raw.get("queue")), f"{where}.queue")
        m = QueueMetadata(
            topic=self.str_(mq, "topic", f"{where}.queue", default=topic),
            queue_id=self.int_(mq, "queueId", f"{where}.queue", default=queue_id),
            min_offset=self.int_(raw, "minOffset", where, default=-1),
            max_offset=self.int_(raw, "maxOffset", where, default=-1),
            update_timestamp=self.int_(raw, "updateTimestamp", where, default=0),
            broker_name=self.str_(mq, "brokerName", f"{where}.queue", default=""),
        )
        if (m.topic, m.queue_id) != (topic, queue_id):
            raise self.fail(where, f"entry says topic={m.topic!r} queueId={m.queue_id} but is filed under "
                                   f"topic={topic!r} queueId={queue_id}")
        self._check(where, check_queue_metadata, m)
        return m

    def topic(self, raw: dict, where: str, name: str) -> TopicMetadata:
        m = TopicMetadata(
            topic_id=self.int_(raw, "topicId", where),
            topic=self.str_(raw, "topic", where, default=name),
            reserve_time=self.int_(raw, "reserveTime", where, default=-1),
            status=self.int_(raw, "status", where, default=0),
            update_timestamp=self.int_(raw, "updateTimestamp", where, default=0),
        )
        if m.topic != name:
            raise self.fail(where, f"entry says topic={m.topic!r} but is filed under {name!r}")
        self._check(where, check_topic_metadata, m)
        return m


def _clone(m: T) -> T:
    """A copy of an entity (a shallow copy is enough: every field is immutable)."""
    copy = object.__new__(type(m))
    copy.__dict__.update(m.__dict__)
    return copy


def _or_empty(value: Any) -> Any:
    return {} if value is None else value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", float: "a number"}.get(type(value), type(value).__name__) + f" ({value!r:.40})"
