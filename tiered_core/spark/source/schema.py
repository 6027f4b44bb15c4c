"""The row schema of the ``tiered`` data source (Spark and Arrow); rows are built by
:mod:`tiered_core.spark.source.arrow_rows`."""

from __future__ import annotations

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


__all__ = ["COLUMNS", "SCHEMA_DDL", "arrow_schema", "spark_schema"]
