"""The one switch between the compiled core and the pure-Python codec.

``from tiered_core.codec._impl import check_units, decode_message, ...`` gives the compiled
twin of each kernel when the optional extension (:mod:`tiered_core._speedups`) is built,
else the pure-Python function; ``TIERED_PURE_PYTHON=1`` (any value but empty or ``0``)
forces pure Python. :data:`IMPLEMENTATION` says which one is in use. Both return and
raise the same things (the pure functions are the oracles of ``tests/test_speedups.py``).

``pure`` and :func:`load_compiled` give each set by name (tests, benchmarks);
``python -m tiered_core.codec._impl`` prints one line when the pure-Python path is used.
"""

from __future__ import annotations

import os
import zlib
from types import SimpleNamespace

from tiered_core.codec import (
    batch_kernels,
    checks,
    consume_queue,
    dispatch_batch,
    hashing,
    index_batch,
    index_keys,
    message,
    prop_crc,
    tiered_index,
)
from tiered_core.errors import CorruptData

#: Kernel name -> its pure-Python oracle.
ORACLES = {
    "check_units": checks.check_units,
    "decode_message": message.decode_message,
    "validate_message": message.validate_message,
    "peek_total_size": message.peek_total_size,
    "peek_magic": message.peek_magic,
    "peek_queue_id": message.peek_queue_id,
    "peek_queue_offset": message.peek_queue_offset,
    "peek_physical_offset": message.peek_physical_offset,
    "peek_sys_flag": message.peek_sys_flag,
    "peek_born_timestamp": message.peek_born_timestamp,
    "peek_store_timestamp": message.peek_store_timestamp,
    "encode_message": message.encode_message,
    "encode_message_buffer": message.encode_message_buffer,
    "encode_cq_unit": consume_queue.encode_cq_unit,
    "encode_cq_units": consume_queue.encode_cq_units,
    "decode_cq_units": consume_queue.decode_cq_units,
    "pack_item": tiered_index.pack_item,
    "java_crc32": prop_crc.java_crc32,
    "scan_units": batch_kernels.scan_units,
    "cq_span": batch_kernels.cq_span,
    "cq_units_ends": batch_kernels.cq_units_ends,
    "cq_runs": batch_kernels.cq_runs,
    "scan_cq_units": batch_kernels.scan_cq_units,
    "batch_items": batch_kernels.batch_items,
    "build_group": dispatch_batch.build_group,
    "lazy_message_ext": message.lazy_message_ext,
    "link_items": index_batch.link_items,
    "every_slot_fits": tiered_index.every_slot_fits,
}
KERNELS = tuple(ORACLES)

pure = SimpleNamespace(**ORACLES)

PURE_ENV = "TIERED_PURE_PYTHON"
#: Why a present extension was not used (it predates some kernels: rebuild it), else None.
STALE: str | None = None


def forced_pure() -> bool:
    """True when ``TIERED_PURE_PYTHON`` asks for the pure-Python path."""
    return os.environ.get(PURE_ENV, "").strip() not in ("", "0")


def load_compiled() -> SimpleNamespace | None:
    """The compiled kernels, bound to their oracles; None when the extension is not built.
    Ignores ``TIERED_PURE_PYTHON`` (the oracle tests compare both in one process)."""
    try:
        from tiered_core._speedups import _core
    except ImportError:
        return None
    wanted = (*KERNELS, "bind", "bind_batch", "bind_index", "bind_span", "zlib_crc32", "message_columns",
              "message_columns_cq")
    missing = [name for name in wanted if not hasattr(_core, name)]
    if missing:  # a stale build from older sources: its twins would not match these oracles
        global STALE
        STALE = f"{_core.__file__} lacks {', '.join(missing)}"
        return None
    _core.bind({
        **ORACLES,
        "CorruptData": CorruptData,
        "MessageExt": message.MessageExt,
        "Message": message.Message,
        "ConsumeQueueUnit": consume_queue.ConsumeQueueUnit,
        "UnitCheck": checks.UnitCheck,
        "V1": message.MessageVersion.V1,
        "V2": message.MessageVersion.V2,
        "DEFAULT_HOST": message.DEFAULT_HOST,
        "PropCrcPolicy": checks.PropCrcPolicy,
        "SCHEDULE_TOPIC": checks.SCHEDULE_TOPIC,
        "host_of": message._host,
        "host_parts": message._cached_host_parts,
        "tags_hash_code": hashing.tags_hash_code,
    })
    _core.bind_batch({
        **ORACLES,
        "GroupBuild": dispatch_batch.GroupBuild,
        "message_index_keys_from_properties": index_keys.message_index_keys_from_properties,
        "MessageExt": message.MessageExt,
        "UNSET": message._UNSET,
        "V1": message.MessageVersion.V1,
        "V2": message.MessageVersion.V2,
    })
    _core.bind_index(ORACLES)
    _core.bind_span(ORACLES)
    return SimpleNamespace(**{name: getattr(_core, name)
                              for name in (*KERNELS, "message_columns", "message_columns_cq", "zlib_crc32")})


