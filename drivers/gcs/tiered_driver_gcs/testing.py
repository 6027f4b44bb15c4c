"""pytest fixtures for the gcs driver (test tooling): import them into a ``conftest.py``.

``fake_gcs`` is a session fixture: one fake-gcs-server with bucket :data:`GCS_BUCKET`
(see :mod:`tiered_conformance.testing` for the skip-locally, fail-in-CI rule).
Open the driver on it with ``GcsDriver(**fake_gcs.driver_options(GCS_BUCKET, prefix))``.
"""

from __future__ import annotations

from tiered_conformance.testing import emulator_fixture

from .emulator import FakeGcsServer

GCS_BUCKET = "tiered-tests"

fake_gcs = emulator_fixture(FakeGcsServer, lambda server: server.create_bucket(GCS_BUCKET), name="fake_gcs",
                            doc=f"A running fake-gcs-server with bucket {GCS_BUCKET!r}.")

__all__ = ["GCS_BUCKET", "fake_gcs"]
