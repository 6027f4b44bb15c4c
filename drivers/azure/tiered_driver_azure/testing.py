"""pytest fixtures for the azure driver (test tooling): import them into a ``conftest.py``.

``azurite`` is a session fixture: one Azurite blob service with container
:data:`AZURE_CONTAINER`, its data in memory (see :mod:`tiered_conformance.testing` for the skip-locally,
fail-in-CI rule). Open the driver on it with
``AzureDriver(**azurite.driver_options(AZURE_CONTAINER, prefix))``.
"""

from __future__ import annotations

from tiered_conformance.testing import emulator_fixture

from .emulator import Azurite

AZURE_CONTAINER = "tiered-tests"

# In memory: nothing restarts the session's Azurite (fault tests start their own, on disk).
azurite = emulator_fixture(lambda data_dir: Azurite(data_dir, persist=False),
                           lambda server: server.create_container(AZURE_CONTAINER), name="azurite",
                           doc=f"A running Azurite blob service with container {AZURE_CONTAINER!r}, "
                               "its data in memory.")

__all__ = ["AZURE_CONTAINER", "azurite"]
