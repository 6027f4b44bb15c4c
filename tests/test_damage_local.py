"""Damage stays local (issue 18, findings 3 and 4).

A store as an operator runs it -- posix driver, 64 KiB tiered commit-log segments, a few
thousand messages on two queues, dispatched, the local copy expired -- whose tier files are
then damaged by hand (truncated, deleted, a byte flipped), then opened again:

* a read serves every intact message before the damage, and the message at it answers
  OFFSET_FOUND_NULL (from the local copy when there is one) with the reason in
  ``result.error``; other segments and queues read as before;
* ``stat`` keeps working and names the damaged segment, the queue and what is wrong;
* ``tiered get`` at a damaged message exits 4 ``CORRUPT_DATA``, naming the queue, the offset
  and what failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_core import Message
from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_unit
from tiered_core.common import BoundaryType
from tiered_core.config import StoreConfig
from tiered_core.errors import CorruptData, StateConflict

TOPIC = "topic0"
PER_QUEUE = 1200  # two queues: 2,400 messages
CQ_SEGMENT = 10_000  # 500 units: three consume-queue segments per queue
FAR_FUTURE = 1 << 60
TIERED = Path(sys.executable).with_name("tiered")


def body(queue_id: int, offset: int) -> bytes:
    return f"q{queue_id}-{offset:05d}|".encode() * 24


def write_config(tmp_path: Path, level: str = "NOT_IN_DISK") -> str:
    path = tmp_path / f"tiered-{level}.toml"
    path.write_text(
        f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "posix"\nstorage_level = "{level}"\n'
        f'commit_log_max_size = "64KiB"\nconsume_queue_max_size = {CQ_SEGMENT}\n'
        f'local_commit_log_file_size = "64KiB"\nlocal_retention_hours = 0\n'
        f'[tiered.options]\nroot = "{tmp_path / "tiered"}"\n')
    return str(path)


def build(tmp_path: Path, *, expire_local: bool = True) -> str:
    """The store: dispatched, and (by default) its local copy expired. Returns its config file."""
    cfg = write_config(tmp_path)
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        for i in range(PER_QUEUE):
            for q in (0, 1):
                store.put_message(Message(topic=TOPIC, body=body(q, i), keys=[f"k{q}-{i}"]), q)
        store.dispatch(force=True)
        if expire_local:
            assert store.delete_expired_local(now_ms=FAR_FUTURE) > 0
            assert store.local.get_min_offset_in_queue(TOPIC, 0) > PER_QUEUE - 100
        for q in (0, 1):
            assert store.flat_files.get(TOPIC, q).consume_queue_commit_offset() == PER_QUEUE
    return cfg


def layout(cfg: str, queue_id: int = 0):
    """``(commit-log segments, consume-queue segments, units)`` of a queue: segments as
    ``(backend path, base offset, size)``, units as ``(commitlog offset, size)`` per offset."""
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        flat = store.flat_files.get(TOPIC, queue_id)
        cl = [(s.path, s.base_offset, s.commit_position) for s in flat.commit_log.segments]
        cq = [(s.path, s.base_offset, s.commit_position) for s in flat.consume_queue.segments]
        raw = flat.get_consume_queue(0, PER_QUEUE)
    units = [(u.commitlog_offset, u.size) for u in (decode_cq_unit(raw, i * CQ_UNIT_SIZE) for i in range(PER_QUEUE))]
    return cl, cq, units


def tier_file(tmp_path: Path, path: str) -> Path:
    full = tmp_path / "tiered" / path
    os.chmod(full, 0o644)  # a sealed segment is read-only
    return full


def truncate(tmp_path: Path, path: str, size: int) -> None:
    os.truncate(tier_file(tmp_path, path), size)


def flip(tmp_path: Path, path: str, at: int) -> None:
    with open(tier_file(tmp_path, path), "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0xFF]))


def read_all(store: TieredMessageStore, queue_id: int, offset: int, stop: int) -> tuple[list[int], object]:
    """Consume from ``offset`` as a consumer does (32 a pull) until a pull finds nothing or
    ``stop``; returns the offsets served (bodies checked) and the last result."""
    served: list[int] = []
    while offset < stop:
        got = store.get_message("g", TOPIC, queue_id, offset, min(32, stop - offset))
        if not got.messages:
            return served, got
        for m in got.messages:
            assert m.body == body(queue_id, m.queue_offset)
        served += [m.queue_offset for m in got.messages]
        offset = got.next_begin_offset
    return served, None


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(TIERED), *args], capture_output=True, text=True, timeout=120)


# -- finding 3: a damaged segment costs its own range only -------------------------------


def test_truncated_consume_queue_segment_leaves_earlier_offsets_readable(tmp_path):
    cfg = build(tmp_path)
    _cl, cq, _units = layout(cfg)
    assert len(cq) == 3
    truncate(tmp_path, cq[1][0], 5010)  # units 500..749 stay (and half a unit), 750..999 are lost
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        # The first pull (a cold read-ahead) used to span into the damaged segment and fail whole.
        got = store.get_message("g", TOPIC, 0, 50, 32)
        assert got.status is GetMessageStatus.FOUND and got.tier is StoreTier.TIERED
        assert [m.queue_offset for m in got.messages] == list(range(50, 82))
        served, last = read_all(store, 0, 50, PER_QUEUE)
        assert served == list(range(50, 750))  # everything before the damage, in order
        assert last.status is GetMessageStatus.OFFSET_FOUND_NULL and last.next_begin_offset == 750
        assert isinstance(last.error, CorruptData) and last.error.reason == "segment_truncated"
        assert last.error.path == cq[1][0] and last.error.queue_offset == 750
        # Past the damaged segment, and the other queue: untouched.
        assert read_all(store, 0, 1000, PER_QUEUE) == (list(range(1000, PER_QUEUE)), None)
        assert read_all(store, 1, 0, PER_QUEUE) == (list(range(PER_QUEUE)), None)
        (row,) = [r for r in store.stat() if r.queue_id == 0]
        (damage,) = row.damage
        assert (damage.path, damage.reason, damage.found, damage.recorded) == (cq[1][0], "segment_truncated",
                                                                               5010, CQ_SEGMENT)
        assert damage.queue_offsets == (750, 1000)


def test_truncated_commit_log_segment_serves_every_message_before_the_cut(tmp_path):
    cfg = build(tmp_path)
    cl, _cq, units = layout(cfg)
    path, base, size = cl[1]  # a sealed segment in the middle
    cut = base + 30_000
    intact = [q for q, (off, n) in enumerate(units) if base <= off and off + n <= cut]
    first_lost = intact[-1] + 1
    assert len(intact) > 50 and units[first_lost][0] < base + size
    truncate(tmp_path, path, 30_000)
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        served, last = read_all(store, 0, intact[0], PER_QUEUE)
        assert served == intact
        assert last.status is GetMessageStatus.OFFSET_FOUND_NULL and last.next_begin_offset == first_lost
        assert last.error.reason == "segment_truncated" and last.error.path == path
        # Never skipped over: asking again answers the same; the next segment still reads.
        again = store.get_message("g", TOPIC, 0, first_lost, 1)
        assert again.status is GetMessageStatus.OFFSET_FOUND_NULL and again.next_begin_offset == first_lost
        after = next(q for q, (off, _n) in enumerate(units) if off >= base + size)
        assert read_all(store, 0, after, PER_QUEUE) == (list(range(after, PER_QUEUE)), None)
        assert read_all(store, 0, 0, intact[0]) == (list(range(intact[0])), None)
        (row,) = [r for r in store.stat() if r.queue_id == 0]
        assert [(d.path, d.found, d.recorded) for d in row.damage] == [(path, 30_000, size)]
        assert row.damage[0].queue_offsets == (first_lost, after)


def test_commit_log_cut_is_served_from_the_local_copy_when_there_is_one(tmp_path):
    cfg = build(tmp_path, expire_local=False)
    cl, _cq, units = layout(cfg)
    path, base, _size = cl[1]
    first_lost = next(q for q, (off, n) in enumerate(units) if off + n > base + 30_000)
    truncate(tmp_path, path, 30_000)
    forced = write_config(tmp_path, "FORCE")  # the same store, read from the tier first
    with TieredMessageStore.open(StoreConfig.load(forced)) as store:
        got = store.get_message("g", TOPIC, 0, first_lost - 3, 32)
        assert got.tier is StoreTier.TIERED and [m.queue_offset for m in got.messages] == [first_lost - 3 + i
                                                                                          for i in range(3)]
        at = store.get_message("g", TOPIC, 0, first_lost, 4)
        assert at.status is GetMessageStatus.FOUND and at.tier is StoreTier.LOCAL
        assert [m.body for m in at.messages] == [body(0, first_lost + i) for i in range(4)]


@pytest.mark.parametrize("kind", ["COMMIT_LOG", "CONSUME_QUEUE"])
def test_missing_oldest_segment_costs_only_its_range(tmp_path, kind):
    cfg = build(tmp_path)
    cl, cq, units = layout(cfg)
    path, base, size = (cl if kind == "COMMIT_LOG" else cq)[0]
    lost_end = (next(q for q, (off, _n) in enumerate(units) if off >= base + size) if kind == "COMMIT_LOG"
                else size // CQ_UNIT_SIZE)
    os.remove(tier_file(tmp_path, path))
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        # stat works, and names the queue, the segment and what is wrong.
        rows = {r.queue_id: r for r in store.stat()}
        assert rows[0].tiered_min == 0 and rows[0].tiered_commit == PER_QUEUE  # no offset is given up
        (damage,) = rows[0].damage
        assert (damage.path, damage.reason, damage.missing, damage.recorded) == (path, "segment_missing", True, size)
        assert damage.queue_offsets == (0, lost_end)
        assert rows[1].damage == []
        # The lost range answers as damaged (the consumer is not told to skip it) ...
        got = store.get_message("g", TOPIC, 0, 0, 32)
        assert got.status is GetMessageStatus.OFFSET_FOUND_NULL and got.next_begin_offset == 0
        assert got.error.reason == "segment_missing" and got.error.path == path
        assert store.get_min_offset_in_queue(TOPIC, 0) == 0
        # ... every later segment reads, and so do the other queue, keys and times.
        assert read_all(store, 0, lost_end, PER_QUEUE) == (list(range(lost_end, PER_QUEUE)), None)
        assert read_all(store, 1, 0, PER_QUEUE) == (list(range(PER_QUEUE)), None)
        hits = store.query_message(TOPIC, f"k0-{PER_QUEUE - 200}").messages
        assert [m.queue_offset for m in hits] == [PER_QUEUE - 200]
        stamp = store.get_message("g", TOPIC, 0, lost_end + 100, 1).messages[0].store_timestamp
        found = store.get_offset_in_queue_by_time(TOPIC, 0, stamp, BoundaryType.LOWER)
        assert lost_end <= found <= lost_end + 100
        assert store.get_message("g", TOPIC, 0, found, 1).messages[0].store_timestamp == stamp


def test_stat_cli_names_the_damage(tmp_path, capsys):
    cfg = build(tmp_path)
    cl, _cq, _units = layout(cfg)
    os.remove(tier_file(tmp_path, cl[0][0]))
    truncate(tmp_path, cl[2][0], 1000)
    assert main(["stat", "--config", cfg, "--json"]) == 0
    rows = {r["queue_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert [(d["segment"], d["type"], d["reason"]) for d in rows[0]["damage"]] == [
        (cl[0][0], "COMMIT_LOG", "segment_missing"), (cl[2][0], "COMMIT_LOG", "segment_truncated")]
    assert rows[0]["damage"][1]["backend_bytes"] == 1000
    assert rows[0]["damage"][1]["recorded_bytes"] == cl[2][2]
    assert rows[1]["damage"] == [] and rows[0]["tiered_commit"] == PER_QUEUE
    assert main(["stat", "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert "2 damaged tiered segment(s)" in out
    assert f"topic0/0: COMMIT_LOG segment {cl[0][0]!r}" in out and "missing from the backend" in out
    assert f"topic0/0: COMMIT_LOG segment {cl[2][0]!r}" in out and "holds 1000 of the" in out


def test_stat_names_a_hole_the_metadata_rebuild_recorded(tmp_path, capsys):
    """An older commit-log segment cut short, then the metadata rebuilt from the listing:
    the rebuild records the short size, so the segment is not shorter than its record,
    but a hole lies before the next segment. ``stat`` names it with the messages lost."""
    cfg = build(tmp_path)
    cl, _cq, units = layout(cfg)
    truncate(tmp_path, cl[1][0], 1000)
    assert main(["metadata", "rebuild", "--config", cfg, "--force", "--progress-every", "0"]) == 0
    capsys.readouterr()
    assert main(["stat", "--config", cfg, "--json"]) == 0
    rows = {r["queue_id"]: r for r in json.loads(capsys.readouterr().out)}
    [hole] = rows[0]["damage"]
    span = cl[2][1] - cl[1][1]
    lost = [q for q, (off, size) in enumerate(units) if off + size > cl[1][1] + 1000 and off < cl[2][1]]
    assert (hole["segment"], hole["reason"], hole["backend_bytes"], hole["recorded_bytes"]) == (
        cl[1][0], "segment_truncated", 1000, span)
    assert hole["queue_offsets"] == [lost[0], lost[-1] + 1] and rows[1]["damage"] == []
    assert main(["stat", "--config", cfg]) == 0
    assert "next segment starts" in capsys.readouterr().out


# -- finding 4: corruption is reported as corruption ---------------------------------------


@pytest.mark.parametrize("damage,reason", [
    ("body", "crc_mismatch"),
    ("unit", "size_mismatch"),  # a flipped byte of the unit's size field
    ("missing", "segment_missing"),
])
def test_get_exits_4_corrupt_at_a_damaged_message(tmp_path, damage, reason):
    cfg = build(tmp_path)
    cl, cq, units = layout(cfg)
    offset = 300
    off, size = units[offset]
    seg_path, seg_base, _ = next(s for s in reversed(cl) if s[1] <= off)
    if damage == "body":
        flip(tmp_path, seg_path, off - seg_base + 100)  # inside the body (it starts at byte 88)
    elif damage == "unit":
        flip(tmp_path, cq[0][0], offset * CQ_UNIT_SIZE + 11)  # the low byte of the size
    else:
        os.remove(tier_file(tmp_path, seg_path))
    res = run("get", "--config", cfg, "--topic", TOPIC, "--offset", str(offset), "--count", "1", "--json")
    assert res.returncode == ExitCode.CORRUPT == 4, res.stderr
    error = json.loads(res.stdout)["error"]
    assert (error["code"], error["type"], error["reason"]) == ("CORRUPT_DATA", "CorruptData", reason)
    assert (error["topic"], error["queue_id"], error["offset"]) == (TOPIC, 0, offset)
    assert f"{TOPIC}/0 offset {offset} is damaged in the tiered store" in error["message"]
    assert "[CORRUPT_DATA]" in res.stderr
    # The damaged message is never served; the intact one before it (and the other queue) is.
    if damage != "missing":
        ok = run("get", "--config", cfg, "--topic", TOPIC, "--offset", str(offset - 1), "--count", "5", "--json")
        assert ok.returncode == 0, ok.stderr
        assert [m["queue_offset"] for m in json.loads(ok.stdout)["messages"]] == [offset - 1]
    other = run("get", "--config", cfg, "--topic", TOPIC, "--queue", "1", "--offset", str(offset), "--count", "1")
    assert other.returncode == 0, other.stderr


def test_get_still_exits_3_when_there_is_no_message(tmp_path, capsys):
    cfg = build(tmp_path)
    assert main(["get", "--config", cfg, "--topic", TOPIC, "--offset", str(PER_QUEUE + 5), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["error"]["status"] == "OFFSET_OVERFLOW_BADLY"


# -- the container layer: the backend's size decides what is damage ---------------------


@pytest.fixture
def cq(tmp_path):
    """A consume-queue flat file of 3 segments x 5 units over posix, behind a fault layer."""
    from tiered_conformance.faults import FaultLayer
    from tiered_core.flat import FlatConsumeQueueFile
    from tiered_core.metadata.sqlite import SqliteMetadataStore
    from tiered_core.plugins import open_driver

    driver = FaultLayer(open_driver("posix", root=str(tmp_path / "root")), close_inner=True)
    metadata = SqliteMetadataStore(str(tmp_path / "meta.db"))
    f = FlatConsumeQueueFile(driver, metadata, "broker/topic/0", segment_path=lambda base: f"cq/{base:020d}",
                             max_size=5 * CQ_UNIT_SIZE)
    f.init_offset(0)
    for i in range(15):
        assert f.append(bytes([i]) * CQ_UNIT_SIZE).name == "SUCCESS"
        assert f.commit()
    yield f, driver, tmp_path / "root"
    metadata.close()
    driver.close()


def test_a_failing_read_of_bytes_that_are_there_is_not_damage(cq):
    from tiered_core.errors import DriverError

    f, driver, _root = cq
    driver.unavailable.add("read")
    with pytest.raises(DriverError):
        f.read(0, 15 * CQ_UNIT_SIZE)
    assert f.damage == {}  # the backend still holds every byte: a failed read, not damage
    driver.unavailable.clear()
    assert f.read(0, 15 * CQ_UNIT_SIZE) == b"".join(bytes([i]) * CQ_UNIT_SIZE for i in range(15))


def test_a_read_ends_at_the_last_whole_unit_a_truncated_segment_holds(cq):
    f, _driver, root = cq
    seg = f.segments[1]
    os.chmod(root / seg.path, 0o644)
    os.truncate(root / seg.path, 2 * CQ_UNIT_SIZE + 7)  # units 5, 6 and 7 bytes of unit 7
    assert f.read(0, 15 * CQ_UNIT_SIZE) == b"".join(bytes([i]) * CQ_UNIT_SIZE for i in range(7))
    (damage,) = f.damage.values()
    assert (damage.path, damage.found, damage.recorded, damage.lost) == (seg.path, 47, 100, (147, 200))
    with pytest.raises(CorruptData) as info:
        f.read(7 * CQ_UNIT_SIZE, CQ_UNIT_SIZE)
    assert (info.value.reason, info.value.path, info.value.offset) == ("segment_truncated", seg.path, 140)
    assert f.read(10 * CQ_UNIT_SIZE, 100) == b"".join(bytes([i]) * CQ_UNIT_SIZE for i in range(10, 15))


@pytest.mark.parametrize("kind", ["COMMIT_LOG", "CONSUME_QUEUE"])
def test_damaged_newest_segment_quarantines_its_queue_only(tmp_path, capsys, kind):
    """The writable (newest) segment lost committed bytes: appending after them could reuse
    its offsets, so that queue alone refuses puts; what the tier still holds before the
    damage is served, and the lost range answers OFFSET_FOUND_NULL (with the reason, naming
    the segment); the store opens, the other queue works, stat names it."""
    cfg = build(tmp_path)
    cl, cq, _ = layout(cfg)
    path, _, size = (cl if kind == "COMMIT_LOG" else cq)[-1]
    truncate(tmp_path, path, size // 2)
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        assert set(store.unrecoverable) == {(TOPIC, 0)}
        served, _ = read_all(store, 1, 0, PER_QUEUE)
        assert served == list(range(PER_QUEUE))
        served, got = read_all(store, 0, 0, PER_QUEUE)
        assert served == list(range(len(served))) and 0 < len(served) < PER_QUEUE  # the intact prefix
        lost = len(served)
        assert got.status is GetMessageStatus.OFFSET_FOUND_NULL and got.next_begin_offset == lost
        assert isinstance(got.error, StateConflict) and path in str(got.error)
        with pytest.raises(StateConflict) as refused:
            store.put_message(Message(topic=TOPIC, body=b"x"), 0)
        assert refused.value.queue_id == 0
        assert store.put_message(Message(topic=TOPIC, body=b"y"), 1).queue_offset == PER_QUEUE
    assert main(["stat", "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert "1 queue(s) whose tiered files could not be recovered" in out and path in out
    # the CLI at the first lost offset: STATE_CONFLICT, exit 5, naming the segment
    assert main(["get", "--config", cfg, "--topic", TOPIC, "--queue", "0", "--offset", str(lost),
                 "--count", "1"]) == 5
    err = capsys.readouterr().err
    assert "STATE_CONFLICT" in err and path in err


def test_a_damaged_first_message_header_costs_that_message_only(tmp_path, caplog):
    """A flipped magic byte of a queue's first tiered message (found by an operator drill:
    the open read that header to learn the queue's first offset, and every put, ``stat`` and
    take-over of the whole store failed CORRUPT_DATA). Now that message alone is damaged: the
    store opens, other queues take puts, ``stat`` works and the queue's other messages read."""
    cfg = build(tmp_path)
    cl, _cq, _units = layout(cfg)
    flip(tmp_path, cl[0][0], 4)  # inside the magic of the message at tiered offset 0
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        assert store.put_message(Message(topic=TOPIC, body=b"after"), 1).queue_offset == PER_QUEUE
        served, _ = read_all(store, 0, 1, 40)
        assert served == list(range(1, 40))
        flat = store.flat_files.get(TOPIC, 0)
        assert flat.consume_queue_min_offset() == 0
    assert "the first message of commit log" in caplog.text and "is damaged" in caplog.text
    res = run("stat", "--config", cfg, "--json")
    assert res.returncode == 0, res.stderr
    res = run("get", "--config", cfg, "--topic", TOPIC, "--offset", "0", "--count", "1", "--json")
    assert res.returncode == ExitCode.CORRUPT, res.stderr
    assert json.loads(res.stdout)["error"]["offset"] == 0
