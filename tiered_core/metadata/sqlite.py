"""The default metadata store: one SQLite file in the store root.

Why these settings:

- ``journal_mode=WAL``: a commit appends to the write-ahead log instead of
  rewriting pages in place, readers never block the writer, and a crash leaves
  either the whole transaction or none of it.
- ``synchronous=FULL`` (default): the WAL is fsynced at every commit, so a
  committed update survives a power loss, not only a process crash. ``NORMAL``
  would fsync only at checkpoints and may lose the last commits on power loss; a
  lost segment record means the flat file forgets committed messages, which the
  store promises never to do. The cost is one fsync per commit, which is why
  batches go through :meth:`SqliteMetadataStore.transaction`.
- Every lookup is by primary key (``WITHOUT ROWID`` tables clustered on the key),
  so getting, updating or deleting one segment costs O(log n) whatever the count;
  iteration pages through the key order (no long-lived cursor, no full table in
  memory).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import threading
import urllib.parse
from typing import Any, Callable, Iterator, TypeVar

from tiered_core.errors import IllegalParam, InvalidOption, MetadataError
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
from tiered_core.common import now_ms

T = TypeVar("T")

#: Bumped whenever the schema changes; a store written by a newer version is refused.
#: 2: ``file_segments`` keeps each segment's checksum (two columns); a version-1 file gets
#: them at its first writable open, and reads as "checksum not known" until then.
SCHEMA_VERSION = 2

_SCHEMA = [
    "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
    """CREATE TABLE topics (
        topic TEXT PRIMARY KEY,
        topic_id INTEGER NOT NULL UNIQUE,
        reserve_time INTEGER NOT NULL,
        status INTEGER NOT NULL,
        update_timestamp INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE queues (
        topic TEXT NOT NULL,
        queue_id INTEGER NOT NULL,
        min_offset INTEGER NOT NULL,
        max_offset INTEGER NOT NULL,
        update_timestamp INTEGER NOT NULL,
        broker_name TEXT NOT NULL,
        PRIMARY KEY (topic, queue_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE file_segments (
        type INTEGER NOT NULL,
        path TEXT NOT NULL,
        base_offset INTEGER NOT NULL,
        size INTEGER NOT NULL,
        status INTEGER NOT NULL,
        create_timestamp INTEGER NOT NULL,
        begin_timestamp INTEGER NOT NULL,
        end_timestamp INTEGER NOT NULL,
        seal_timestamp INTEGER NOT NULL,
        checksum INTEGER,
        checksum_size INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (type, path, base_offset)
    ) WITHOUT ROWID""",
    "INSERT INTO store_meta (key, value) VALUES ('max_topic_id', -1)",
]

#: Store properties (``get_property``/``set_property``): created on open when missing. A store
#: written before they existed gains the table without a schema version bump, so older
#: versions of tiered-store (which ignore the table) still open it.
_PROPERTIES_TABLE = ("CREATE TABLE IF NOT EXISTS store_properties (key TEXT PRIMARY KEY, value TEXT NOT NULL) "
                     "WITHOUT ROWID")

_TOPIC_COLS = "topic_id, topic, reserve_time, status, update_timestamp"
_QUEUE_COLS = "topic, queue_id, min_offset, max_offset, update_timestamp, broker_name"
_SEGMENT_COLS = ("path, type, base_offset, size, status, create_timestamp, begin_timestamp, "
                 "end_timestamp, seal_timestamp, checksum, checksum_size")
#: What a version-1 file (no checksum columns) is read with: every checksum unknown.
_SEGMENT_COLS_V1 = _SEGMENT_COLS.replace("checksum, checksum_size", "NULL, 0")
#: Version 1 -> 2.
_ADD_CHECKSUMS = ("ALTER TABLE file_segments ADD COLUMN checksum INTEGER",
                  "ALTER TABLE file_segments ADD COLUMN checksum_size INTEGER NOT NULL DEFAULT 0")

_PAGE = 1000  # rows per query while iterating
_SYNC_MODES = ("NORMAL", "FULL", "EXTRA")



#: SQLite's primary result codes that mean the database is in use or out of reach, not damaged.
_IN_USE = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_NO_ACCESS = {3, 8, 14, 23}  # SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_AUTH


def failure_cause(exc: BaseException) -> str:
    """``"in_use"`` (another process holds the database), ``"access"`` (permissions, a
    read-only path) or ``""`` for ``exc``: a :class:`MetadataError`'s ``cause``. The first two
    never mean a damaged database, so nothing may set it aside or rebuild it over them."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "access" if isinstance(exc, PermissionError) else ""
    code &= 0xFF
    return "in_use" if code in _IN_USE else "access" if code in _NO_ACCESS else ""


class SqliteMetadataStore(TieredMetadataStore):
    """:class:`TieredMetadataStore` in a SQLite database file (WAL, synchronous=FULL).

    Options: ``synchronous`` ("FULL" default, "EXTRA", or "NORMAL" to trade power-loss
    durability for speed), ``busy_timeout`` (seconds to wait for another process's
    write lock, default 30).

    One connection is shared by the threads of the process under a lock; several
    processes may open the same file (SQLite's file locks serialise writers).
    Raises :class:`MetadataError` naming the path when the file is not a SQLite
    database, belongs to something else, or was written by a newer schema.
    """

    name = "sqlite"
    default_filename = "tieredStoreMetadata.db"

    _OPTIONS: dict[str, Any] = {"synchronous": "FULL", "busy_timeout": 30.0}

    #: True for a private in-memory copy (:meth:`open_read_only`): nothing reaches the file.
    read_only = False

    def __init__(self, path: str, **options: Any) -> None:
        opts = self._setup(path, options)
        sync = self.synchronous
        parent = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise MetadataError(f"cannot create the directory of metadata store {self.path!r}: {exc}",
                                path=self.path, cause=failure_cause(exc)) from exc
        try:
            conn = sqlite3.connect(self.path, timeout=float(opts["busy_timeout"]), isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise MetadataError(f"cannot open metadata store {self.path!r}: {exc}", path=self.path, cause=failure_cause(exc)) from exc
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise MetadataError(f"metadata store {self.path!r}: the file system refused WAL mode "
                                    f"(journal_mode={mode})", path=self.path)
            conn.execute(f"PRAGMA synchronous={sync}")
            self._conn = conn
            self._migrate()
        except sqlite3.Error as exc:
            conn.close()
            self._conn = None
            raise MetadataError(f"cannot open metadata store {self.path!r}: {exc}", path=self.path, cause=failure_cause(exc)) from exc
        except BaseException:
            conn.close()
            self._conn = None
            raise

    def _setup(self, path: str, options: dict[str, Any]) -> dict[str, Any]:
        opts = parse_options(self.name, options, self._OPTIONS)
        sync = str(opts["synchronous"]).upper()
        if sync not in _SYNC_MODES:
            raise InvalidOption(f"option 'synchronous' of metadata store 'sqlite' must be one of "
                                f"{', '.join(_SYNC_MODES)}, got {opts['synchronous']!r}",
                                option="synchronous", store=self.name)
        if opts["busy_timeout"] < 0:
            raise InvalidOption(f"option 'busy_timeout' must be >= 0, got {opts['busy_timeout']!r}",
                                option="busy_timeout", store=self.name)
        self.path = os.fspath(path)
        self.synchronous = sync
        self._lock = threading.RLock()
        self._depth = 0
        self._conn: sqlite3.Connection | None = None
        self._writes_refused = False  # open_for_reading
        self._segment_cols = _SEGMENT_COLS
        self._immutable = False
        return opts

    @classmethod
    def open_read_only(cls, path: str, **options: Any) -> "SqliteMetadataStore":
        """A private in-memory copy of the database at ``path``, taken without writing anything
        there: no file or directory is created, no schema added (see :func:`_snapshot`). A
        missing file reads as an empty store. The copy can be changed (recovery in memory);
        nothing reaches the file, and :meth:`destroy` is refused. Memory: the database's size.

        Raises :class:`MetadataError` naming the path for a file that is not a tiered-store
        metadata database or was written by a newer schema.
        """
        self = cls.__new__(cls)
        opts = self._setup(path, options)
        self.read_only = True
        try:
            conn = _snapshot(self.path, float(opts["busy_timeout"]))
        except (OSError, sqlite3.Error) as exc:
            raise MetadataError(f"cannot read metadata store {self.path!r}: {exc}", path=self.path, cause=failure_cause(exc)) from exc
        self._conn = conn
        try:
            self._migrate()  # on the copy: checks the schema (and gives an empty copy one)
        except sqlite3.Error as exc:
            self.close()
            raise MetadataError(f"cannot read metadata store {self.path!r}: {exc}", path=self.path, cause=failure_cause(exc)) from exc
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def open_for_reading(cls, path: str, **options: Any) -> "SqliteMetadataStore":
        """Open an existing database for reading only: no file, directory, schema or row is
        created or changed (every write raises :class:`MetadataError`).

        While a writer has the database open (its ``-wal`` file exists) the connection reads
        through SQLite's WAL like any reader. Otherwise it is opened ``immutable``, so SQLite
        creates no ``-wal``/``-shm`` files next to it; each read then checks that the file did
        not change under it (a writer that opened it meanwhile), and reads again through the
        writer's WAL if it did. Raises :class:`MetadataError` naming the path when the file is
        missing, not a tiered-store database, or written by a newer schema.
        """
        self = cls.__new__(cls)
        opts = self._setup(path, options)
        self._writes_refused = True
        self._busy_timeout = float(opts["busy_timeout"])
        self._connect_readonly()
        try:
            with self._guard("open") as conn:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if "schema_version" not in tables:
                    raise MetadataError(f"{self.path!r} is not a tiered-store metadata store (tables: "
                                        f"{', '.join(sorted(tables)) or 'none'})", path=self.path)
                version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
            if version is None or version > SCHEMA_VERSION:
                raise MetadataError(f"metadata store {self.path!r} has schema version {version}; this version of "
                                    f"tiered-store reads up to {SCHEMA_VERSION}", path=self.path, version=version)
            if version < 2:
                self._segment_cols = _SEGMENT_COLS_V1  # read as it is: nothing is added to the file
        except BaseException:
            self.close()
            raise
        return self

    def _file_state(self) -> tuple[int, int, bool]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise MetadataError(f"metadata store {self.path!r} cannot be read: {exc}", path=self.path, cause=failure_cause(exc)) from exc
        return st.st_mtime_ns, st.st_size, os.path.exists(self.path + "-wal")

    def _connect_readonly(self) -> None:
        from urllib.parse import quote

        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if not os.path.isfile(self.path):
            raise MetadataError(f"metadata store {self.path!r} does not exist", path=self.path)
        self._immutable = not os.path.exists(self.path + "-wal")
        uri = f"file:{quote(os.path.abspath(self.path))}?mode=ro" + ("&immutable=1" if self._immutable else "")
        try:
            self._conn = sqlite3.connect(uri, uri=True, timeout=self._busy_timeout, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise MetadataError(f"cannot open metadata store {self.path!r}: {exc}", path=self.path, cause=failure_cause(exc)) from exc

    def _refuse_write(self, operation: str) -> None:
        if self._writes_refused:
            raise MetadataError(f"metadata store {self.path!r} is open read-only: {operation} refused",
                                path=self.path, operation=operation)

    def _migrate(self) -> None:
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "schema_version" not in tables:
                if tables:
                    raise MetadataError(
                        f"{self.path!r} is a SQLite database but not a tiered-store metadata store "
                        f"(tables: {', '.join(sorted(tables))})", path=self.path)
                conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            else:
                row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
                version = row[0] if row else None
                if version is None or version > SCHEMA_VERSION:
                    raise MetadataError(
                        f"metadata store {self.path!r} has schema version {version}; this version of "
                        f"tiered-store reads up to {SCHEMA_VERSION}", path=self.path, version=version)
                if version < 2:
                    for statement in _ADD_CHECKSUMS:
                        conn.execute(statement)
                    conn.execute("INSERT INTO schema_version (version) VALUES (2)")
            if "store_properties" not in tables:
                conn.execute(_PROPERTIES_TABLE)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # -- plumbing ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _guard(self, operation: str) -> Iterator[sqlite3.Connection]:
        """Hold the lock, check the store is open, and type SQLite's errors."""
        with self._lock:
            if self._conn is None:
                raise self._closed_error()
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise MetadataError(f"metadata store {self.path!r}: {operation} failed: {exc}",
                                    path=self.path, operation=operation) from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator["SqliteMetadataStore"]:
        self._refuse_write("a transaction")
        with self._lock:
            depth = self._depth
            savepoint = f"tiered_sp{depth}"
            with self._guard("begin transaction") as conn:
                conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT {savepoint}")
            self._depth = depth + 1
            try:
                yield self
            except BaseException:
                self._depth = depth
                if self._conn is not None:
                    with self._guard("rollback"):
                        if depth == 0:
                            self._conn.execute("ROLLBACK")
                        else:
                            self._conn.execute(f"ROLLBACK TO {savepoint}")
                            self._conn.execute(f"RELEASE {savepoint}")
                raise
            self._depth = depth
            with self._guard("commit") as conn:
                try:
                    conn.execute("COMMIT" if depth == 0 else f"RELEASE {savepoint}")
                except sqlite3.Error:
                    if depth == 0 and conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise

    def _write(self, operation: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self.transaction(), self._guard(operation) as conn:
            return fn(conn)

    def _write_one(self, operation: str, sql: str, params: tuple) -> int:
        """Run one statement; returns its row count.

        A single statement needs no explicit transaction: outside one it commits on
        its own (atomically, durably), inside one it is part of it.
        """
        self._refuse_write(operation)
        with self._guard(operation) as conn:
            return conn.execute(sql, params).rowcount

    def _query(self, operation: str, sql: str, params: tuple = ()) -> list[tuple]:
        if self._immutable:
            return self._immutable_query(operation, sql, params)
        with self._guard(operation) as conn:
            return conn.execute(sql, params).fetchall()

    def _immutable_query(self, operation: str, sql: str, params: tuple) -> list[tuple]:
        """A read of an ``immutable`` read-only connection, kept only if the file did not change
        while it ran; else the connection follows the writer (see :meth:`open_for_reading`)."""
        with self._lock:
            for _ in range(3):
                before = self._file_state()
                if not before[2]:
                    try:
                        with self._guard(operation) as conn:
                            rows = conn.execute(sql, params).fetchall()
                    except MetadataError:
                        if self._file_state() == before:
                            raise
                    else:
                        if self._file_state() == before:
                            return rows
                self._connect_readonly()  # a writer opened the database: read through its WAL
                if not self._immutable:
                    with self._guard(operation) as conn:
                        return conn.execute(sql, params).fetchall()
            raise MetadataError(f"metadata store {self.path!r} changed under three read-only reads in a row "
                                f"({operation}); try again", path=self.path, operation=operation)

    @property
    def closed(self) -> bool:
        return self._conn is None

    # -- topics -----------------------------------------------------------------------

    def get_topic(self, topic: str) -> TopicMetadata | None:
        check_topic(topic)
        rows = self._query("get_topic", f"SELECT {_TOPIC_COLS} FROM topics WHERE topic = ?", (topic,))
        return TopicMetadata(*rows[0]) if rows else None

    def add_topic(self, topic: str, reserve_time: int = -1) -> TopicMetadata:
        check_topic(topic)
        if not isinstance(reserve_time, int) or isinstance(reserve_time, bool):
            raise IllegalParam(f"reserve_time must be an int, got {reserve_time!r}", reserve_time=reserve_time)

        def add(conn: sqlite3.Connection) -> TopicMetadata:
            row = conn.execute(f"SELECT {_TOPIC_COLS} FROM topics WHERE topic = ?", (topic,)).fetchone()
            if row:
                return TopicMetadata(*row)
            topic_id = self._max_topic_id(conn) + 1
            m = TopicMetadata(topic_id, topic, reserve_time, 0, now_ms())
            conn.execute(f"INSERT INTO topics ({_TOPIC_COLS}) VALUES (?, ?, ?, ?, ?)",
                         (m.topic_id, m.topic, m.reserve_time, m.status, m.update_timestamp))
            conn.execute("UPDATE store_meta SET value = ? WHERE key = 'max_topic_id'", (topic_id,))
            return m

        return self._write("add_topic", add)

    def update_topic(self, metadata: TopicMetadata, *, touch: bool = True) -> TopicMetadata:
        m = check_topic_metadata(metadata)
        stored = TopicMetadata(m.topic_id, m.topic, m.reserve_time, m.status,
                               now_ms() if touch else m.update_timestamp)

        def update(conn: sqlite3.Connection) -> TopicMetadata:
            row = conn.execute("SELECT topic FROM topics WHERE topic_id = ? AND topic != ?",
                               (stored.topic_id, stored.topic)).fetchone()
            if row:
                raise MetadataError(f"topic id {stored.topic_id} of topic {stored.topic!r} already belongs "
                                    f"to topic {row[0]!r} in {self.path!r}",
                                    path=self.path, topic=stored.topic, topic_id=stored.topic_id)
            conn.execute(f"INSERT OR REPLACE INTO topics ({_TOPIC_COLS}) VALUES (?, ?, ?, ?, ?)",
                         (stored.topic_id, stored.topic, stored.reserve_time, stored.status,
                          stored.update_timestamp))
            conn.execute("UPDATE store_meta SET value = MAX(value, ?) WHERE key = 'max_topic_id'",
                         (stored.topic_id,))
            return stored

        return self._write("update_topic", update)

    def delete_topic(self, topic: str) -> bool:
        check_topic(topic)
        return self._write_one("delete_topic", "DELETE FROM topics WHERE topic = ?", (topic,)) > 0

    def iterate_topics(self) -> Iterator[TopicMetadata]:
        last: str | None = None
        while True:
            if last is None:
                rows = self._query("iterate_topics",
                                   f"SELECT {_TOPIC_COLS} FROM topics ORDER BY topic LIMIT {_PAGE}")
            else:
                rows = self._query("iterate_topics", f"SELECT {_TOPIC_COLS} FROM topics WHERE topic > ? "
                                   f"ORDER BY topic LIMIT {_PAGE}", (last,))
            for row in rows:
                yield TopicMetadata(*row)
            if len(rows) < _PAGE:
                return
            last = rows[-1][1]

    @staticmethod
    def _max_topic_id(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT value FROM store_meta WHERE key = 'max_topic_id'").fetchone()[0])

    @property
    def max_topic_id(self) -> int:
        with self._guard("max_topic_id") as conn:
            return self._max_topic_id(conn)

    def set_max_topic_id(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < -1:
            raise IllegalParam(f"max_topic_id must be an int >= -1, got {value!r}", max_topic_id=value)

        def put(conn: sqlite3.Connection) -> None:
            highest = conn.execute("SELECT MAX(topic_id) FROM topics").fetchone()[0]
            if highest is not None and value < highest:
                raise IllegalParam(f"max_topic_id {value} is below the stored topic id {highest}",
                                   max_topic_id=value)
            conn.execute("UPDATE store_meta SET value = ? WHERE key = 'max_topic_id'", (value,))

        self._write("set_max_topic_id", put)

    # -- queues -----------------------------------------------------------------------

    def get_queue(self, topic: str, queue_id: int) -> QueueMetadata | None:
        check_topic(topic)
        check_queue_id(queue_id)
        rows = self._query("get_queue", f"SELECT {_QUEUE_COLS} FROM queues WHERE topic = ? AND queue_id = ?",
                           (topic, queue_id))
        return QueueMetadata(*rows[0]) if rows else None

    def add_queue(self, topic: str, queue_id: int, base_offset: int = -1, *,
                  broker_name: str = "") -> QueueMetadata:
        m = check_queue_metadata(QueueMetadata(topic, queue_id, base_offset, base_offset, now_ms(), broker_name))

        def add(conn: sqlite3.Connection) -> QueueMetadata:
            row = conn.execute(f"SELECT {_QUEUE_COLS} FROM queues WHERE topic = ? AND queue_id = ?",
                               (topic, queue_id)).fetchone()
            if row:
                return QueueMetadata(*row)
            self._put_queue(conn, m)
            return m

        return self._write("add_queue", add)

    _PUT_QUEUE = f"INSERT OR REPLACE INTO queues ({_QUEUE_COLS}) VALUES (?, ?, ?, ?, ?, ?)"

    def _put_queue(self, conn: sqlite3.Connection, m: QueueMetadata) -> None:
        conn.execute(self._PUT_QUEUE,
                     (m.topic, m.queue_id, m.min_offset, m.max_offset, m.update_timestamp, m.broker_name))

    def update_queue(self, metadata: QueueMetadata, *, touch: bool = True) -> QueueMetadata:
        m = check_queue_metadata(metadata)
        stored = QueueMetadata(m.topic, m.queue_id, m.min_offset, m.max_offset,
                               now_ms() if touch else m.update_timestamp, m.broker_name)
        self._write_one("update_queue", self._PUT_QUEUE, (stored.topic, stored.queue_id, stored.min_offset,
                                                          stored.max_offset, stored.update_timestamp,
                                                          stored.broker_name))
        return stored

    def delete_queue(self, topic: str, queue_id: int) -> bool:
        check_topic(topic)
        check_queue_id(queue_id)
        return self._write_one("delete_queue", "DELETE FROM queues WHERE topic = ? AND queue_id = ?",
                               (topic, queue_id)) > 0

    def iterate_queues(self, topic: str | None = None) -> Iterator[QueueMetadata]:
        if topic is not None:
            check_topic(topic)
            last = -1
            while True:
                rows = self._query("iterate_queues", f"SELECT {_QUEUE_COLS} FROM queues WHERE topic = ? AND "
                                   f"queue_id > ? ORDER BY queue_id LIMIT {_PAGE}", (topic, last))
                yield from (QueueMetadata(*row) for row in rows)
                if len(rows) < _PAGE:
                    return
                last = rows[-1][1]
        after: tuple[str, int] | None = None
        while True:
            if after is None:
                rows = self._query("iterate_queues", f"SELECT {_QUEUE_COLS} FROM queues "
                                   f"ORDER BY topic, queue_id LIMIT {_PAGE}")
            else:
                rows = self._query("iterate_queues", f"SELECT {_QUEUE_COLS} FROM queues WHERE "
                                   f"(topic, queue_id) > (?, ?) ORDER BY topic, queue_id LIMIT {_PAGE}", after)
            yield from (QueueMetadata(*row) for row in rows)
            if len(rows) < _PAGE:
                return
            after = (rows[-1][0], rows[-1][1])

    # -- file segments ----------------------------------------------------------------

    def get_file_segment(self, type: int, path: str, base_offset: int) -> FileSegmentMetadata | None:
        key = (check_segment_type(type), check_segment_path(path), check_base_offset(base_offset))
        rows = self._query("get_file_segment", f"SELECT {self._segment_cols} FROM file_segments "
                           "WHERE type = ? AND path = ? AND base_offset = ?", key)
        return FileSegmentMetadata(*rows[0]) if rows else None

    _PUT_SEGMENT = f"INSERT OR REPLACE INTO file_segments ({_SEGMENT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

    def update_file_segment(self, metadata: FileSegmentMetadata) -> FileSegmentMetadata:
        m = check_segment_metadata(metadata)
        stored = FileSegmentMetadata(m.path, int(m.type), m.base_offset, m.size, int(m.status),
                                     m.create_timestamp, m.begin_timestamp, m.end_timestamp,
                                     m.seal_timestamp, m.checksum, m.checksum_size)
        values = (stored.path, stored.type, stored.base_offset, stored.size, stored.status,
                  stored.create_timestamp, stored.begin_timestamp, stored.end_timestamp, stored.seal_timestamp,
                  stored.checksum, stored.checksum_size)
        self._write_one("update_file_segment", self._PUT_SEGMENT, values)
        return stored

    def delete_file_segment(self, type: int, path: str, base_offset: int | None = None) -> int:
        check_segment_type(type)
        check_segment_path(path)
        if base_offset is None:
            sql, params = "DELETE FROM file_segments WHERE type = ? AND path = ?", (type, path)
        else:
            check_base_offset(base_offset)
            sql = "DELETE FROM file_segments WHERE type = ? AND path = ? AND base_offset = ?"
            params = (type, path, base_offset)
        return self._write_one("delete_file_segment", sql, params)

    def iterate_file_segments(self, type: int | None = None, path: str | None = None
                              ) -> Iterator[FileSegmentMetadata]:
        types = (0, 1, 2) if type is None else (check_segment_type(type),)
        if path is not None:
            check_segment_path(path)
        select = f"SELECT {self._segment_cols} FROM file_segments WHERE type = ?"
        # Keyset pagination on the primary key: every page is a range search, never a scan.
        for seg_type in types:
            if path is None:
                sql = select + f" AND (path, base_offset) > (?, ?) ORDER BY path, base_offset LIMIT {_PAGE}"
                after: tuple = ("", -1)
            else:
                sql = select + f" AND path = ? AND base_offset > ? ORDER BY base_offset LIMIT {_PAGE}"
                after = (path, -1)
            while True:
                rows = self._query("iterate_file_segments", sql, (seg_type, *after))
                yield from (FileSegmentMetadata(*row) for row in rows)
                if len(rows) < _PAGE:
                    break
                after = (rows[-1][0], rows[-1][2])

    # -- store properties -------------------------------------------------------------

    def get_property(self, key: str) -> str | None:
        check_property(key)
        rows = self._query("get_property", "SELECT value FROM store_properties WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_property(self, key: str, value: str | None) -> None:
        check_property(key, value, allow_none=True)
        if value is None:
            self._write_one("set_property", "DELETE FROM store_properties WHERE key = ?", (key,))
        else:
            self._write_one("set_property", "INSERT OR REPLACE INTO store_properties (key, value) VALUES (?, ?)",
                            (key, value))

    def iterate_properties(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        if not isinstance(prefix, str):
            raise IllegalParam(f"prefix must be a string, got {prefix!r}", prefix=prefix)
        last = prefix
        first = True
        while True:
            op = ">=" if first else ">"
            rows = self._query("iterate_properties", f"SELECT key, value FROM store_properties WHERE key {op} ? "
                               f"ORDER BY key LIMIT {_PAGE}", (last,))
            first = False
            for key, value in rows:
                if not key.startswith(prefix):
                    return
                yield key, value
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    # -- lifecycle --------------------------------------------------------------------

    def flush(self) -> None:
        # Every commit is already durable (synchronous=FULL); fold the WAL back into
        # the database so it does not grow without bound between automatic checkpoints.
        if self._writes_refused:
            return  # nothing was written
        with self._guard("flush") as conn:
            if self._depth == 0:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._depth = 0
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as exc:
                    raise MetadataError(f"closing metadata store {self.path!r} failed: {exc}",
                                        path=self.path, cause=failure_cause(exc)) from exc

    def destroy(self) -> None:
        if self.read_only:
            raise MetadataError(f"metadata store {self.path!r} is open read-only: destroy refused", path=self.path)
        self._refuse_write("destroy")
        with self._lock:
            self.close()
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.remove(self.path + suffix)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise MetadataError(f"cannot delete metadata store file {self.path + suffix!r}: {exc}",
                                        path=self.path + suffix) from exc

    # -- introspection (tests, benchmarks) ---------------------------------------------

    def pragma(self, name: str) -> Any:
        """The value of ``PRAGMA name`` (e.g. ``journal_mode``, ``synchronous``)."""
        if not name.replace("_", "").isalnum():
            raise IllegalParam(f"not a pragma name: {name!r}", name=name)
        with self._guard(f"PRAGMA {name}") as conn:
            row = conn.execute(f"PRAGMA {name}").fetchone()
            return row[0] if row else None

    def explain(self, sql: str, params: tuple = ()) -> list[str]:
        """SQLite's query plan for ``sql`` (the details column of EXPLAIN QUERY PLAN)."""
        return [row[3] for row in self._query("explain", "EXPLAIN QUERY PLAN " + sql, params)]


_SNAPSHOT_ATTEMPTS = 5


def _load_private_copy(path: str, memory: sqlite3.Connection, busy_timeout: float) -> bool:
    """Copy the database at ``path`` and its ``-wal`` into a private directory and back the
    copy up into ``memory``. False when either file changed (or went) during the copy."""
    with tempfile.TemporaryDirectory(prefix="tiered-metadata-copy-") as scratch:
        copy = os.path.join(scratch, "metadata.db")
        try:
            before = [os.stat(path + suffix) for suffix in ("", "-wal")]
            for suffix in ("", "-wal"):
                shutil.copyfile(path + suffix, copy + suffix)
            after = [os.stat(path + suffix) for suffix in ("", "-wal")]
        except FileNotFoundError:
            return False  # the -wal went: the writer closed (checkpointed) meanwhile
        if [(s.st_mtime_ns, s.st_size) for s in before] != [(s.st_mtime_ns, s.st_size) for s in after]:
            return False
        source = sqlite3.connect(copy, timeout=busy_timeout)
        try:
            source.backup(memory)
        finally:
            source.close()
    return True


def _snapshot(path: str, busy_timeout: float) -> sqlite3.Connection:
    """An in-memory copy of the SQLite database at ``path`` (empty when there is none),
    leaving no trace there.

    Without a ``-wal`` beside it the file holds the whole database: its bytes are read
    (again if it changed meanwhile) and loaded into memory. With a ``-wal`` (a writer is
    open, or one stopped before a checkpoint, e.g. killed) the database and its ``-wal`` are
    copied into a private directory (again if either changed meanwhile), where SQLite
    recovers the copy, and that is loaded into memory: nothing beside the database is
    touched, not even its ``-shm``. Only when a live writer kept changing them through every
    attempt does the copy go through SQLite's own read-only connection and backup, which use
    the writer's ``-wal`` and ``-shm`` (its shared-memory index of the ``-wal``, where
    readers take read marks); the database and the ``-wal`` are not written then either.
    """
    memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        if not os.path.exists(path):
            return memory
        for attempt in range(_SNAPSHOT_ATTEMPTS):
            if os.path.exists(path + "-wal") and attempt + 1 < _SNAPSHOT_ATTEMPTS:
                if _load_private_copy(path, memory, busy_timeout):
                    return memory
                continue  # written meanwhile: copy again
            if os.path.exists(path + "-wal"):
                uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
                source = sqlite3.connect(uri, uri=True, timeout=busy_timeout)
                try:
                    source.backup(memory)
                finally:
                    source.close()
                return memory
            before = os.stat(path)
            with open(path, "rb") as fh:
                data = bytearray(fh.read())
            after = os.stat(path)
            if ((before.st_mtime_ns, before.st_size) != (after.st_mtime_ns, after.st_size)
                    or os.path.exists(path + "-wal")):
                continue  # written meanwhile: read it again
            if len(data) >= 20 and data[:16] == b"SQLite format 3\x00":
                data[18] = data[19] = 1  # a WAL database's header; the copy in memory has no WAL
            if data:
                memory.deserialize(bytes(data))
            return memory
        raise sqlite3.OperationalError(f"the database kept changing during {_SNAPSHOT_ATTEMPTS} reads")
    except BaseException:
        memory.close()
        raise