compiled = None if forced_pure() else load_compiled()
_chosen = compiled or pure
#: ``"compiled"`` or ``"pure-python"``: which kernels the names below are.
IMPLEMENTATION = "compiled" if compiled is not None else "pure-python"

check_units = _chosen.check_units
#: Compiled only (None on the pure path): the Arrow buffers of validated messages for
#: ``spark.source.arrow_rows``, whose pure builder is its reference.
message_columns = compiled.message_columns if compiled is not None else None
#: Compiled only: ``message_columns`` of the messages consume-queue units (their stored bytes) point at.
message_columns_cq = compiled.message_columns_cq if compiled is not None else None
decode_message = _chosen.decode_message
validate_message = _chosen.validate_message
peek_total_size = _chosen.peek_total_size
peek_magic = _chosen.peek_magic
peek_queue_id = _chosen.peek_queue_id
peek_queue_offset = _chosen.peek_queue_offset
peek_physical_offset = _chosen.peek_physical_offset
peek_sys_flag = _chosen.peek_sys_flag
peek_born_timestamp = _chosen.peek_born_timestamp
peek_store_timestamp = _chosen.peek_store_timestamp
encode_message = _chosen.encode_message
encode_message_buffer = _chosen.encode_message_buffer
encode_cq_unit = _chosen.encode_cq_unit
encode_cq_units = _chosen.encode_cq_units
decode_cq_units = _chosen.decode_cq_units
pack_item = _chosen.pack_item
java_crc32 = _chosen.java_crc32
scan_units = _chosen.scan_units
cq_span = _chosen.cq_span
cq_units_ends = _chosen.cq_units_ends
cq_runs = _chosen.cq_runs
scan_cq_units = _chosen.scan_cq_units
batch_items = _chosen.batch_items
build_group = _chosen.build_group
lazy_message_ext = _chosen.lazy_message_ext
link_items = _chosen.link_items
every_slot_fits = _chosen.every_slot_fits
#: ``zlib.crc32(data, value)`` (a segment's checksum): the compiled core's CLMUL kernel when it
#: is built (14.5 GB/s against zlib's 1.9 GB/s on this machine, 4 MiB buffers), else zlib's own
#: (the oracle: ``tests/test_speedups.py`` compares them).
crc32 = compiled.zlib_crc32 if compiled is not None else zlib.crc32


def pure_python_line() -> str | None:
    """The one line to print when the pure-Python path is in use, else None."""
    if IMPLEMENTATION == "compiled":
        return None
    if forced_pure():
        return f"tiered-core: {PURE_ENV} is set; using the pure-Python path"
    if STALE:
        return (f"tiered-core: the compiled core is out of date ({STALE}); rebuild it (`make setup`); "
                "using the pure-Python path")
    return ("tiered-core: the compiled core (tiered_core._speedups) is not built; "
            "using the pure-Python path")


__all__ = ["IMPLEMENTATION", "KERNELS", "ORACLES", "crc32", "pure", "compiled", "load_compiled",
           "forced_pure", "pure_python_line", *KERNELS]


if __name__ == "__main__":
    line = pure_python_line()
    if line:
        print(line)
