"""Fixtures shared by the core's tests. Keep this file small: one section per topic,
one short docstring per fixture; anything used by a single module belongs in it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


# -- emulators ------------------------------------------------------------------------

# ``fake_gcs``, ``azurite`` and ``moto_s3``: session fixtures of the drivers' test kits (one emulator
# each for tests/; they skip locally and fail under CI=true when it cannot start).
from tiered_driver_azure.testing import azurite  # noqa: E402,F401  (fixture)
from tiered_driver_gcs.testing import fake_gcs  # noqa: E402,F401  (fixture)
from tiered_driver_s3.testing import moto_s3  # noqa: E402,F401  (fixture)


# -- the repository -----------------------------------------------------------------


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root directory (where pyproject.toml and tests/ live)."""
    return REPO_ROOT


# -- child processes ----------------------------------------------------------------


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for a child Python: ``tests.<module>`` importable, no bytecode litter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="session")
def python_exe() -> str:
    """The interpreter running the tests (the project's venv)."""
    return sys.executable


@pytest.fixture
def no_verify_settle(monkeypatch) -> None:
    """verify pauses between its looks at a suspect (``SETTLE_S``) so that a running store can
    finish the step it was in. For tests whose stores are all closed those pauses wait for
    nothing: this makes them zero (test_verify.py keeps them beside a running store)."""
    from tiered_core.ops import verify_listing

    monkeypatch.setattr(verify_listing, "SETTLE_S", tuple(0.0 for _ in verify_listing.SETTLE_S))
