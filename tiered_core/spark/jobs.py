"""The bulk jobs over a tiered store, each a function taking a SparkSession.

- :func:`export` -- the messages as Parquet, partitioned by topic (:mod:`.export`);
- :func:`migrate` -- every segment copied to another backend, verified, metadata written once (:mod:`.migrate`);
- :func:`import_parquet` -- Parquet messages appended per queue in offset order (:mod:`.importer`).

``tiered spark export|migrate|import`` run them from the command line.
"""

from __future__ import annotations

from tiered_core.spark.export import ExportResult, export
from tiered_core.spark.importer import ImportResult, import_parquet
from tiered_core.spark.migrate import MigrateResult, migrate

__all__ = ["ExportResult", "ImportResult", "MigrateResult", "export", "import_parquet", "migrate"]
