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


# -- parallel runs (pytest-xdist) ---------------------------------------------------------

#: Test files that take longest, slowest first (measured with --durations; each file is one
#: unit of work under ``--dist loadfile``). Under xdist they are handed out before the rest,
#: so no worker starts a long file when the others are about to finish. A file not listed
#: keeps its place after them; a stale entry only costs balance, never a test.
SLOW_FILES_FIRST: tuple[str, ...] = (
    "drivers/fsspec/tests/test_fsspec_s3_moto.py",  # 116 tests on moto, 13 min alone on a busy machine
    "tests/spark/test_stream_source.py",
    "tests/spark/test_stream_sink.py",
    "tests/spark/test_stream_kill.py",
    "tests/spark/test_stream_static_topic.py",
    "drivers/s3/tests/test_s3_conformance.py",
    "drivers/fsspec/tests/test_fsspec_conformance.py",
    "tests/test_objectstore_layout.py",
    "tests/spark/test_spark_outputs.py",
    "drivers/s3/tests/test_s3_driver.py",
    "tests/test_store_end_to_end.py",  # the s3 case alone: 61 s
    "tests/test_crash.py",
    "drivers/azure/tests/test_azure_conformance.py",
    "drivers/gcs/tests/test_gcs_conformance.py",
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
