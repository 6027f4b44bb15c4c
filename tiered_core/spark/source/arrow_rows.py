"""The one Arrow builder of the ``tiered`` data source: rows of validated messages, column-wise.

Every reader (batch, stream, static topic) turns messages into record batches of
:func:`~tiered_core.spark.source.schema.arrow_schema` here, from a buffer of message bytes
and the positions of the messages in it (:func:`batch_to_arrow` for a validated
:class:`MessageBatch`, :func:`messages_to_arrow` for fetched messages): no ``MessageExt``
objects, no Python row tuples. Two builds give the same record batch: the compiled core
(``codec._impl.message_columns``: one C pass fills every column's buffers) and the pure one
(one header ``unpack_from`` per message, :func:`~tiered_core.codec.message.message_fields`,
then Arrow kernels), which is the compiled one's oracle (``tests/test_speedups.py``). The
message layout is the codec's (docs/ARCHITECTURE.md); no header offset is restated here.
"""

from __future__ import annotations

from typing import Callable

from typing import Sequence

from tiered_core.codec.message import (
    KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, MessageExt, encode_message_ext, message_fields, parse_properties,
)
from tiered_core.codec._impl import message_columns, message_columns_cq
from tiered_core.codec.consume_queue import CQ_UNIT
from tiered_core.codec.message_batch import MessageBatch

#: ``wants_time(store_timestamp_ms) -> bool``: which messages a read keeps (None: all).
TimeFilter = Callable[[int], bool]


def _regroup(lists, keep):
    """The offsets of ``lists`` (a ListArray) once its values are filtered by ``keep``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kept = pc.cumulative_sum(keep.cast(pa.int32()))
    return pc.take(pa.concat_arrays([pa.array([0], pa.int32()), kept]), lists.offsets)


def _flat_values(lists):
    import pyarrow.compute as pc

    return lists.values if lists.offset == 0 else pc.list_flatten(lists)


_PAIR = "(?s)^(?P<name>[^\x01]+)\x01(?P<value>.+)$"


def _split_pairs(flat):
    r"""``(keep, names, values)`` of ``name\x01value`` strings: ``keep`` marks the pairs with a
    non-empty name before the first ``\x01`` and a non-empty value after it; names and values
    of the kept ones. One split in the usual case; a regex when a kept pair has an empty part."""
    import pyarrow.compute as pc

    split = pc.split_pattern(flat, "\x01", max_splits=1)
    keep = pc.equal(pc.list_value_length(split), 2)
    two = split if pc.all(keep).as_py() is not False else split.filter(keep)
    names, values = pc.list_element(two, 0), pc.list_element(two, 1)
    shortest = min((pc.min(pc.binary_length(a)).as_py() or 0) if len(a) else 1 for a in (names, values))
    if shortest > 0:
        return keep, names, values
    parsed = pc.extract_regex(flat, _PAIR)  # "name\x01" or "\x01value": not a property
    keep = parsed.is_valid()
    parsed = parsed.filter(keep)
    return keep, parsed.field("name"), parsed.field("value")


def _repeats(owners, names) -> bool:
    """Whether a name occurs twice among one owner's pairs (``owners`` ascending)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes = pc.dictionary_encode(names)
    key = pc.add(pc.multiply(owners.cast(pa.int64()), max(1, len(codes.dictionary))), codes.indices.cast(pa.int64()))
    ordered = pc.take(key, pc.sort_indices(key))
    return len(ordered) > 1 and pc.any(pc.equal(ordered[1:], ordered[:-1])).as_py()


