"""The private view of a local store directory (``LocalStoreConfig.read_only``).

A read-only open of a directory a crash left must still cut its torn tail and replay its
queues and keys, for itself only. Its files are private views: every change is kept in
memory and nothing on disk is created, written, deleted or touched. The oracle is the same
sequence of changes made for real on a copy of the directory: reads agree at every step,
and the original is byte for byte and time for time as it was.
"""

from __future__ import annotations

import random
import shutil

import pytest

from snapshots import changes, snapshot
from tiered_core.local.index_file import IndexService
from tiered_core.local.mapped_file import MappedFileQueue

FILE_SIZE = 4096


def _seeded_directory(path, files: int = 3) -> None:
    queue = MappedFileQueue(str(path), FILE_SIZE)
    rng = random.Random(1)
    for _ in range(files * 4):
        mf = queue.last_for_append()
        mf.append(rng.randbytes(min(mf.remaining, 1000)))
    queue.close()


@pytest.mark.parametrize("seed", range(6))
def test_a_private_queue_reads_as_the_same_changes_made_on_a_copy(tmp_path, seed):
    original, copy = tmp_path / "original", tmp_path / "copy"
    _seeded_directory(original)
    shutil.copytree(original, copy)
    before = snapshot(original)
    private, real = MappedFileQueue(str(original), FILE_SIZE, private=True), MappedFileQueue(str(copy), FILE_SIZE)
    rng = random.Random(seed)
    try:
        for _ in range(60):
            op = rng.choice(["append", "append", "cut", "fill"])
            if op == "cut" and real.max_offset > real.min_offset:
                at = rng.randrange(real.min_offset, real.max_offset)
                private.truncate(at)
                real.truncate(at)
            elif op == "fill" and not real.is_empty() and not real.last().is_full():
                private.last().fill_to_capacity()
                real.last().fill_to_capacity()
            else:
                data = rng.randbytes(rng.randrange(1, 700))
                for queue in (private, real):
                    mf = queue.last_for_append(real.min_offset)
                    mf.append(data[: mf.remaining])
            assert (private.min_offset, private.max_offset) == (real.min_offset, real.max_offset)
            for a, b in zip(private.files, real.files, strict=True):
                assert (a.start, a.write_position) == (b.start, b.write_position)
                lo = rng.randrange(0, b.write_position + 1)
                assert a.read(lo, b.write_position - lo) == b.read(lo, b.write_position - lo)
        private.flush()
    finally:
        private.close()
        real.close()
    assert changes(before, snapshot(original)) == {}


def test_a_private_index_takes_keys_and_cuts_in_memory_only(tmp_path):
    original, copy = tmp_path / "original", tmp_path / "copy"
    service = IndexService(str(original), hash_slots=64, max_items=40, clock=lambda: 1_000)
    for i in range(30):
        service.put_keys("t", [f"k{i}"], 100 * i, 1_000 + i)
    service.flush()
    service.close()
    shutil.copytree(original, copy)
    before = snapshot(original)
    private = IndexService(str(original), hash_slots=64, max_items=40, clock=lambda: 2_000, read_only=True)
    real = IndexService(str(copy), hash_slots=64, max_items=40, clock=lambda: 2_000)
    try:
        for service in (private, real):
            service.truncate_from(100 * 20)  # a replay from offset 2000 on
            for i in range(20, 60):  # rolls into a second file (40 items each)
                service.put_keys("t", [f"k{i}"], 100 * i, 1_000 + i)
        for i in (0, 19, 20, 45, 59):
            assert private.query("t", f"k{i}", 10) == real.query("t", f"k{i}", 10) != [], i
        assert len(private.files) == len(real.files) == 2
        private.flush()
    finally:
        private.close()
        real.close()
    assert changes(before, snapshot(original)) == {}
