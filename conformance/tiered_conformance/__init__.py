"""tiered-conformance: the conformance suite every tiered-store driver (and metadata store) runs.

It proves (a) the raw driver contract, (b) ``FileSegment`` semantics over the driver,
including recovery from write faults injected around it, and (c) a hypothesis state
machine of random append/commit/fault/read/seal/reopen steps against a reference model.
Tests are selected by the driver's capabilities, never by its name.

Run it in either of two ways.

1. Against an installed driver, with no test file of your own::

       pytest --pyargs tiered_conformance --tiered-driver sqlite
       pytest --pyargs tiered_conformance --tiered-driver my_pkg.driver:MyDriver \\
           --tiered-option endpoint=http://127.0.0.1:9000 \\
           --tiered-capability "conditional_append=false:emulator ignores preconditions"

   ``--tiered-driver`` takes a registered name, an alias or ``module:Class``. The
   location comes from the driver plugin's ``tiered_conformance_environment`` hook
   (which may start an emulator) or else the class's ``conformance_environment(workdir)``;
   ``--tiered-option key=value`` values override it (converted by the driver's option
   types). ``--tiered-hypothesis-examples N`` sizes the stateful test. The same run,
   summarised per area: ``tiered conformance sqlite``.

2. From your own test file, by subclassing :class:`DriverConformance`::

       import pytest
       from tiered_conformance import DriverConformance
       from my_pkg.driver import MyDriver

       class TestMyDriver(DriverConformance):
           @pytest.fixture
           def driver(self, tmp_path):
               drv = MyDriver(root=str(tmp_path))   # driver.reopen() must see the same bytes
               yield drv
               drv.close()

           # optional: declare a gap, and the tests needing it are skipped with the reason
           @pytest.fixture
           def capabilities(self, driver):
               return driver.capabilities.override("emulator gap", conditional_append=False)

The suite runs every driver in the standard layers (``tiered_core.spi.layer.layered``:
validation, then retry), as ``open_driver`` opens it for a store; a ``driver`` fixture of
your own is wrapped the same way. So a driver needs no input checks or retries of its own.

Fault injection around any driver, for your own tests: :class:`FaultLayer` with
:class:`Fault` (``before``, ``after`` = lost ack, ``partial``, ``size_error``, ``hold``, for
writes and, ``before``/``after``, for every other call; random faults at a rate).

The metadata store contract ships too, for a third-party store registered through
``tiered_register_metadata_stores``: ``pytest --pyargs tiered_conformance
--tiered-metadata-store mystore``, or in a test file
``class TestMyStore(MetadataStoreConformance): store_name = "mystore"``.

Test kit for drivers that need a server: :mod:`tiered_conformance.emulator` (the process
base of an emulator launcher) and :mod:`tiered_conformance.testing` (fixtures that skip
locally and fail under ``CI=true``).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Exports are loaded on first use, so that importing the pytest plugin (which pytest
# does in every run) does not import the suite before assertion rewriting is set up.
_EXPORTS = {
    "DriverConformance": "tiered_conformance.suite",
    "MetadataStoreConformance": "tiered_conformance.suite.metadata",
    "AREAS": "tiered_conformance.areas",
    "FaultLayer": "tiered_conformance.faults",
    "FaultyDriver": "tiered_conformance.faults",
    "Fault": "tiered_conformance.faults",
    "FaultKind": "tiered_conformance.faults",
    "requires": "tiered_conformance.requirements",
    "Requirements": "tiered_conformance.requirements",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tiered_conformance' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
