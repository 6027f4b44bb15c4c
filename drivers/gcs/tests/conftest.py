"""The gcs driver's tests use the driver distribution's own test kit (the `testing` extra)."""

from tiered_driver_gcs.testing import fake_gcs  # noqa: F401  (session fixture: fake-gcs-server)
