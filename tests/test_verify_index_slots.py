"""verify's check of a compacted index file's slot table (tiered_core.codec.compacted_check.compacted_file_problem):
it judges whole columns at once, or skips runs of zero bytes, and must judge every table as
the plain slot-by-slot loop below does: empty slots as zero bytes (skipped) or with a
position in the item area (what compaction writes)."""

from __future__ import annotations

import random
import struct

import pytest

from tiered_core.codec.compacted_check import compacted_file_problem
from tiered_core.codec.tiered_index import COMPACT_ITEM_SIZE, END_MAGIC, HEADER, HEADER_SIZE, SLOT, SLOT_SIZE


def slot_by_slot(data: bytes) -> str | None:
    """The reference: every slot unpacked and judged in order (what compacted_file_problem did before)."""
    _magic, _begin, _end, _slots, items = HEADER.unpack_from(data, 0)
    slots = (len(data) - HEADER_SIZE - items * COMPACT_ITEM_SIZE) // SLOT_SIZE
    start, end = HEADER_SIZE + slots * SLOT_SIZE, len(data)
    for i, (pos, length) in enumerate(SLOT.iter_unpack(data[HEADER_SIZE:start])):
        if length == 0 and pos == 0:
            continue
        if length < 0 or length % COMPACT_ITEM_SIZE or pos < start or pos + length > end:
            return f"slot {i} names the run ({pos}, {length}) outside the item area [{start}, {end})"
    return None


def index_file(slots: int, items: int, filled: dict[int, tuple[int, int]], empty: str = "zeros") -> bytes:
    table = bytearray(slots * SLOT_SIZE)
    if empty == "positions":  # as compaction writes them: the position the next run would take
        start = HEADER_SIZE + slots * SLOT_SIZE
        for i in range(slots):
            SLOT.pack_into(table, i * SLOT_SIZE, start + (i * 7 % (items + 1)) * COMPACT_ITEM_SIZE, 0)
    for i, (pos, length) in filled.items():
        SLOT.pack_into(table, i * SLOT_SIZE, pos, length)
    return HEADER.pack(END_MAGIC, 1, 2, slots, items) + bytes(table) + bytes(items * COMPACT_ITEM_SIZE)


@pytest.mark.parametrize("empty", ["zeros", "positions"])
@pytest.mark.parametrize("seed", range(40))
def test_every_table_is_judged_as_slot_by_slot(seed, empty):
    rng = random.Random(seed)
    slots, items = rng.randrange(1, 300), rng.randrange(0, 40)
    start = HEADER_SIZE + slots * SLOT_SIZE
    end = start + items * COMPACT_ITEM_SIZE
    filled = {}
    for _ in range(rng.randrange(0, 12)):
        i = rng.randrange(slots)
        first = rng.randrange(items + 1)
        run = rng.randrange(items - first + 1) * COMPACT_ITEM_SIZE
        pos, length = start + first * COMPACT_ITEM_SIZE, run
        bad = rng.random()
        if bad < 0.08:
            length = -rng.randrange(1, 1 << 20)  # all high bytes set
        elif bad < 0.16:
            length += rng.randrange(1, COMPACT_ITEM_SIZE)  # not whole items
        elif bad < 0.24:
            pos = rng.randrange(1, start)  # inside the slot table
        elif bad < 0.32:
            pos = end + rng.randrange(0, 4)  # past the end with a length
            length = length or COMPACT_ITEM_SIZE
        elif bad < 0.40:
            pos, length = rng.choice([(0, COMPACT_ITEM_SIZE), (1, 0), (256, 0), (0, -1)])  # one non-zero field
        filled[i] = (pos, length)
    data = index_file(slots, items, filled, empty)
    assert compacted_file_problem(data) == slot_by_slot(data)
    assert compacted_file_problem(memoryview(data)) == slot_by_slot(data)


def test_a_wrong_slot_among_positioned_empty_ones_is_named():
    slots, items = 500, 10
    start = HEADER_SIZE + slots * SLOT_SIZE
    for i, run in [(0, (start, 13)), (250, (start + 9 * COMPACT_ITEM_SIZE, 2 * COMPACT_ITEM_SIZE)), (499, (start, -28))]:
        data = index_file(slots, items, {i: run}, "positions")
        assert compacted_file_problem(data) == slot_by_slot(data)
        assert compacted_file_problem(data).startswith(f"slot {i} names the run {run}".replace(" -", " -"))
    good = index_file(slots, items, {7: (start, items * COMPACT_ITEM_SIZE)}, "positions")
    assert compacted_file_problem(good) is None and slot_by_slot(good) is None


def test_only_the_last_byte_of_the_last_slot_set():
    data = bytearray(index_file(1000, 3, {}))
    struct.pack_into(">i", data, HEADER_SIZE + 999 * SLOT_SIZE + 4, 1)  # length 1 at position 0
    assert compacted_file_problem(bytes(data)) == slot_by_slot(bytes(data))
    assert compacted_file_problem(bytes(data)).startswith("slot 999 names the run (0, 1)")
