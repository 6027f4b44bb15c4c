"""``tiered metadata convert``: JSON <-> SQLite through the CLI, and store lookup by name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.errors import UnknownDriver
from tiered_core.metadata import JsonMetadataStore, SqliteMetadataStore, open_metadata_store
from tiered_core.metadata.convert import convert, same_contents
from tiered_core.spi.metadata import FileSegmentMetadata, QueueMetadata

SEED = Path(__file__).parent / "data" / "tieredStoreMetadata.json"


@pytest.fixture
def seed_copy(tmp_path) -> str:
    target = tmp_path / "tieredStoreMetadata.json"
    shutil.copyfile(SEED, target)
    return str(target)


def test_json_to_sqlite_and_back_through_the_cli(seed_copy, tmp_path, capsys):
    db = str(tmp_path / "meta.db")
    assert main(["metadata", "convert", "--from", seed_copy, "--to", db]) == 0
    out = capsys.readouterr().out
    assert "1 topic(s), 1 queue(s), 2 file segment(s)" in out
    back = str(tmp_path / "back" / "tieredStoreMetadata.json")
    assert main(["metadata", "convert", "--from", db, "--to", back]) == 0
    with JsonMetadataStore(seed_copy) as seed, SqliteMetadataStore(db) as sqlite, JsonMetadataStore(back) as again:
        assert same_contents(seed, sqlite) is None
        assert same_contents(seed, again) is None
        assert sqlite.max_topic_id == seed.max_topic_id
    json.loads(Path(back).read_text())  # the written file is standard JSON
    assert sorted(os.listdir(tmp_path)) == ["back", "meta.db", "tieredStoreMetadata.json"]  # no leftovers


def test_a_larger_store_round_trips_exactly(tmp_path):
    src = str(tmp_path / "src.db")
    with SqliteMetadataStore(src) as store, store.transaction():
        for t in range(20):
            store.add_topic(f"topic{t}", t)
            for q in range(4):
                store.add_queue(f"topic{t}", q, t * q, broker_name="b")
                for base in range(0, 5000, 1000):
                    store.update_file_segment(FileSegmentMetadata(f"b/topic{t}/{q}", base % 2, base, size=base))
        store.delete_topic("topic19")  # its id stays used; its queues stay
        store.update_queue(QueueMetadata("orphan", 0, 1, 2, 3), touch=False)
    mid, dst = str(tmp_path / "mid.json"), str(tmp_path / "dst.sqlite")
    convert(src, mid)
    stats = convert(mid, dst)
    assert (stats.topics, stats.queues, stats.segments, stats.max_topic_id) == (19, 81, 400, 19)
    with SqliteMetadataStore(src) as a, SqliteMetadataStore(dst) as b:
        assert same_contents(a, b) is None
        assert b.add_topic("new").topic_id == 20


def test_an_existing_target_is_refused_unless_forced(seed_copy, tmp_path, capsys):
    db = tmp_path / "meta.db"
    db.write_bytes(b"precious")
    assert main(["metadata", "convert", "--from", seed_copy, "--to", str(db)]) == 2
    err = capsys.readouterr().err
    assert str(db) in err and "--force" in err
    assert db.read_bytes() == b"precious"
    assert main(["metadata", "convert", "--from", seed_copy, "--to", str(db), "--force"]) == 0
    with SqliteMetadataStore(str(db)) as store:
        assert store.get_topic("topic-tiered").topic_id == 2


def test_formats_come_from_extensions_or_flags(seed_copy, tmp_path, capsys):
    odd = str(tmp_path / "meta.data")
    assert main(["metadata", "convert", "--from", seed_copy, "--to", odd]) == 2
    err = capsys.readouterr().err
    assert odd in err and ".json" in err
    assert main(["metadata", "convert", "--from", seed_copy, "--to", odd, "--to-format", "sqlite"]) == 0
    with SqliteMetadataStore(odd) as store:
        assert store.get_queue("topic-tiered", 0).broker_name == "broker-a"
    assert main(["metadata", "convert", "--from", seed_copy, "--to", str(tmp_path / "x.db"),
                 "--from-format", "nosuchstore"]) == 2
    assert "nosuchstore" in capsys.readouterr().err


def test_errors_name_the_input_and_leave_nothing_behind(tmp_path, capsys):
    missing = str(tmp_path / "missing.json")
    assert main(["metadata", "convert", "--from", missing, "--to", str(tmp_path / "a.db")]) == ExitCode.NOT_FOUND
    assert missing in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"topicMetadataTable": {0: [}')
    assert main(["metadata", "convert", "--from", str(bad), "--to", str(tmp_path / "a.db")]) == ExitCode.BACKEND
    err = capsys.readouterr().err
    assert str(bad) in err and "line 1 column" in err
    assert sorted(os.listdir(tmp_path)) == ["bad.json"]
    assert main(["metadata", "convert", "--from", str(bad), "--to", str(bad)]) == 2


def test_metadata_without_an_action_prints_usage(capsys):
    assert main(["metadata"]) == 2
    assert "convert" in capsys.readouterr().out


def test_stores_are_found_by_name_through_the_registry(tmp_path):
    with open_metadata_store("sqlite", str(tmp_path / "a.db")) as store:
        assert isinstance(store, SqliteMetadataStore)
    with pytest.raises(UnknownDriver) as err:
        open_metadata_store("nosuchstore", str(tmp_path / "b"))
    assert {"sqlite", "json"} <= set(err.value.installed)
