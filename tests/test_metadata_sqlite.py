"""What only the SQLite store promises: WAL + synchronous=FULL, a versioned schema, key lookups."""

from __future__ import annotations

import sqlite3

import pytest

from tiered_core.errors import InvalidOption, MetadataError
from tiered_core.metadata import SqliteMetadataStore
from tiered_core.metadata.sqlite import SCHEMA_VERSION
from tiered_core.spi.metadata import FileSegmentMetadata


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "tieredStoreMetadata.db")


def test_wal_and_full_synchronous_by_default(db):
    with SqliteMetadataStore(db) as store:
        assert store.pragma("journal_mode") == "wal"
        assert store.pragma("synchronous") == 2  # FULL: the WAL is fsynced at every commit


def test_synchronous_option(db):
    with SqliteMetadataStore(db, synchronous="normal") as store:
        assert store.pragma("synchronous") == 1
    with pytest.raises(InvalidOption) as err:
        SqliteMetadataStore(db, synchronous="sometimes")
    assert err.value.option == "synchronous"
    with pytest.raises(InvalidOption) as err:
        SqliteMetadataStore(db, busy_timeout="soon")
    assert err.value.option == "busy_timeout"


def test_the_schema_version_is_recorded(db):
    SqliteMetadataStore(db).close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_a_store_from_a_newer_version_is_refused(db):
    SqliteMetadataStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(MetadataError) as err:
        SqliteMetadataStore(db)
    assert err.value.path == db and err.value.version == SCHEMA_VERSION + 1


def test_a_file_that_is_not_a_database_is_refused_and_left_alone(db):
    with open(db, "w") as f:
        f.write("this is not sqlite\n" * 10)
    with pytest.raises(MetadataError) as err:
        SqliteMetadataStore(db)
    assert err.value.path == db and db in str(err.value)
    with open(db) as f:
        assert f.read() == "this is not sqlite\n" * 10


def test_a_foreign_sqlite_database_is_refused(db):
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
    with pytest.raises(MetadataError) as err:
        SqliteMetadataStore(db)
    assert "customers" in str(err.value) and err.value.path == db


@pytest.mark.parametrize("sql, params", [
    ("SELECT * FROM file_segments WHERE type = ? AND path = ? AND base_offset = ?", (0, "p", 0)),
    ("DELETE FROM file_segments WHERE type = ? AND path = ? AND base_offset = ?", (0, "p", 0)),
    ("DELETE FROM file_segments WHERE type = ? AND path = ?", (0, "p")),
    ("SELECT * FROM file_segments WHERE type = ? AND (path, base_offset) > (?, ?) ORDER BY path, base_offset",
     (1, "p3", 100)),
    ("SELECT * FROM file_segments WHERE type = ? AND path = ? AND base_offset > ? ORDER BY base_offset",
     (1, "p3", 100)),
    ("SELECT * FROM queues WHERE (topic, queue_id) > (?, ?) ORDER BY topic, queue_id", ("t", 3)),
    ("SELECT * FROM queues WHERE topic = ? AND queue_id > ? ORDER BY queue_id", ("t", -1)),
    ("SELECT * FROM topics WHERE topic = ?", ("t",)),
])
def test_single_entry_access_uses_the_primary_key_not_a_scan(db, sql, params):
    with SqliteMetadataStore(db) as store:
        with store.transaction():
            for i in range(200):
                store.update_file_segment(FileSegmentMetadata(f"p{i % 10}", i % 3, i))
        plan = " | ".join(store.explain(sql, params))
        assert "PRIMARY KEY" in plan or "USING INDEX" in plan, plan
        assert "SCAN" not in plan.replace("SEARCH", ""), plan