def properties_columns(texts: list[str], schema):
    r"""``(properties, keys, tags)`` arrays of properties texts (``key\x01value\x02``), parsed in
    Arrow kernels exactly as :func:`~tiered_core.codec.message.parse_properties` (pairs with an
    empty name or value skipped, the value after the first ``\x01``, a repeated name keeping
    its first place and last value) and ``MessageExt.keys`` / ``tags`` from them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    map_type, keys_type = schema.field("properties").type, schema.field("keys").type
    # the text ends with \x02: trimmed first, so the usual message has no empty pair to skip
    pairs = pc.split_pattern(pc.utf8_rtrim(pa.array(texts, pa.string()), "\x02"), "\x02")
    flat = _flat_values(pairs)
    # a pair is "name\x01value": name before the first \x01, both non-empty (else skipped)
    keep, names, values = _split_pairs(flat)
    owners = pc.list_parent_indices(pairs).filter(keep)
    if _repeats(owners, names):
        # a name repeated within a message (rare): the dict semantics of parse_properties
        props = [list(parse_properties(text).items()) for text in texts]
        properties = pa.array(props, type=map_type)
    else:
        properties = pa.MapArray.from_arrays(_regroup(pairs, keep), names, values, type=map_type)
    tags = pc.map_lookup(properties, PROPERTY_TAGS, "last")
    split = pc.split_pattern(pc.fill_null(pc.map_lookup(properties, PROPERTY_KEYS, "last"), ""), KEY_SEPARATOR)
    words = _flat_values(split)
    nonempty = pc.greater(pc.binary_length(words), 0)
    keys = pa.ListArray.from_arrays(_regroup(split, nonempty), words.filter(nonempty), type=keys_type)
    return properties, keys, tags.cast(schema.field("tags").type)


def _columns_pure(data: bytes, positions: list[int]):
    """``(queue offsets, commit-log offsets, store times, born times, bodies, properties texts)``
    of the messages at ``positions``: one header ``unpack_from`` per message (any host layout)."""
    import pyarrow as pa

    heads = [message_fields(data, pos) for pos in positions]  # (header fields, header size, properties start)
    fields = list(zip(*[h[0] for h in heads]))  # the header fields as columns (transposed in C)
    bodies = [data[pos + hs:pos + hs + f[16]] for pos, (f, hs, _at) in zip(positions, heads)]
    texts = [str(data[at:pos + f[0]], "utf-8") for pos, (f, _hs, at) in zip(positions, heads)]
    return (*(pa.array(fields[i], pa.int64()) for i in (5, 6, 11, 8)), bodies, texts)


def _arrays_compiled(buffers, n: int, schema) -> list:
    """The ten columns from the compiled core's buffers (``codec._impl.message_columns``)."""
    import pyarrow as pa

    (queue_offsets, physical, store_us, born_us, body_offsets, body_data, map_offsets, name_offsets, name_data,
     value_offsets, value_data, key_list_offsets, key_offsets, key_data, tag_validity, tag_offsets, tag_data,
     tag_nulls) = buffers
    buf = pa.py_buffer
    types = [field.type for field in schema]
    pairs = len(name_offsets) // 4 - 1

    def int64s(data, typ):
        return pa.Array.from_buffers(pa.int64(), n, [None, buf(data)]).cast(typ)

    def strings(offsets, data, count, typ=pa.string(), validity=None, nulls=0):
        return pa.Array.from_buffers(typ, count, [validity, buf(offsets), buf(data)], null_count=nulls)

    def offsets(data):
        return pa.Array.from_buffers(pa.int32(), n + 1, [None, buf(data)])

    properties = pa.MapArray.from_arrays(offsets(map_offsets), strings(name_offsets, name_data, pairs),
                                         strings(value_offsets, value_data, pairs), type=types[8])
    words = strings(key_offsets, key_data, len(key_offsets) // 4 - 1)
    return [
        None, None,  # topic, queue id: the batch's own
        int64s(queue_offsets, types[2]),
        int64s(physical, types[3]),
        int64s(store_us, types[4]),
        int64s(born_us, types[5]),
        pa.ListArray.from_arrays(offsets(key_list_offsets), words, type=types[6]),
        strings(tag_offsets, tag_data, n, types[7], buf(tag_validity) if tag_nulls else None, tag_nulls),
        properties,
        strings(body_offsets, body_data, n, types[9]),
    ]


def _build(data: bytes, positions: list[int], schema, use_compiled: bool) -> list:
    """The columns of the messages at ``positions`` of ``data`` (topic and queue id left None)."""
    n = len(positions)
    types = [field.type for field in schema]
    buffers = message_columns(data, positions) if message_columns is not None and use_compiled else None
    if buffers is not None:  # the compiled core (same columns; tests/test_speedups.py compares them)
        return _arrays_compiled(buffers, n, schema)
    import pyarrow as pa
    import pyarrow.compute as pc  # a second's import in a fresh worker: only on the pure path

    queue_offsets, cl_offsets, store_ts, born_ts, bodies, texts = _columns_pure(data, positions)
    properties, keys, tags = properties_columns(texts, schema)
    return [
        None, None,
        queue_offsets.cast(types[2]),
        cl_offsets.cast(types[3]),
        pc.multiply(store_ts, 1000).cast(types[4]),
        pc.multiply(born_ts, 1000).cast(types[5]),
        keys,
        tags,
        properties,
        pa.array(bodies, type=types[9]),
    ]


def _empty(schema):
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array([], type=field.type) for field in schema], schema=schema)


