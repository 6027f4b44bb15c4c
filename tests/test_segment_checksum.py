"""Each segment's checksum: recorded as the store writes, kept across a restart and an adopted
tail, stored by both metadata stores (a version-1 SQLite file read as it is, migrated by a
writable open), and compared by ``tiered verify --deep``.

Drill s13 F1: a sealed segment whose bytes were replaced by an object of the same name and
size, with valid messages stored within the segment's recorded times, passed every read
check of ``verify --deep`` while its offsets served other messages. Its checksum does not.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import zlib
from pathlib import Path

import pytest

from tiered_core import Message, StoreConfig
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.codec.message import BODY_CRC_POS
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.metadata.json_store import JsonMetadataStore
from tiered_core.metadata.sqlite import SCHEMA_VERSION, SqliteMetadataStore
from tiered_core.ops.reconcile import backend_path
from tiered_core.spi.metadata import FileSegmentMetadata

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


def _config(root: Path, metadata: str = "sqlite") -> tuple[StoreConfig, str]:
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "tiered.toml"
    conf.write_text(f'[tiered]\nstore_path = "{root / "store"}"\ndriver = "posix"\nmetadata = "{metadata}"\n'
                    f'commit_log_max_size = 3000\n[tiered.options]\nroot = "{root / "tier"}"\nfsync = false\n')
    return StoreConfig.load(str(conf), environ={}), str(conf)


def _body(i: int) -> bytes:
    return f"order {i:05d} ".encode() * 6


def _put(config: StoreConfig, first: int, count: int) -> None:
    with TieredMessageStore.open(config) as store:
        for i in range(first, first + count):
            store.put_message(Message(topic="orders", body=_body(i), keys=[f"k{i}"]), i % 2)
            if i % 7 == 6:
                store.dispatch(force=True)  # many commits per segment
        store.dispatch(force=True)


def _records(config: StoreConfig) -> list[FileSegmentMetadata]:
    metadata = config.open_metadata()
    try:
        return [m for m in metadata.iterate_file_segments() if m.type != FileSegmentType.INDEX]
    finally:
        metadata.close()


def _object(config: StoreConfig, meta: FileSegmentMetadata) -> Path:
    return Path(config.driver_options["root"]) / backend_path(config.cluster, meta)


def _assert_checksums_match_the_objects(config: StoreConfig) -> int:
    records = _records(config)
    assert records
    for m in records:
        assert m.checksum is not None, m
        assert m.checksum_size == m.size, m
        assert zlib.crc32(_object(config, m).read_bytes()[:m.size]) == m.checksum, m
    return len(records)


@pytest.mark.parametrize("metadata", ["sqlite", "json"])
def test_every_segment_records_the_checksum_of_its_bytes_across_restarts(tmp_path, metadata):
    config, _ = _config(tmp_path, metadata)
    _put(config, 0, 60)
    _assert_checksums_match_the_objects(config)
    _put(config, 60, 60)  # a reopen continues each last segment's checksum
    n = _assert_checksums_match_the_objects(config)
    assert sum(1 for m in _records(config) if m.status == SegmentStatus.SEALED) >= 4 and n >= 6


def test_a_tail_adopted_at_open_is_hashed_into_the_checksum(tmp_path):
    """Bytes that landed after the last metadata update (a crash between the two) are adopted
    at the next open; the checksum then covers them too."""
    config, _ = _config(tmp_path)
    _put(config, 0, 10)
    last = max((m for m in _records(config) if m.type == FileSegmentType.COMMIT_LOG and m.path.endswith("/0")),
               key=lambda m: m.base_offset)
    data = _object(config, last).read_bytes()
    starts = _message_starts(data)
    assert len(starts) >= 2
    cut = starts[-1]  # as if the store crashed after committing its last message, before recording it
    metadata = config.open_metadata()
    try:
        metadata.update_file_segment(FileSegmentMetadata(
            last.path, last.type, last.base_offset, cut, last.status, last.create_timestamp, last.begin_timestamp,
            last.end_timestamp, last.seal_timestamp, zlib.crc32(data[:cut]), cut))
    finally:
        metadata.close()
    _put(config, 10, 2)
    _assert_checksums_match_the_objects(config)


def _message_starts(data: bytes) -> list[int]:
    """Where each message of a commit-log segment starts (its first field is its size)."""
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += int.from_bytes(data[pos:pos + 4], "big")
    return starts


def _seal_all(config: StoreConfig) -> FileSegmentMetadata:
    """The records of a store whose first commit-log segment of queue 0 is sealed, and that one."""
    return min((m for m in _records(config) if m.type == FileSegmentType.COMMIT_LOG and m.path.endswith("/0")
                and m.status == SegmentStatus.SEALED), key=lambda m: m.base_offset)


def _swap_a_body_keeping_every_read_check(path: Path, old: bytes, new: bytes) -> None:
    """Another message in place of one: same length, its body CRC right, its times unchanged."""
    data = bytearray(path.read_bytes())
    at = data.index(old)
    start = max(p for p in _message_starts(data) if p < at)
    data[at:at + len(new)] = new
    data[start + BODY_CRC_POS:start + BODY_CRC_POS + 4] = (zlib.crc32(new) & 0x7FFFFFFF).to_bytes(4, "big")
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))
    os.chmod(path, 0o444)


def _verify(capsys, conf: str, *extra: str) -> tuple[int, dict]:
    code = main(["verify", "--config", conf, "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_verify_checksums_finds_a_segment_whose_bytes_are_not_the_ones_written(tmp_path, capsys):
    config, conf = _config(tmp_path)
    _put(config, 0, 60)
    sealed = _seal_all(config)
    subject = backend_path(config.cluster, sealed)
    code, clean = _verify(capsys, conf, "--deep", "--checksums")
    assert code == 0 and clean["summary"]["checksums"] is True, clean["findings"]
    with_bytes = [m for m in _records(config) if m.size and m.type != FileSegmentType.INDEX]
    assert clean["summary"]["objects_hashed"] == len(with_bytes) > 1
    assert clean["summary"]["objects_without_checksum"] == 0
    victim = _object(config, sealed)
    size = victim.stat().st_size
    _swap_a_body_keeping_every_read_check(victim, _body(2), _body(2).replace(b"order", b"ORDER"))
    assert victim.stat().st_size == size

    code, report = _verify(capsys, conf, "--deep")
    assert code == 0, report["findings"]  # the read checks and the times see nothing wrong
    code, report = _verify(capsys, conf, "--deep", "--checksums")
    assert code == 4, report["findings"]
    (found,) = report["findings"]
    assert (found["kind"], found["severity"], found["subject"]) == ("checksum_mismatch", "corrupt", subject)
    assert not found["mendable"] and "metadata rebuild" in found["fix"]
    assert found["facts"]["recorded_checksum"] == sealed.checksum
    assert found["facts"]["found_checksum"] == zlib.crc32(victim.read_bytes()[:sealed.checksum_size])
    assert found["topic"] == "orders" and found["queue_id"] == 0
    code, alone = _verify(capsys, conf, "--checksums")  # without the walk: the same finding
    assert code == 4 and [f["kind"] for f in alone["findings"]] == ["checksum_mismatch"], alone["findings"]
    # repair has nothing to mend there: the object and its record stay as they are
    changed = victim.read_bytes()
    main(["repair", "--config", conf, "--apply", "--json"])
    capsys.readouterr()
    assert victim.read_bytes() == changed and _seal_all(config).checksum == sealed.checksum


def test_a_rebuild_of_the_stores_own_records_keeps_their_checksums(tmp_path, capsys):
    """Drill s13 F2: a rebuild over an object put in a segment's place took it as the store's,
    after which verify was clean. The rebuild of the store's own records keeps each segment's
    checksum, so verify --checksums still finds it."""
    config, conf = _config(tmp_path)
    _put(config, 0, 60)
    sealed = _seal_all(config)
    _swap_a_body_keeping_every_read_check(_object(config, sealed), _body(2), _body(2).replace(b"order", b"ORDER"))
    assert main(["metadata", "rebuild", "--config", conf, "--force"]) == 0
    assert "kept the checksums of" in capsys.readouterr().out
    assert {(m.base_offset, m.checksum) for m in _records(config) if m.path == sealed.path
            and m.type == sealed.type} >= {(sealed.base_offset, sealed.checksum)}
    code, report = _verify(capsys, conf, "--checksums")
    assert code == 4 and [(f["kind"], f["subject"]) for f in report["findings"] if f["severity"] != "info"] == \
        [("checksum_mismatch", backend_path(config.cluster, sealed))]


def test_a_rebuild_over_another_stores_records_keeps_none_of_their_checksums(tmp_path, capsys):
    """Another store's database copied over this one's (same cluster and broker; see
    test_foreign_metadata.py): its records name segments of the same names, hashed over that
    store's bytes. The rebuild it calls for keeps none of them: verify --checksums stays clean."""
    a, a_conf = _config(tmp_path / "a")
    b, _ = _config(tmp_path / "b")
    _put(a, 0, 40)
    _put(b, 0, 20)  # B's segments are no longer than A's: each checksum would fit A's objects
    shutil.copyfile(b.effective_metadata_path(), a.effective_metadata_path())
    assert main(["metadata", "rebuild", "--config", a_conf, "--force"]) == 0
    assert "kept the checksums" not in capsys.readouterr().out
    code, report = _verify(capsys, a_conf, "--checksums")
    assert code == 0, report["findings"]
    # ...and says how many it could not hash (an upgrade drill: "clean" alone read as all hashed)
    with_bytes = [m for m in _records(a) if m.size and m.type != FileSegmentType.INDEX]
    assert report["summary"]["objects_hashed"] == 0
    assert report["summary"]["objects_without_checksum"] == len(with_bytes) > 1
    assert main(["verify", "--config", a_conf, "--checksums"]) == 0
    assert f"checksums: 0 segment(s) hashed; {len(with_bytes)} segment(s) not hashed: no checksum was recorded" \
        in capsys.readouterr().out


