"""Google Cloud Storage backend for tiered-store (JSON API calls on aiohttp, google-auth credentials).

Segments are a base object plus conditionally uploaded parts, composed into the base
from time to time and at seal; see :mod:`tiered_core.spi.objectstore.layout` for why the size is
exact after a crash at any point.
"""

from __future__ import annotations

from tiered_core import hookimpl

from .driver import EMULATOR_GAP, GcsDriver, emulator_capabilities

__version__ = "0.1.0"
__all__ = ["EMULATOR_GAP", "GcsDriver", "emulator_capabilities", "__version__"]


@hookimpl
def tiered_register_drivers(register) -> None:
    register(GcsDriver)


@hookimpl
def tiered_conformance_environment(driver_name: str, workdir: str):
    """A throw-away bucket prefix on fake-gcs-server (started here) or a configured endpoint."""
    if driver_name != GcsDriver.name:
        return None
    from . import emulator  # test tooling (the `testing` extra): loaded only when asked

    return emulator.conformance_environment(workdir)
