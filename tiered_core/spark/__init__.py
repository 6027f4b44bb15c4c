"""Spark for tiered-store: the ``tiered`` data source and the bulk jobs (export, import, migrate).

Needs the ``spark`` extra (pyspark, pyarrow) and a Java runtime::

    from tiered_core.spark import register, get_session
    spark = get_session()
    register(spark)
    df = spark.read.format("tiered").option("config", "tiered.toml").option("topics", "orders").load()

Rows follow :data:`~tiered_core.spark.source.schema.SCHEMA_DDL`; the readers live in
:mod:`tiered_core.spark.source`.
"""

from __future__ import annotations

import os
from typing import Any

from tiered_core.spark.config_source import ConfigSource, config_source
from tiered_core.spark.source.options import ReadOptions, parse_read_options
from tiered_core.spark.source.schema import COLUMNS, SCHEMA_DDL
from tiered_core.spark.session import check_java, get_session, prepare_environment


def register(spark) -> None:
    """Register the ``tiered`` format with ``spark`` (once per session); pyspark is imported
    only here (:func:`tiered_core.spark.tiered_format.register`)."""
    from tiered_core.spark.tiered_format import register as register_format

    register_format(spark)


def count_partitions(config: str | os.PathLike | None = None, **options: Any) -> int:
    """How many input partitions a read with these options plans (metadata only; no Spark needed).

    ``config`` is a config file; other keyword arguments are the data source's options.
    """
    return len(plan_read(config, **options))


def plan_read(config: str | os.PathLike | None = None, **options: Any):
    """The :class:`~tiered_core.spark.source.partition_plan.QueuePartition` s a read with these options plans."""
    from tiered_core.spark.source.batch import planned_partitions

    if config is not None:
        options["config"] = os.fspath(config)
    return planned_partitions(config_source(options), parse_read_options(options))


def read(spark, config: str | os.PathLike, **options: Any):
    """``spark.read.format("tiered")`` over ``config`` with ``options`` checked here first (typed
    errors before Spark is involved). List values become comma lists."""
    parse_read_options(options)
    ConfigSource.from_file(config)  # a bad config file fails here, with its ConfigError
    register(spark)
    reader = spark.read.format("tiered").option("config", os.path.abspath(os.fspath(config)))
    for key, value in options.items():
        if value is not None:
            if isinstance(value, (list, tuple, set, frozenset)):
                value = ",".join(map(str, value))
            reader = reader.option(key, str(value))
    return reader.load()


__all__ = [
    "COLUMNS", "SCHEMA_DDL", "ConfigSource", "ReadOptions", "check_java", "count_partitions", "get_session",
    "plan_read", "prepare_environment", "read", "register",
]