def test_a_version_1_sqlite_file_reads_unchanged_and_a_writable_open_adds_the_columns(tmp_path):
    db = tmp_path / "meta.db"
    store = SqliteMetadataStore(str(db))
    store.update_file_segment(FileSegmentMetadata("b/t/0", 0, 0, size=10, checksum=0xDEADBEEF, checksum_size=10))
    store.close()
    # a version-1 file: the table without the two columns
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE old (type INTEGER NOT NULL, path TEXT NOT NULL, base_offset INTEGER NOT NULL,
            size INTEGER NOT NULL, status INTEGER NOT NULL, create_timestamp INTEGER NOT NULL,
            begin_timestamp INTEGER NOT NULL, end_timestamp INTEGER NOT NULL, seal_timestamp INTEGER NOT NULL,
            PRIMARY KEY (type, path, base_offset)) WITHOUT ROWID;
        INSERT INTO old SELECT type, path, base_offset, size, status, create_timestamp, begin_timestamp,
                               end_timestamp, seal_timestamp FROM file_segments;
        DROP TABLE file_segments;
        ALTER TABLE old RENAME TO file_segments;
        DELETE FROM schema_version; INSERT INTO schema_version (version) VALUES (1);""")
    conn.close()
    before = db.read_bytes()
    for reader in (SqliteMetadataStore.open_for_reading(str(db)), SqliteMetadataStore.open_read_only(str(db))):
        try:
            (m,) = reader.iterate_file_segments()
            assert (m.size, m.checksum, m.checksum_size) == (10, None, 0)
            assert reader.get_file_segment(0, "b/t/0", 0) == m
        finally:
            reader.close()
    assert db.read_bytes() == before
    store = SqliteMetadataStore(str(db))
    try:
        (m,) = store.iterate_file_segments()
        assert (m.size, m.checksum) == (10, None)
        store.update_file_segment(FileSegmentMetadata("b/t/0", 0, 0, size=12, checksum=7, checksum_size=12))
        assert store.get_file_segment(0, "b/t/0", 0).checksum == 7
    finally:
        store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (SCHEMA_VERSION,) == (2,)


def test_json_metadata_writes_the_checksum_only_when_known(tmp_path):
    path = tmp_path / "tieredStoreMetadata.json"
    store = JsonMetadataStore(str(path))
    try:
        store.update_file_segment(FileSegmentMetadata("b/t/0", 0, 0, size=10))
        store.update_file_segment(FileSegmentMetadata("b/t/0", 0, 10, size=5, checksum=123, checksum_size=5))
        store.flush()
        text = store.encode()
        assert text == json.dumps(store.document(), indent="\t", separators=(",", ":"), ensure_ascii=False) + "\n"
    finally:
        store.close()
    doc = json.loads(path.read_text())
    segs = doc["commitLogFileSegmentTable"]["b/t/0"]
    assert "checksum" not in segs["0"]  # a record without one is exactly RocketMQ's
    assert (segs["10"]["checksum"], segs["10"]["checksumSize"]) == (123, 5)
    reopened = JsonMetadataStore(str(path))
    try:
        assert reopened.get_file_segment(0, "b/t/0", 10).checksum == 123
        assert reopened.get_file_segment(0, "b/t/0", 0).checksum is None
    finally:
        reopened.close()


@pytest.mark.parametrize("bad", [-1, 1 << 32, "12", True])
def test_a_checksum_that_is_no_crc32_is_refused(tmp_path, bad):
    store = SqliteMetadataStore(str(tmp_path / "m.db"))
    try:
        with pytest.raises(Exception) as err:
            store.update_file_segment(FileSegmentMetadata("b/t/0", 0, 0, size=1, checksum=bad, checksum_size=1))
        assert "checksum" in str(err.value) and getattr(err.value, "code", None)
    finally:
        store.close()


# -- tiered metadata checksum: records without a checksum get one ------------------------


def _strip_checksums(config: StoreConfig) -> int:
    """The records as an older version (or a rebuild) leaves them: no checksum."""
    metadata = config.open_metadata()
    try:
        records = list(metadata.iterate_file_segments())
        for m in records:
            m.checksum, m.checksum_size = None, 0
            metadata.update_file_segment(m)
    finally:
        metadata.close()
    assert all(m.checksum is None for m in _records(config))
    return sum(1 for m in _records(config) if m.size)


def _checksum_cmd(capsys, conf: str, *extra: str) -> tuple[int, dict | None, str]:
    code = main(["metadata", "checksum", "--config", conf, "--json", *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_metadata_checksum_records_what_older_versions_and_rebuilds_left_without_one(tmp_path, capsys):
    """Upgrade drill U1 and the take-over: segments whose records have no checksum are never
    compared. `tiered metadata checksum --apply` records one for each after a clean deep
    verify; the store then extends them as it appends, and verify --checksums finds a later
    change to those bytes."""
    config, conf = _config(tmp_path)
    _put(config, 0, 60)
    stripped = _strip_checksums(config)
    assert stripped > 2
    code, report = _verify(capsys, conf, "--checksums")
    assert code == 0 and report["summary"]["objects_without_checksum"] == stripped

    code, dry, err = _checksum_cmd(capsys, conf)
    assert code == 0, err
    assert (dry["without_checksum"], dry["segments"], dry["recorded"], dry["applied"]) == (stripped, stripped, 0, False)
    assert "dry run: nothing recorded" in err
    assert all(m.checksum is None for m in _records(config))  # a dry run writes nothing...
    with TieredMessageStore.open(config):  # ...and, like verify, runs beside a running store
        code, beside, err = _checksum_cmd(capsys, conf)
    assert code == 0 and beside["without_checksum"] == stripped, (beside, err)

    code, done, err = _checksum_cmd(capsys, conf, "--apply")
    assert code == 0, err
    assert (done["recorded"], done["skipped"], done["applied"]) == (stripped, 0, True)
    assert done["bytes_hashed"] == sum(m.size for m in _records(config))
    _assert_checksums_match_the_objects(config)
    code, again, _ = _checksum_cmd(capsys, conf)
    assert code == 0 and again["without_checksum"] == 0

    # The store carries them on as it appends (the last segments' checksums grow with them)...
    _put(config, 60, 30)
    _assert_checksums_match_the_objects(config)
    code, report = _verify(capsys, conf, "--deep", "--checksums")
    assert code == 0 and report["summary"]["objects_without_checksum"] == 0, report["findings"]
    # ...and a later change to a segment's bytes is found.
    sealed = _seal_all(config)
    _swap_a_body_keeping_every_read_check(_object(config, sealed), _body(2), _body(2).replace(b"order", b"ORDER"))
    code, report = _verify(capsys, conf, "--checksums")
    assert code == 4 and [f["kind"] for f in report["findings"]] == ["checksum_mismatch"], report["findings"]


def test_metadata_checksum_records_nothing_over_a_problem_verify_finds_or_under_a_running_store(tmp_path, capsys):
    config, conf = _config(tmp_path)
    _put(config, 0, 60)
    _strip_checksums(config)
    # A running store: refused (its lock), nothing recorded.
    with TieredMessageStore.open(config):
        code, out, err = _checksum_cmd(capsys, conf, "--apply")
    assert code == 5 and out["error"]["code"] == "STATE_CONFLICT", (out, err)
    assert "is open in another process" in out["error"]["message"] and str(config.store_path) in out["error"]["message"]
    assert all(m.checksum is None for m in _records(config))
    # Bytes past a segment's committed end that are not the store's: verify --deep finds them, and a
    # checksum would vouch for the segment, so none is recorded.
    sealed = _seal_all(config)
    victim = _object(config, sealed)
    os.chmod(victim, 0o644)
    with open(victim, "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 8)  # a message's header no read check accepts
    code, out, err = _checksum_cmd(capsys, conf, "--apply")
    assert code == 5 and out["error"]["code"] == "STATE_CONFLICT", (out, err)
    assert "tiered verify --deep finds" in out["error"]["message"] and "none was recorded" in out["error"]["message"]
    assert all(m.checksum is None for m in _records(config))
    # A config naming no store creates nothing.
    other, other_conf = _config(tmp_path / "none")
    assert main(["metadata", "checksum", "--config", other_conf]) == 3
    assert not os.path.exists(other.store_path)