def _schema(schema):
    if schema is None:
        from tiered_core.spark.source.schema import arrow_schema

        schema = arrow_schema()
    return schema


def batch_to_arrow(batch: MessageBatch, schema=None, wants_time: TimeFilter | None = None,
                   start: int = 0, stop: int | None = None, *, use_compiled: bool = True):
    """Messages ``start:stop`` of ``batch`` (all by default) that ``wants_time`` keeps, as one
    ``pyarrow.RecordBatch`` with ``schema`` (default :func:`arrow_schema`; times ms -> us UTC).

    ``batch`` must be validated (built by :func:`~tiered_core.flat.batch_check.check_batch`): its bytes
    are not checked again here. ``use_compiled=False`` builds it the pure way (the reference)."""
    import pyarrow as pa

    schema = _schema(schema)
    arrays = None
    cq = batch.cq_bytes(start, stop) if use_compiled and message_columns_cq is not None else None
    if cq is not None:  # the units as stored: no tuple and no position per message in Python
        n = len(cq) // CQ_UNIT.size
        if n == 0:
            return _empty(schema)
        buffers = message_columns_cq(batch.data, cq, batch.base)
        if buffers is not None:
            arrays = _arrays_compiled(buffers, n, schema)
    if arrays is None:
        positions = [off - batch.base for off, _size, _tags in batch.units[start:stop]]
        n = len(positions)
        if n == 0:
            return _empty(schema)
        arrays = _build(batch.data, positions, schema, use_compiled)
    # one value for every row, filled by Arrow rather than from a Python list per message
    arrays[0] = pa.repeat(pa.scalar(batch.topic, schema.field(0).type), n)
    arrays[1] = pa.repeat(pa.scalar(batch.queue_id, schema.field(1).type), n)
    out = pa.RecordBatch.from_arrays(arrays, schema=schema)
    if wants_time is not None:
        import pyarrow.compute as pc

        store_ms = pc.divide(out.column(4).cast(pa.int64()), 1000).to_pylist()
        out = out.filter(pa.array([wants_time(ts) for ts in store_ms], pa.bool_()))
    return out


def _message_bytes(m: MessageExt) -> bytes:
    # a fetched (lazy) message keeps the bytes it was read from; another one is encoded again
    raw = getattr(m, "_raw", None)
    return raw if raw is not None else encode_message_ext(m)


def messages_to_arrow(messages: Sequence[MessageExt], schema=None, *, use_compiled: bool = True):
    """``messages`` (validated, e.g. fetched) as one ``pyarrow.RecordBatch`` with ``schema``, built
    from their bytes as :func:`batch_to_arrow` builds; ``topic``, ``queue_id`` and ``queue_offset``
    are the objects' own (a static topic's reader sets the logic queue and offsets on them)."""
    import pyarrow as pa

    schema = _schema(schema)
    if not messages:
        return _empty(schema)
    raws = [_message_bytes(m) for m in messages]
    positions, at = [], 0
    for raw in raws:
        positions.append(at)
        at += len(raw)
    arrays = _build(b"".join(raws), positions, schema, use_compiled)
    arrays[0] = pa.array([m.topic for m in messages], type=schema.field(0).type)
    arrays[1] = pa.array([m.queue_id for m in messages], type=schema.field(1).type)
    arrays[2] = pa.array([m.queue_offset for m in messages], type=schema.field(2).type)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


__all__ = ["batch_to_arrow", "messages_to_arrow", "properties_columns"]
