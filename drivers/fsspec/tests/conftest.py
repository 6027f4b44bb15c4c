"""The fsspec driver's tests use its in-process test filesystems (tiered_driver_fsspec.testing)."""

from tiered_driver_fsspec.testing import register

register()
