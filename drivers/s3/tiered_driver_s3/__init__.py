"""Amazon S3 (and S3-compatible stores: MinIO, Cloudflare R2, Ceph RGW...) backend for tiered-store, on s3fs.

Segments use the object-store layout shared by every object-store driver
(:mod:`tiered_core.spi.objectstore`); :mod:`.driver` adds the S3 primitives, the one-PUT
write, the one-GET sealed read and the crash-safe consolidation at seal.
"""

from __future__ import annotations

from tiered_core import hookimpl

from .driver import EMULATOR_GAP, S3Driver, emulator_capabilities

__version__ = "0.1.0"
__all__ = ["EMULATOR_GAP", "S3Driver", "emulator_capabilities", "__version__"]


@hookimpl
def tiered_register_drivers(register) -> None:
    register(S3Driver)


@hookimpl
def tiered_conformance_environment(driver_name: str, workdir: str):
    """A throw-away bucket prefix on moto (started here) or a configured endpoint."""
    if driver_name != S3Driver.name:
        return None
    from . import emulator  # test tooling (the `testing` extra): loaded only when asked

    return emulator.conformance_environment(workdir)
