"""The s3 driver's tests use the driver distribution's own test kit (the `testing` extra)."""

from tiered_driver_s3.testing import moto_s3  # noqa: F401  (session fixture: moto's S3 server)
