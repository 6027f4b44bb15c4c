"""pytest fixtures that run the storage emulators (import them into a test module).

``fake_gcs`` and ``azurite`` are session fixtures: one emulator per test session (per
importing module), on a free 127.0.0.1 port, with its data under pytest's temporary
directory, stopped at the end. When an emulator cannot start the tests using it are
skipped with the reason -- except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from tiered_core.testing.emulators import Azurite, EmulatorError, FakeGcsServer, ci_mode

GCS_BUCKET = "tiered-tests"
AZURE_CONTAINER = "tiered-tests"


def unavailable(what: str, exc: Exception) -> None:
    """Skip (locally) or fail (``CI=true``) because an emulator is missing."""
    message = f"{what} unavailable: {exc}"
    if ci_mode():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsServer]:
    """A running fake-gcs-server with bucket ``tiered-tests``."""
    server = FakeGcsServer(tmp_path_factory.mktemp("fake-gcs") / "data")
    try:
        server.start()
        server.create_bucket(GCS_BUCKET)
    except EmulatorError as exc:
        server.close()
        unavailable("fake-gcs-server", exc)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """A running Azurite blob service with container ``tiered-tests``."""
    server = Azurite(tmp_path_factory.mktemp("azurite") / "data")
    try:
        server.start()
        server.create_container(AZURE_CONTAINER)
    except EmulatorError as exc:
        server.close()
        unavailable("Azurite", exc)
    try:
        yield server
    finally:
        server.close()
