"""The local IndexFile's byte format and file names (RocketMQ's, seed 001; big-endian).

::

    header (40 bytes)   beginTimestamp 8 | endTimestamp 8 | beginPhyOffset 8 |
                        endPhyOffset 8 | hashSlotCount 4 | indexCount 4
    slots  (4 bytes x hash_slots)   newest item number of the slot, 0 = empty
    items  (20 bytes x max_items)   keyHash 4 | phyOffset 8 | timeDiff (s) 4 | prevIndex 4

Files are named by their creation time, ``yyyyMMddHHmmssSSS`` (UTC here, so names sort
in creation order whatever the local zone does). How the file is written and searched
is :mod:`tiered_core.local.index_file`'s business.
"""

from __future__ import annotations

import datetime as _dt
import struct

HEADER_SIZE = 40
SLOT_SIZE = 4
ITEM_SIZE = 20
INVALID_INDEX = 0

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ITEM = struct.Struct(">iqii")
NAME_LEN = 17


def index_file_name(ts_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` of ``ts_ms`` (UTC)."""
    t = _dt.datetime.fromtimestamp(ts_ms / 1000, _dt.timezone.utc)
    return t.strftime("%Y%m%d%H%M%S") + f"{ts_ms % 1000:03d}"


def parse_index_file_name(name: str) -> int | None:
    """The creation time (ms, UTC) encoded in an index file name, or None."""
    if len(name) != NAME_LEN or not (name.isascii() and name.isdigit()):  # int() refuses "²"
        return None
    try:
        t = _dt.datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return None
    return int(t.timestamp()) * 1000 + int(name[14:])


__all__ = ["HEADER_SIZE", "SLOT_SIZE", "ITEM_SIZE", "INVALID_INDEX", "HEADER", "SLOT", "ITEM",
           "index_file_name", "parse_index_file_name"]
