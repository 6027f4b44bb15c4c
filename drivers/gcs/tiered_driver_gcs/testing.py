"""pytest fixtures for the gcs driver (test tooling): import them into a ``conftest.py``.

``fake_gcs``: one fake-gcs-server per test session with bucket :data:`GCS_BUCKET` (see
:mod:`tiered_conformance.testing` for the skip-locally, fail-in-CI rule). After each test
module that used it, every object in its buckets is removed
(:meth:`~tiered_driver_gcs.emulator.FakeGcsServer.remove_objects`): the server's listings walk
the whole bucket, so objects left behind would slow every later module's listings.
Open the driver on it with ``GcsDriver(**fake_gcs.driver_options(GCS_BUCKET, prefix))``.
"""

from __future__ import annotations

from tiered_conformance.testing import emulator_fixture

from .emulator import FakeGcsServer

GCS_BUCKET = "tiered-tests"

fake_gcs = emulator_fixture(FakeGcsServer, lambda server: server.create_bucket(GCS_BUCKET), name="fake_gcs",
                            doc=f"A running fake-gcs-server with bucket {GCS_BUCKET!r}, emptied after each module.",
                            after_module=FakeGcsServer.remove_objects)

__all__ = ["GCS_BUCKET", "fake_gcs"]
