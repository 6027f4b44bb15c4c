"""The checkout's test set-up, shared by tests/ and drivers/*/tests (never installed).

The one place where the checkout's layout is known: ``make tools`` installs Azurite into
``.tools/``, which the emulator launchers find through ``TIERED_AZURITE`` (installed code
looks only at that variable and PATH). ``make test`` sets it too; this default covers a
plain ``pytest`` run in the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

_AZURITE = Path(__file__).resolve().parent / ".tools" / "node_modules" / ".bin" / "azurite-blob"
if _AZURITE.exists():
    os.environ.setdefault("TIERED_AZURITE", str(_AZURITE))

# Every Spark driver JVM a test starts (the shared session, each `tiered spark ...` subprocess:
# Spark's launcher adds SPARK_SUBMIT_OPTS to each) lives seconds to a minute on a few
# thousand messages: its JIT's second tier and parallel GC threads only spend CPU, which two
# cores share with the workers. Measured on tests/spark (-n 2): the JVMs' CPU 191 -> 81 s,
# the run 210 -> 147 s. Test set-up only: a store's own jobs keep the JVM's defaults.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


# -- parallel runs (pytest-xdist) ---------------------------------------------------------

#: Test files that take longest, slowest first (each test's wall time, summed per file; a
#: file is one unit of work under ``--dist loadfile``). Under xdist they are handed out
#: before the rest, so no worker starts a long file when the others are about to finish. A
#: file not listed keeps its place after them; a stale entry only costs balance, never a test.
SLOW_FILES_FIRST: tuple[str, ...] = (
    # seconds per file (summed test wall times) from one `-n 2 --dist loadfile` run of the
    # whole suite on this 2-core machine (cf9334b, before fake_gcs emptied its buckets between
    # modules and snapshots skipped holes); the order is what counts. test_stream_source.py
    # stands for the whole SPARK_SESSION_FILES unit (about 140 s with 3 workers): moved up to
    # start beside test_stream_kill, the one run tried took 551 s for the main pass against 477 s
    "tests/spark/test_stream_kill.py",  # 124 s
    "tests/test_verify_backends.py",  # 119 s
    "drivers/s3/tests/test_s3_conformance.py",  # 84 s
    "drivers/fsspec/tests/test_fsspec_s3_moto.py",  # 83 s
    "drivers/gcs/tests/test_gcs_conformance.py",  # 56 s
    "tests/test_store_data_safety.py",  # 49 s
    "tests/test_store_faults.py",  # 46 s
    "tests/test_repair.py",  # 42 s
    "drivers/fsspec/tests/test_fsspec_conformance.py",  # 39 s
    "tests/spark/test_stream_source.py",  # 38 s
    "tests/test_store_restart.py",  # 32 s
    "tests/spark/test_spark_jobs.py",  # 32 s
    "drivers/azure/tests/test_azure_conformance.py",  # 31 s
    "tests/static_topic/test_crash_admin.py",  # 27 s
    "tests/test_store_end_to_end.py",  # 26 s
    "tests/test_crash.py",  # 25 s
    "tests/spark/test_spark_cli_interrupt.py",  # 25 s
    "tests/test_broken_drivers.py",  # 22 s
    "tests/test_objectstore_layout.py",  # 21 s
    "tests/test_cli_ops.py",  # 21 s
)


#: Test files whose tests use the ``spark`` fixture (tests/spark/conftest.py): one local
#: SparkSession per pytest process. Under xdist they are one unit of work, so one worker starts
#: Spark's driver JVM and its Python daemon for all of them, instead of each worker that happens
#: to draw one (a start costs about 9 CPU-s of JVM plus the Python workers it forks, on a machine
#: whose run is CPU-bound). ``tests/spark/test_spark_session_files.py`` keeps the list true.
#: Files that start Spark in a child process (the CLI) need no place here.
SPARK_SESSION_FILES: tuple[str, ...] = (
    "tests/spark/test_stream_source.py",
    "tests/spark/test_spark_jobs.py",
    "tests/spark/test_spark_outputs.py",
    "tests/spark/test_stream_static_topic.py",
    "tests/spark/test_stream_sink.py",
    "tests/spark/test_written_stores_continue.py",
    "tests/spark/test_spark_read.py",
    "tests/spark/test_spark_verify.py",
    "tests/spark/test_spark_reindex.py",
    "tests/spark/test_spark_static_topic.py",
    "tests/spark/test_spark_validation.py",
)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with :data:`SPARK_SESSION_FILES` as one unit of work."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkSessionOnOneWorker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "spark-session" if scope in SPARK_SESSION_FILES else scope

    return SparkSessionOnOneWorker(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """Under xdist, move :data:`SLOW_FILES_FIRST` to the front (stable: each file keeps its
    own order). Every worker sorts the same collection the same way, as xdist requires."""
    if not hasattr(config, "workerinput") or not SLOW_FILES_FIRST:
        return
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    root = Path(str(config.rootpath))

    def key(item) -> int:
        try:
            rel = Path(str(item.path)).resolve().relative_to(root).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(rel, len(rank))

    items.sort(key=key)
