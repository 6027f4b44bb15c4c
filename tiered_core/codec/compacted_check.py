"""Why bytes are not a compacted key-index file: the check ``tiered verify`` runs on each one.

The slot table is judged first as a whole by :func:`~tiered_core.codec.tiered_index.every_slot_fits`
(the compiled twin when the core is built: one C pass), and only when that says no, slot
by slot, to name the first wrong slot. Its own module because it uses the kernel switch
(:mod:`tiered_core.codec._impl`), which imports :mod:`tiered_core.codec.tiered_index`.
"""

from __future__ import annotations

from tiered_core.codec._impl import every_slot_fits
from tiered_core.codec.tiered_index import (
    COMPACT_ITEM_SIZE, END_MAGIC, HEADER_SIZE, SLOT, SLOT_SIZE, IndexHeader, compacted_slot_count,
)

#: Slot-table bytes checked for all-zero at once: blocks of 4,096 slots, runs of 64.
_BLOCK, _RUN = 4096 * SLOT_SIZE, 64 * SLOT_SIZE


def compacted_file_problem(data: bytes, size: int | None = None) -> str | None:
    """Why ``data`` (a file's header and slot table, or the whole file) is not a compacted
    index file of ``size`` bytes (default ``len(data)``); None when it is."""
    size = len(data) if size is None else size
    if size < HEADER_SIZE + SLOT_SIZE or len(data) < HEADER_SIZE:
        return f"only {size} bytes, less than a header and one slot"
    header = IndexHeader.decode(data[:HEADER_SIZE], "index")
    if header.magic != END_MAGIC:
        return f"header magic {header.magic:#010x} is not the compacted file's {END_MAGIC:#010x}"
    slots = compacted_slot_count(header, size)
    if slots is None:
        return f"{header.item_count} items do not fit {size} bytes with a whole slot table"
    table = bytes(data[HEADER_SIZE:HEADER_SIZE + slots * SLOT_SIZE])
    if len(table) < slots * SLOT_SIZE:
        return None  # only the header was given: the slot table is checked by the caller's full read
    start, end = HEADER_SIZE + slots * SLOT_SIZE, size
    if every_slot_fits(table, start, end):
        return None
    # Some slot is empty as all zero bytes, or wrong: judge slot by slot, in order, skipping
    # blocks and runs of zero bytes (counted in C).
    for block in range(0, len(table), _BLOCK):
        if table.count(0, block, block + _BLOCK) == min(_BLOCK, len(table) - block):
            continue
        for base in range(block, min(block + _BLOCK, len(table)), _RUN):
            run = table[base:base + _RUN]
            if run.count(0) == len(run):
                continue
            for j, (pos, length) in enumerate(SLOT.iter_unpack(run)):
                if length == 0 and pos == 0:
                    continue
                if length < 0 or length % COMPACT_ITEM_SIZE or pos < start or pos + length > end:
                    i = base // SLOT_SIZE + j
                    return f"slot {i} names the run ({pos}, {length}) outside the item area [{start}, {end})"
    return None


__all__ = ["compacted_file_problem"]
