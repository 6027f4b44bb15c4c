"""pytest fixtures for the s3 driver (test tooling): import them into a ``conftest.py``.

``moto_s3`` is a session fixture: one moto server with bucket :data:`S3_BUCKET` (see
:mod:`tiered_conformance.testing` for the skip-locally, fail-in-CI rule). Open the driver
on it with ``S3Driver(**moto_s3.driver_options(S3_BUCKET, prefix))``.
"""

from __future__ import annotations

from tiered_conformance.testing import emulator_fixture

from .emulator import MotoServer

S3_BUCKET = "tiered-tests"

moto_s3 = emulator_fixture(MotoServer, lambda server: server.create_bucket(S3_BUCKET), name="moto_s3",
                           doc=f"A running moto S3 server with bucket {S3_BUCKET!r}.")

__all__ = ["S3_BUCKET", "moto_s3"]
