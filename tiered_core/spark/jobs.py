"""The bulk jobs over a tiered store, each a function taking a SparkSession.

- :func:`export` -- the messages as Parquet, partitioned by topic (:mod:`.export`);
- :func:`migrate` -- every segment copied to another backend, verified, metadata written once (:mod:`.migrate`);
- :func:`import_parquet` -- Parquet messages appended per queue in offset order (:mod:`.importer`);
- :func:`reindex` -- the tiered key index rebuilt from the messages the tier holds (:mod:`.reindex`).

``tiered spark export|migrate|import|reindex`` run them from the command line.
"""

from __future__ import annotations

from tiered_core.spark.export import ExportResult, export
from tiered_core.spark.importer import ImportResult, import_parquet
from tiered_core.spark.migrate import MigrateResult, migrate
from tiered_core.spark.reindex import ReindexResult, reindex

__all__ = ["ExportResult", "ImportResult", "MigrateResult", "ReindexResult", "export", "import_parquet", "migrate",
           "reindex"]
