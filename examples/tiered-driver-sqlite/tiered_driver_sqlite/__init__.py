"""A tiered-store driver that keeps segments in one SQLite database file.

This is the worked example of "Writing a driver" (README): a complete third-party
backend in one module. It is registered only through the entry point in its
``pyproject.toml``; nothing in tiered-core refers to it.

Layout: a table ``objects`` (one row per path: size, sealed flag) and a table
``chunks`` (the bytes, one row per piece of a write, keyed by path and starting
position), so an append inserts rows instead of rewriting a growing blob. Every write
is one ``BEGIN IMMEDIATE`` transaction that checks the position, inserts the chunks
and bumps the size, so it lands completely or not at all, and two racing writers
(threads or processes) cannot both pass the position check.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from typing import Iterator

from tiered_core import hookimpl
from tiered_core.errors import (
    CorruptData,
    DriverError,
    IllegalParam,
    InvalidOption,
    NotFound,
    PositionMismatch,
    SegmentClosed,
    SegmentSealed,
)
from tiered_core.spi import Capabilities, SegmentDriver

__version__ = "0.1.0"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    path   TEXT PRIMARY KEY,
    size   INTEGER NOT NULL DEFAULT 0,
    sealed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS chunks (
    path     TEXT NOT NULL,
    position INTEGER NOT NULL,
    data     BLOB NOT NULL,
    PRIMARY KEY (path, position)
);
"""

# SQLite errors that may pass if the same call is made again later.
_RETRYABLE_CODES = {
    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_PROTOCOL,
}


