"""Any fsspec filesystem as a tiered-store backend: ``driver = "fsspec"``, ``url``, ``storage_options``.

The capabilities of an instance are derived from its filesystem (:mod:`.guarantees`); a
filesystem that cannot create objects atomically is refused unless ``single_writer``.
"""

from __future__ import annotations

import contextlib
import uuid

from tiered_core import hookimpl

from .driver import FsspecDriver
from .guarantees import Guarantees, guarantees_of

__version__ = "0.1.0"
__all__ = ["FsspecDriver", "Guarantees", "guarantees_of", "__version__"]


@hookimpl
def tiered_register_drivers(register) -> None:
    register(FsspecDriver)


@hookimpl
def tiered_conformance_environment(driver_name: str, workdir: str):
    """A fresh ``memory://`` location (``--option url=...`` picks another filesystem)."""
    if driver_name != FsspecDriver.name:
        return None
    return contextlib.nullcontext({"url": f"memory://tiered-conformance-{uuid.uuid4().hex[:12]}"})
