"""Arrow record batches built column-wise from a validated :class:`MessageBatch`.

The read path of the ``tiered`` data source (batch and streaming): the batch's commit-log
buffer and unit offsets go straight into the columns of :func:`~tiered_core.spark.schema.arrow_schema`
-- one header ``unpack_from`` per message (:func:`~tiered_core.codec.message.message_fields`),
no ``MessageExt`` objects, no Python row tuples. The result equals
:func:`~tiered_core.spark.schema.messages_to_batch` of the same messages (a test compares them).
"""

from __future__ import annotations

from typing import Callable

from tiered_core.codec.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, message_fields, parse_properties
from tiered_core.codec.message_batch import MessageBatch

#: ``wants_time(store_timestamp_ms) -> bool``: which messages a read keeps (None: all).
TimeFilter = Callable[[int], bool]


def batch_to_arrow(batch: MessageBatch, schema=None, wants_time: TimeFilter | None = None,
                   start: int = 0, stop: int | None = None):
    """Messages ``start:stop`` of ``batch`` (all by default) that ``wants_time`` keeps, as one
    ``pyarrow.RecordBatch`` with ``schema`` (default :func:`arrow_schema`; times ms -> us UTC).

    ``batch`` must be validated (built by :func:`~tiered_core.flat.batch.check_batch`): its bytes
    are not checked again here."""
    import pyarrow as pa

    if schema is None:
        from tiered_core.spark.schema import arrow_schema

        schema = arrow_schema()
    data, base, topic, queue_id = batch.data, batch.base, batch.topic, batch.queue_id
    queue_offsets: list[int] = []
    cl_offsets: list[int] = []
    store_ts: list[int] = []
    born_ts: list[int] = []
    keys: list[list[str]] = []
    tags: list[str | None] = []
    props: list[list[tuple[str, str]]] = []
    bodies: list[bytes] = []
    for off, size, _tags in batch.units[start:stop]:
        pos = off - base
        f, hs, props_at = message_fields(data, pos)
        if wants_time is not None and not wants_time(f[11]):
            continue
        queue_offsets.append(f[5])
        cl_offsets.append(f[6])
        store_ts.append(f[11] * 1000)
        born_ts.append(f[8] * 1000)
        body_at = pos + hs
        bodies.append(data[body_at:body_at + f[16]])
        text = data[props_at:pos + f[0]]
        p = parse_properties(str(text, "utf-8")) if text else {}
        k = p.get(PROPERTY_KEYS)
        keys.append([x for x in k.split(KEY_SEPARATOR) if x] if k else [])
        tags.append(p.get(PROPERTY_TAGS))
        props.append(list(p.items()))
    n = len(queue_offsets)
    types = [field.type for field in schema]
    arrays = [
        pa.array([topic] * n, type=types[0]) if n else pa.array([], type=types[0]),
        pa.array([queue_id] * n, type=types[1]),
        pa.array(queue_offsets, type=types[2]),
        pa.array(cl_offsets, type=types[3]),
        pa.array(store_ts, type=types[4]),
        pa.array(born_ts, type=types[5]),
        pa.array(keys, type=types[6]),
        pa.array(tags, type=types[7]),
        pa.array(props, type=types[8]),
        pa.array(bodies, type=types[9]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


__all__ = ["batch_to_arrow"]
