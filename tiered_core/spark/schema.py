"""The row schema of the ``tiered`` data source and the conversion of messages to Arrow batches."""

from __future__ import annotations

from typing import Iterable, Sequence

from tiered_core.codec.message import MessageExt

#: Column names, in schema order.
COLUMNS = (
    "topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp", "born_timestamp",
    "keys", "tags", "properties", "body",
)

#: The schema as Spark DDL (documentation and ``spark.read.schema``).
SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset long, commitlog_offset long, "
    "store_timestamp timestamp, born_timestamp timestamp, keys array<string>, tags string, "
    "properties map<string,string>, body binary"
)


def spark_schema():
    """The Spark ``StructType`` of one message row (built without a running session)."""
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType,
        TimestampType,
    )

    return StructType([
        StructField("topic", StringType()),
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("commitlog_offset", LongType()),
        StructField("store_timestamp", TimestampType()),
        StructField("born_timestamp", TimestampType()),
        StructField("keys", ArrayType(StringType())),
        StructField("tags", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
    ])


def arrow_schema():
    """The Arrow schema Spark expects from a Python data source's record batches.

    Spark compares batch schemas exactly (list item names, timestamp unit and zone), so
    it is derived from the Spark schema by PySpark itself.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(), timezone="UTC")


def messages_to_batch(messages: Sequence[MessageExt], schema=None):
    """One ``pyarrow.RecordBatch`` of ``messages`` in :data:`COLUMNS` order (times in ms -> us UTC)."""
    import pyarrow as pa

    schema = schema if schema is not None else arrow_schema()
    columns = [
        [m.topic for m in messages],
        [m.queue_id for m in messages],
        [m.queue_offset for m in messages],
        [m.commitlog_offset for m in messages],
        [m.store_timestamp * 1000 for m in messages],
        [m.born_timestamp * 1000 for m in messages],
        [m.keys for m in messages],
        [m.tags for m in messages],
        [list(m.properties.items()) for m in messages],
        [m.body for m in messages],
    ]
    arrays = [pa.array(col, type=field.type) for col, field in zip(columns, schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def batch_rows(batch) -> Iterable[dict]:
    """Rows of an Arrow batch with this schema as dicts; timestamps as epoch milliseconds."""
    import pyarrow as pa

    names = batch.schema.names
    cols = {}
    for name in names:
        col = batch.column(name)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
            cols[name] = [None if v is None else v // 1000 for v in col.to_pylist()]
        else:
            cols[name] = col.to_pylist()
    for i in range(batch.num_rows):
        yield {name: cols[name][i] for name in names}
