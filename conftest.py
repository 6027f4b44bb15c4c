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

#: Test files that take longest, slowest first (measured with --durations; each file is one
#: unit of work under ``--dist loadfile``). Under xdist they are handed out before the rest,
#: so no worker starts a long file when the others are about to finish. A file not listed
#: keeps its place after them; a stale entry only costs balance, never a test.
SLOW_FILES_FIRST: tuple[str, ...] = (
    # seconds per file (summed test durations) from one `-n 2 --dist loadfile --durations=0`
    # run of the whole suite on this 2-core machine (a fresh clone of f189654); the order is
    # what counts
    "tests/spark/test_stream_kill.py",  # 219 s
    "drivers/s3/tests/test_s3_conformance.py",  # 126 s
    "tests/test_verify_backends.py",  # 120 s
    "drivers/fsspec/tests/test_fsspec_s3_moto.py",  # 101 s
    "tests/test_emulator_fault.py",  # 208 s, about 85 s since 2bfc8c2 (its three GCS tests: 24-27 s each)
    "tests/test_store_data_safety.py",  # 61 s
    "drivers/gcs/tests/test_gcs_conformance.py",  # 53 s
    "tests/spark/test_stream_source.py",  # 53 s
    "tests/test_store_faults.py",  # 48 s
    "tests/test_repair.py",  # 48 s
    "drivers/azure/tests/test_azure_conformance.py",  # 46 s
    "drivers/fsspec/tests/test_fsspec_conformance.py",  # 41 s
    "tests/test_verify.py",  # 34 s
    "tests/test_store_restart.py",  # 33 s
    "tests/test_crash.py",  # 26 s
    "tests/test_speedups.py",  # 25 s
    "tests/test_store_identity.py",  # 25 s
    "tests/test_objectstore_layout.py",  # 19 s
)


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
