"""Azure Blob Storage backend for tiered-store: segments are append blobs.

adlfs owns the session and the authentication. ``append_block(...,
appendpos_condition=position)`` makes every append conditional on the position, and
``seal_append_blob`` seals, so the service enforces the driver contract itself (those
calls go through adlfs's ``fs.service_client``: adlfs cannot express them).
"""

from __future__ import annotations

from tiered_core import hookimpl

from .driver import MAX_APPEND_BLOCK, AzureDriver

__version__ = "0.1.0"
__all__ = ["AzureDriver", "MAX_APPEND_BLOCK", "__version__"]


@hookimpl
def tiered_register_drivers(register) -> None:
    register(AzureDriver)


@hookimpl
def tiered_conformance_environment(driver_name: str, workdir: str):
    """A throw-away container prefix on Azurite (started here) or a configured account."""
    if driver_name != AzureDriver.name:
        return None
    from . import emulator  # test tooling (the `testing` extra): loaded only when asked

    return emulator.conformance_environment(workdir)
