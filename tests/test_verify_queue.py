"""The per-queue walk of ``tiered verify`` (tiered_core/ops/verify_queue.py): a real posix
store written through the flat API, faults planted in its files and metadata, each found
as the right finding; the walk goes on after a bad message; any split into ranges gives
the same result; the compiled and the pure-Python codec agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sample_store import SampleSpec, write_sample

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, encode_cq_unit
from tiered_core.common import FileSegmentType
from tiered_core.config import StoreConfig
from tiered_core.ops.findings import FindingKind
from tiered_core.ops.verify_queue import finish_walk, plan_ranges, queue_works, structure_findings
from tiered_core.ops.verify_range import verify_range, walk_queues

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")

SPEC = SampleSpec(topics=("orders",), queues=2, messages=180, body_size=64)
PER_QUEUE = SPEC.messages


def write_config(path: Path, store_path: Path) -> str:
    path.write_text(f'[tiered]\nstore_path = "{store_path}"\ndriver = "posix"\n'
                    f"commit_log_max_size = {8 << 10}\nconsume_queue_max_size = 1000\n"
                    "[tiered.options]\nfsync = false\n")
    return str(path)


class Store:
    """A small store and the means to plant faults in it (test-only writes)."""

    def __init__(self, config_path: str) -> None:
        self.config = StoreConfig.load(config_path)
        self.root = Path(self.config.effective_driver_options()["root"])

    def works(self):
        metadata = self.config.open_metadata()
        try:
            return queue_works(metadata, self.config.cluster, self.config.broker)
        finally:
            metadata.close()

    def work(self, queue_id: int = 0):
        return next(w for w in self.works() if w.queue_id == queue_id)

    def walk(self, *, deep: bool, units_per_range: int = 1 << 18):
        driver = self.config.open_driver()
        try:
            return walk_queues(driver, self.works(), deep=deep, units_per_range=units_per_range)
        finally:
            driver.close()

    def file(self, path: str) -> Path:
        return self.root / path

    def update_segment(self, file_type: FileSegmentType, ref, **changes) -> None:
        metadata = self.config.open_metadata()
        try:
            meta = metadata.get_file_segment(int(file_type), "/".join(ref.path.split("/")[1:4]), ref.base_offset)
            for key, value in changes.items():
                setattr(meta, key, value)
            metadata.update_file_segment(meta)
        finally:
            metadata.close()

    def delete_segment(self, file_type: FileSegmentType, ref) -> None:
        metadata = self.config.open_metadata()
        try:
            metadata.delete_file_segment(int(file_type), "/".join(ref.path.split("/")[1:4]), ref.base_offset)
        finally:
            metadata.close()
        self.file(ref.path).unlink()


@pytest.fixture
def store(tmp_path) -> Store:
    config_path = write_config(tmp_path / "tiered.toml", tmp_path / "data")
    write_sample(StoreConfig.load(config_path), SPEC)
    return Store(config_path)


def kinds(walk) -> list[str]:
    return [f.kind.value for f in walk.findings]


def unit_at(store: Store, work, q: int) -> tuple[int, int]:
    """(commit-log offset, size) of unit ``q``, read from its file."""
    import struct

    ref = next(r for r in reversed(work.consume_queue) if r.base_offset <= q * CQ_UNIT_SIZE)
    raw = store.file(ref.path).read_bytes()[q * CQ_UNIT_SIZE - ref.base_offset:][:CQ_UNIT_SIZE]
    off, size, _tags = struct.unpack(">qiq", raw)
    return off, size


def cl_segment_holding(work, offset: int):
    return next(r for r in reversed(work.commit_log) if r.base_offset <= offset)


def test_works_follow_the_metadata(store):
    works = store.works()
    assert [(w.topic, w.queue_id) for w in works] == [("orders", 0), ("orders", 1)]
    for w in works:
        assert (w.min_offset, w.max_offset) == (0, PER_QUEUE)
        assert len(w.consume_queue) == 4 and len(w.commit_log) >= 3  # several sealed segments each
        assert all(path.startswith(store.config.cluster) or "/" in path for path in w.times)
        assert set(w.times) == {r.path for r in w.commit_log}
        assert all(store.file(r.path).stat().st_size == r.size for r in (*w.consume_queue, *w.commit_log))


def test_a_clean_store_has_no_findings_and_every_message_is_read(store):
    shallow, deep = store.walk(deep=False), store.walk(deep=True)
    assert shallow.findings == [] and deep.findings == []
    assert deep.stats.messages_read == 2 * PER_QUEUE and deep.stats.queues_checked == 2
    cl_bytes = sum(r.size for w in store.works() for r in w.commit_log)
    assert deep.stats.bytes_read == cl_bytes + 2 * PER_QUEUE * CQ_UNIT_SIZE
    assert shallow.stats.messages_read == 0 and shallow.stats.bytes_read == 2 * PER_QUEUE * CQ_UNIT_SIZE


@pytest.mark.parametrize("deep", [False, True])
def test_ranges_merge_to_the_same_result_as_one_range(store, deep):
    work = store.work(0)
    seg = work.commit_log[1]
    store.file(seg.path).write_bytes(store.file(seg.path).read_bytes()[:seg.size // 3])  # lost bytes (deep)
    store.file(store.work(1).consume_queue[1].path).unlink()  # a missing consume-queue segment
    cq = work.consume_queue[-1]
    with open(store.file(cq.path), "r+b") as fh:  # three units past the commit log
        end = work.commit_log[-1].base_offset + work.commit_log[-1].size
        fh.seek(5 * CQ_UNIT_SIZE)
        fh.write(b"".join(encode_cq_unit(end + 100 * i, 100, 0) for i in range(3)))
    whole = store.walk(deep=deep)
    assert kinds(whole) == (["lost_bytes", "unit_outside_commit_log", "missing_object"] if deep
                            else ["unit_outside_commit_log", "missing_object"])
    for step in (1, 2, 7, 50):
        split = store.walk(deep=deep, units_per_range=step)
        assert [f.as_dict() for f in split.findings] == [f.as_dict() for f in whole.findings], step
        assert split.stats == whole.stats
    ranges = plan_ranges(work, 13)
    assert ranges[0][0] == 0 and ranges[-1][1] == PER_QUEUE
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])) and max(e - s for s, e in ranges) <= 13
    driver = store.config.open_driver()
    try:  # the ranges in reverse order: finish_walk does not depend on it
        results = [verify_range(driver, work, s, e, deep=deep) for s, e in reversed(ranges)]
    finally:
        driver.close()
    assert [f.as_dict() for f in finish_walk([work], results).findings] == \
        [f.as_dict() for f in whole.findings if f.queue_id == 0]


def test_a_flipped_byte_is_one_corrupt_message_and_the_walk_goes_on(store):
    work = store.work(1)
    q = 57
    off, size = unit_at(store, work, q)
    seg = cl_segment_holding(work, off)
    data = bytearray(store.file(seg.path).read_bytes())
    body_at = data.index(b"orders/1/57:", off - seg.base_offset)
    assert body_at < off - seg.base_offset + size
    data[body_at + 2] ^= 0x40  # inside the body: the body CRC fails
    store.file(seg.path).write_bytes(bytes(data))
    assert store.walk(deep=False).findings == []  # the units are fine; only a deep walk reads messages
    walk = store.walk(deep=True)
    assert kinds(walk) == ["corrupt_message"]
    finding = walk.findings[0]
    assert (finding.subject, finding.queue_offsets, finding.file_offsets) == (seg.path, (q, q + 1), (off, off + size))
    assert finding.facts["reason"] == "crc_mismatch" and finding.topic == "orders" and finding.queue_id == 1
    assert walk.stats.messages_read == 2 * PER_QUEUE - 1  # every other message read


@pytest.mark.parametrize("from_end", [10, 1])  # 1: the units still ascend (no unit is decoded unless one is outside)
def test_a_unit_past_the_commit_log_names_its_queue_offset(store, from_end):
    work = store.work(0)
    q = PER_QUEUE - from_end
    cl_end = work.commit_log[-1].base_offset + work.commit_log[-1].size
    ref = next(r for r in reversed(work.consume_queue) if r.base_offset <= q * CQ_UNIT_SIZE)
    with open(store.file(ref.path), "r+b") as fh:
        fh.seek(q * CQ_UNIT_SIZE - ref.base_offset)
        fh.write(encode_cq_unit(cl_end + 4096, 200, 0))
    for deep in (False, True):
        walk = store.walk(deep=deep)
        assert kinds(walk) == ["unit_outside_commit_log"], deep
        finding = walk.findings[0]
        assert finding.queue_offsets == (q, q + 1) and finding.facts["commitlog_offset"] == cl_end + 4096
    assert walk.stats.messages_read == 2 * PER_QUEUE - 1


def test_a_gap_between_segments_and_the_units_pointing_into_it(store):
    work = store.work(0)
    lost = work.commit_log[1]
    nxt = work.commit_log[2]
    store.delete_segment(FileSegmentType.COMMIT_LOG, lost)  # record and object gone
    gap = structure_findings(store.work(0))
    assert [(f.kind, f.subject, f.file_offsets) for f in gap] == \
        [(FindingKind.SEGMENT_GAP, nxt.path, (lost.base_offset, nxt.base_offset))]
    q0 = next(q for q in range(PER_QUEUE) if unit_at(store, work, q)[0] >= lost.base_offset)
    q1 = next(q for q in range(PER_QUEUE) if unit_at(store, work, q)[0] >= nxt.base_offset)
    for deep in (False, True):
        walk = store.walk(deep=deep)
        assert kinds(walk) == ["segment_gap", "unit_outside_commit_log"] or \
            kinds(walk) == ["unit_outside_commit_log", "segment_gap"], deep
        outside = [f for f in walk.findings if f.kind is FindingKind.UNIT_OUTSIDE_COMMIT_LOG][0]
        assert outside.queue_offsets == (q0, q1) and outside.facts["units"] == q1 - q0
    assert walk.stats.messages_read == 2 * PER_QUEUE - (q1 - q0)


def test_a_consume_queue_gap(store):
    work = store.work(1)
    store.update_segment(FileSegmentType.CONSUME_QUEUE, work.consume_queue[1], size=400)
    walk = store.walk(deep=True)
    assert kinds(walk) == ["segment_gap"]
    assert walk.findings[0].queue_offsets == (70, 100) and walk.findings[0].subject == work.consume_queue[2].path
    assert walk.stats.messages_read == 2 * PER_QUEUE - 30


@pytest.mark.parametrize("deep", [False, True])
def test_a_missing_consume_queue_segment_loses_its_units(store, deep):
    ref = store.work(0).consume_queue[2]
    store.file(ref.path).unlink()
    walk = store.walk(deep=deep)
    assert kinds(walk) == ["missing_object"]
    assert walk.findings[0].subject == ref.path and walk.findings[0].queue_offsets == (100, 150)
    assert walk.findings[0].facts["log"] == "consume_queue"


def test_missing_and_truncated_commit_log_segments_lose_their_messages(store):
    work = store.work(0)
    gone, short = work.commit_log[0], work.commit_log[2]
    store.file(gone.path).unlink()
    keep = short.size // 2
    store.file(short.path).write_bytes(store.file(short.path).read_bytes()[:keep])
    units = [unit_at(store, work, q) for q in range(PER_QUEUE)]
    in_gone = [q for q, (o, s) in enumerate(units) if o < work.commit_log[1].base_offset]
    in_short = [q for q, (o, s) in enumerate(units)
                if short.base_offset <= o < short.base_offset + short.size and o + s > short.base_offset + keep]
    walk = store.walk(deep=True)
    assert kinds(walk) == ["missing_object", "lost_bytes"]
    missing, lost = walk.findings
    assert (missing.subject, missing.queue_offsets) == (gone.path, (in_gone[0], in_gone[-1] + 1))
    assert (lost.subject, lost.queue_offsets) == (short.path, (in_short[0], in_short[-1] + 1))
    assert lost.file_offsets == (short.base_offset + keep, short.base_offset + short.size)
    assert lost.facts["backend_size"] == keep and lost.facts["committed_size"] == short.size
    assert walk.stats.messages_read == 2 * PER_QUEUE - len(in_gone) - len(in_short)


@pytest.mark.parametrize("deep", [False, True])
def test_a_lost_commit_log_segment_beside_its_lost_consume_queue_is_reported(store, deep):
    """Both first segments of a queue gone: verify reports both (it stopped with NOT_FOUND,
    looking for the lost commit-log bytes' queue offsets in the lost consume queue)."""
    from tiered_core.ops.verify import verify_store

    work = store.work(0)
    cl, cq = work.commit_log[0], work.consume_queue[0]
    store.file(cl.path).unlink()
    store.file(cq.path).unlink()
    report = verify_store(store.config, deep=deep)
    missing = {f.subject: f for f in report.of_kind(FindingKind.MISSING_OBJECT)}
    assert set(missing) == {cl.path, cq.path}
    assert missing[cq.path].queue_offsets == (0, cq.size // CQ_UNIT_SIZE)


def test_moved_segment_times_are_found_and_the_open_segment_is_left_out(store):
    work = store.work(1)
    clean = store.walk(deep=True)
    assert clean.findings == []
    sealed, last = work.commit_log[1], work.commit_log[-1]
    begin, end = work.times[sealed.path]
    store.update_segment(FileSegmentType.COMMIT_LOG, sealed, begin_timestamp=begin + 3_600_000,
                         end_timestamp=end + 3_600_000)
    lb, le = work.times[last.path]
    store.update_segment(FileSegmentType.COMMIT_LOG, last, end_timestamp=le + 5)  # still being written
    walk = store.walk(deep=True)
    assert kinds(walk) == ["time_bounds_mismatch"]
    f = walk.findings[0]
    assert f.subject == sealed.path and f.facts["metadata_times"] == [begin + 3_600_000, end + 3_600_000]
    assert f.facts["read_times"] == [begin, end]  # (the sample's store times rise with the offset)
    assert f.facts["times"] == [begin, end + 3_600_000]  # the side that is wrong gets the read time
    assert store.walk(deep=False).findings == []  # times are read by the deep walk only


def test_wider_metadata_times_agree_narrower_ones_do_not(store):
    """The store records the earliest and latest time of everything appended (also bytes
    no unit points at), the rebuild the first and last message's: the metadata must
    contain the times read, and may be wider."""
    work = store.work(0)
    seg = work.commit_log[0]
    begin, end = work.times[seg.path]
    store.update_segment(FileSegmentType.COMMIT_LOG, seg, begin_timestamp=begin - 1, end_timestamp=end + 1)
    assert store.walk(deep=True).findings == []
    store.update_segment(FileSegmentType.COMMIT_LOG, seg, end_timestamp=end - 1)
    walk = store.walk(deep=True)
    assert kinds(walk) == ["time_bounds_mismatch"] and walk.findings[0].facts["times"] == [begin - 1, end]
    assert "the end is wrong" in walk.findings[0].detail


def test_pure_python_and_compiled_paths_agree(store, repo_root):
    work = store.work(0)
    off, size = unit_at(store, work, 33)
    seg = cl_segment_holding(work, off)
    data = bytearray(store.file(seg.path).read_bytes())
    data[off - seg.base_offset + 4] ^= 0x01  # the magic code
    store.file(seg.path).write_bytes(bytes(data))
    script = ("import json,sys; sys.path.insert(0,'tests'); from tiered_core.config import StoreConfig;"
              "from tiered_core.ops.verify_queue import queue_works; from tiered_core.ops.verify_range import walk_queues;"
              "from tiered_core.codec._impl import IMPLEMENTATION;"
              f"c=StoreConfig.load({str(store.config.source)!r}); m=c.open_metadata(); d=c.open_driver();"
              "w=walk_queues(d, queue_works(m, c.cluster, c.broker), deep=True);"
              "print(json.dumps([IMPLEMENTATION, [f.as_dict() for f in w.findings], w.stats.messages_read]))")
    outputs = []
    for pure in ("0", "1"):
        env = dict(os.environ, TIERED_PURE_PYTHON=pure)
        done = subprocess.run([sys.executable, "-c", script], cwd=repo_root, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout))
    (impl_a, found_a, read_a), (impl_b, found_b, read_b) = outputs
    assert impl_b != impl_a  # both paths ran
    assert found_a == found_b and read_a == read_b == 2 * PER_QUEUE - 1
    assert [f["kind"] for f in found_a] == ["corrupt_message"] and found_a[0]["queue_offsets"] == [33, 34]
