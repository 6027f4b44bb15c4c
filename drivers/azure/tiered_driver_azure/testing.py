"""pytest fixtures for the azure driver (test tooling): import them into a ``conftest.py``.

``azurite`` is a session fixture: one Azurite blob service with container
:data:`AZURE_CONTAINER` (see :mod:`tiered_conformance.testing` for the skip-locally,
fail-in-CI rule). Open the driver on it with
``AzureDriver(**azurite.driver_options(AZURE_CONTAINER, prefix))``.
"""

from __future__ import annotations

from tiered_conformance.testing import emulator_fixture

from .emulator import Azurite

AZURE_CONTAINER = "tiered-tests"

azurite = emulator_fixture(Azurite, lambda server: server.create_container(AZURE_CONTAINER), name="azurite",
                           doc=f"A running Azurite blob service with container {AZURE_CONTAINER!r}.")

__all__ = ["AZURE_CONTAINER", "azurite"]
