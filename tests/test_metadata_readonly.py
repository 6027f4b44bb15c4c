"""Metadata opened read-only (issue 18: the Spark source and ``spark export`` never write a
store): nothing is created, no byte or mtime changes, writes are refused, and a writer's
commits stay visible."""

from __future__ import annotations

import os

import pytest

from tiered_core.errors import MetadataError, NotFound
from tiered_core.metadata import open_metadata_store, open_metadata_for_reading


def state(directory) -> dict[str, tuple[int, int, bytes]]:
    return {name: (st.st_size, st.st_mtime_ns, open(os.path.join(directory, name), "rb").read())
            for name in sorted(os.listdir(directory))
            for st in [os.stat(os.path.join(directory, name))]}


def test_a_missing_store_is_not_created(tmp_path):
    for name in ("sqlite", "json"):
        path = tmp_path / "no" / "such" / f"meta.{name}"
        with pytest.raises(NotFound) as info:
            open_metadata_for_reading(name, str(path))
        assert info.value.path == str(path)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["sqlite", "json"])
def test_reading_changes_nothing_and_writes_are_refused(tmp_path, name):
    path = str(tmp_path / f"meta.{name}")
    writer = open_metadata_store(name, path)
    writer.add_topic("orders")
    writer.add_queue("orders", 0, 0)
    writer.close()
    before = state(tmp_path)

    reader = open_metadata_for_reading(name, path)
    assert [t.topic for t in reader.iterate_topics()] == ["orders"]
    assert [q.queue_id for q in reader.iterate_queues("orders")] == [0]
    if name == "sqlite":  # the JSON store writes only when asked to; SQLite refuses outright
        with pytest.raises(MetadataError, match="read-only"):
            reader.add_topic("audit")
        with pytest.raises(MetadataError, match="read-only"):
            with reader.transaction():
                pass
    reader.close()
    assert state(tmp_path) == before  # no -wal/-shm left, same bytes and mtimes


def test_a_sqlite_reader_follows_a_writer(tmp_path):
    path = str(tmp_path / "meta.db")
    open_metadata_store("sqlite", path).close()
    reader = open_metadata_for_reading("sqlite", path)  # no writer yet: immutable
    writer = open_metadata_store("sqlite", path)
    writer.add_topic("later")
    assert [t.topic for t in reader.iterate_topics()] == ["later"]
    writer.add_topic("again")
    assert [t.topic for t in reader.iterate_topics()] == ["again", "later"]
    reader.close()
    writer.close()
