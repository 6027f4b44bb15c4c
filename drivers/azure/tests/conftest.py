"""The azure driver's tests use the driver distribution's own test kit (the `testing` extra)."""

from tiered_driver_azure.testing import azurite  # noqa: F401  (session fixture: Azurite)
