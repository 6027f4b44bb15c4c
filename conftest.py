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
    # seconds per file from one `-n 2 --dist loadfile --durations` run of the whole suite
    # on this 2-core machine under load (about 8 busy processes): the order is what counts
    "drivers/s3/tests/test_s3_conformance.py",  # 2675 s (1000 small writes on moto: 1780 s)
    "tests/spark/test_stream_source.py",  # 452 s
    "drivers/fsspec/tests/test_fsspec_s3_moto.py",  # 395 s
    "tests/spark/test_stream_kill.py",  # 362 s
    "tests/test_store_data_safety.py",  # 314 s
    "tests/test_repair.py",  # ~200 s (posix and the three emulators; measured alone, not under load)
    "tests/test_verify_backends.py",  # ~190 s (31 drills on the three emulators; measured alone)
    "tests/spark/test_stream_static_topic.py",  # 288 s
    "drivers/gcs/tests/test_gcs_conformance.py",  # 278 s
    "tests/static_topic/test_crash_admin.py",  # 269 s
    "tests/test_speedups.py",  # 234 s
    "tests/test_cli_ops.py",  # 231 s
    "tests/test_store_identity.py",  # 200 s
    "tests/test_store_restart.py",  # 198 s
    "tests/spark/test_stream_sink.py",  # 181 s
    "drivers/azure/tests/test_azure_conformance.py",  # 169 s
    "tests/test_store_faults.py",  # 155 s
    "tests/test_cli_json.py",  # 151 s
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