class SqliteDriver(SegmentDriver):
    """Objects as rows of a SQLite database file (WAL mode).

    Guarantees the whole driver contract. Writes are atomic (all of ``data`` or
    nothing) and durable when they return (``synchronous=FULL``); the position check is
    enforced by the database lock, across threads and processes. Each thread uses its
    own connection. Options: ``database`` (the file; created if absent) and
    ``chunk_size`` (largest blob stored in one row; longer writes are split).
    Raises only :mod:`tiered_core.errors` types; a closed driver raises
    :class:`~tiered_core.errors.SegmentClosed`.
    """

    name = "sqlite"
    capabilities = Capabilities(
        conditional_append=True,  # the position check runs inside BEGIN IMMEDIATE
        seal=True,
        list=True,
        persistent=True,
        survives_process_exit=True,
        concurrent_paths=True,
        atomic_write=True,  # one transaction per write
        # The SPI's default write_if_absent is atomic here: a conditional, all-or-nothing write.
        create_if_absent=True,
    )

    #: Where the segments are: a store records it and refuses to open on another database.
    location_options = ("database",)

    @classmethod
    def location(cls, options):
        name, where = super().location(options)
        where["database"] = os.path.abspath(os.path.expanduser(where["database"])) if where["database"] else ""
        return name, where

    def __init__(self, *, database: str, chunk_size: int = 1 << 20) -> None:
        if not database:
            raise InvalidOption("option 'database' of driver 'sqlite' must name a file", option="database")
        if chunk_size <= 0:
            raise InvalidOption(f"option 'chunk_size' of driver 'sqlite' must be > 0, got {chunk_size}",
                                option="chunk_size")
        self.database = os.path.abspath(os.path.expanduser(database))
        self.chunk_size = chunk_size
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        with self._errors("open the database", self.database):
            self._conn().executescript(_SCHEMA)

    # -- connections and transactions ------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise SegmentClosed(f"sqlite driver for {self.database!r} is closed", database=self.database)
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves. check_same_thread is
            # off only so that close() may close every thread's connection.
            conn = sqlite3.connect(self.database, timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL may lose the last commits on power failure; a write
            # must be durable when it returns, so FULL.
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextlib.contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """One transaction: committed if the block succeeds, rolled back otherwise.

        ``BEGIN IMMEDIATE`` takes the write lock up front (waiting up to the busy
        timeout), so a read-check-write block cannot interleave with another writer.
        A plain ``BEGIN`` gives readers one consistent snapshot.
        """
        conn = self._conn()
        conn.execute(begin)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _errors(self, action: str, path: str) -> Iterator[None]:
        """Translate sqlite3 exceptions into DriverError naming the action and path."""
        try:
            yield
        except sqlite3.Error as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            # Extended codes carry the primary code in their low byte.
            retryable = code is not None and (code & 0xFF) in _RETRYABLE_CODES
            raise DriverError(f"sqlite: cannot {action} {path!r}: {exc}", retryable=retryable,
                              path=path, sqlite_error=getattr(exc, "sqlite_errorname", None)) from exc

    # -- the driver operations -----------------------------------------------------

    def size(self, path: str) -> int:
        path = self.check_path(path)
        with self._errors("stat", path):
            row = self._conn().execute("SELECT size FROM objects WHERE path = ?", (path,)).fetchone()
        return row[0] if row else 0

    def exists(self, path: str) -> bool:
        path = self.check_path(path)
        with self._errors("stat", path):
            row = self._conn().execute("SELECT 1 FROM objects WHERE path = ?", (path,)).fetchone()
        return row is not None

    def create(self, path: str) -> None:
        path = self.check_path(path)
        with self._errors("create", path), self._transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO objects (path) VALUES (?)", (path,))

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        path = self.check_path(path)
        self.check_range(path, position)
        view = memoryview(data).cast("B")
        with self._errors("write", path), self._transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO objects (path) VALUES (?)", (path,))
            size, sealed = conn.execute("SELECT size, sealed FROM objects WHERE path = ?", (path,)).fetchone()
            if sealed:
                raise SegmentSealed(path)
            if position != size:
                raise PositionMismatch(path, position, size)
            # Bounded rows keep a ranged read from loading a huge blob.
            conn.executemany(
                "INSERT INTO chunks (path, position, data) VALUES (?, ?, ?)",
                ((path, position + off, view[off:off + self.chunk_size])
                 for off in range(0, len(view), self.chunk_size)),
            )
            conn.execute("UPDATE objects SET size = ? WHERE path = ?", (size + len(view), path))

    def read(self, path: str, position: int, length: int) -> bytes:
        path = self.check_path(path)
        self.check_range(path, position, length)
        end = position + length
        with self._errors("read", path), self._transaction("BEGIN") as conn:
            row = conn.execute("SELECT size FROM objects WHERE path = ?", (path,)).fetchone()
            if row is None:
                raise NotFound(path)
            if end > row[0]:
                raise IllegalParam(f"read of {path!r} [{position}, {end}) passes its size {row[0]}",
                                   path=path, position=position, length=length)
            # Chunks overlapping [position, end): from the one that holds `position`.
            rows = conn.execute(
                "SELECT position, data FROM chunks WHERE path = ? AND position < ? AND position >="
                " (SELECT max(position) FROM chunks WHERE path = ? AND position <= ?) ORDER BY position",
                (path, end, path, position),
            ).fetchall()
        out = b"".join(data[max(position - start, 0):end - start] for start, data in rows)
        if len(out) != length:
            raise CorruptData(f"sqlite: {path!r} has {len(out)} of {length} bytes at [{position}, {end})",
                              path=path, offset=position)
        return out

    def seal(self, path: str) -> None:
        path = self.check_path(path)
        with self._errors("seal", path), self._transaction() as conn:
            if conn.execute("UPDATE objects SET sealed = 1 WHERE path = ?", (path,)).rowcount == 0:
                raise NotFound(path, "cannot be sealed: it does not exist")

    def is_sealed(self, path: str) -> bool:
        path = self.check_path(path)
        with self._errors("stat", path):
            row = self._conn().execute("SELECT sealed FROM objects WHERE path = ?", (path,)).fetchone()
        return bool(row and row[0])

    def delete(self, path: str) -> None:
        path = self.check_path(path)
        with self._errors("delete", path), self._transaction() as conn:
            conn.execute("DELETE FROM chunks WHERE path = ?", (path,))
            conn.execute("DELETE FROM objects WHERE path = ?", (path,))

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        prefix = self.check_prefix(prefix)
        with self._errors("list", prefix):
            # substr, not LIKE: a prefix may contain '%' or '_'. BINARY collation orders
            # UTF-8 bytes, which is the same order as Python's str comparison.
            rows = self._conn().execute(
                "SELECT path, size FROM objects WHERE substr(path, 1, length(?)) = ? ORDER BY path",
                (prefix, prefix),
            ).fetchall()
        return iter(rows)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    @classmethod
    def conformance_environment(cls, workdir: str):
        """A fresh database file under the suite's scratch directory."""
        return contextlib.nullcontext({"database": os.path.join(workdir, "segments.sqlite3")})


@hookimpl
def tiered_register_drivers(register) -> None:
    register(SqliteDriver)
