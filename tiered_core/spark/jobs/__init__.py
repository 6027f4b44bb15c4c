"""The jobs over tiered stores, each a function taking a SparkSession.

- :func:`export` -- the messages as Parquet, partitioned by topic (:mod:`.export`);
- :func:`migrate` -- every segment copied to another backend, verified, metadata written once (:mod:`.migrate`);
- :func:`import_parquet` -- Parquet messages appended per queue in offset order (:mod:`.import_`);
- :func:`reindex` -- the tiered key index rebuilt from the messages the tier holds (:mod:`.reindex`);
- :func:`run_mirror` -- a streaming query copying topics from one store to another (:mod:`.mirror`);
- :func:`verify` -- ``tiered verify --deep`` with the per-queue walk in Spark tasks (:mod:`.verify`).

``tiered spark export|migrate|import|reindex|stream|verify`` run them from the command line. The
jobs that write a store (import, reindex, migrate's target, and the streaming sink the
mirror writes through) hold a :class:`~tiered_core.access.writer_session.WriterSession` on it.
"""

from __future__ import annotations

from tiered_core.spark.jobs.export import ExportResult, export
from tiered_core.spark.jobs.import_ import ImportResult, import_parquet
from tiered_core.spark.jobs.migrate import MigrateResult, migrate
from tiered_core.spark.jobs.mirror import StreamResult, run_mirror
from tiered_core.spark.jobs.reindex import ReindexResult, reindex
from tiered_core.spark.jobs.verify import verify

__all__ = ["ExportResult", "ImportResult", "MigrateResult", "ReindexResult", "StreamResult", "export",
           "import_parquet", "migrate", "reindex", "run_mirror", "verify"]
