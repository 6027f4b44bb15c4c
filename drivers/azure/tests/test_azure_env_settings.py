"""The azure driver's client reads the environment only for what it can use: a proxy.

aiohttp's ``trust_env`` brings two things: the proxy of ``HTTP_PROXY``/``HTTPS_PROXY``, and a
``~/.netrc`` look-up on a worker thread before every request (for a Basic ``Authorization``
that a request signed in its own header cannot carry). Without a proxy in the environment
the client's session is made without ``trust_env``; with one, as before, and the proxy is
used (``_proxy_in_environment``).
"""

from __future__ import annotations

import uuid

import pytest

from tiered_core.errors import DriverError
from tiered_driver_azure import AzureDriver
from tiered_driver_azure.testing import AZURE_CONTAINER

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                   "NO_PROXY", "no_proxy")


def open_on(azurite) -> AzureDriver:
    return AzureDriver(**azurite.driver_options(AZURE_CONTAINER, f"env-{uuid.uuid4().hex[:8]}"), retries=0)


def reads_environment(drv: AzureDriver) -> bool:
    """Whether the client's transport makes its aiohttp session with ``trust_env``."""
    return drv._fs.service_client._config.transport._use_env_settings


@pytest.fixture
def no_proxy_set(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_without_a_proxy_the_client_does_not_read_the_environment(azurite, no_proxy_set):
    drv = open_on(azurite)
    try:
        assert not reads_environment(drv)
        drv.write("seg", 0, b"abc")
        assert drv.size("seg") == 3 and drv.read("seg", 0, 3) == b"abc"
    finally:
        drv.close()


def test_a_proxy_in_the_environment_is_used(azurite, no_proxy_set):
    # Nothing listens on the proxy's port: a request that goes through it fails to connect.
    no_proxy_set.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    drv = open_on(azurite)
    try:
        assert reads_environment(drv)
        with pytest.raises(DriverError):
            drv.size("seg")
    finally:
        drv.close()
    no_proxy_set.setenv("NO_PROXY", "127.0.0.1")  # the emulator is reached directly again
    drv = open_on(azurite)
    try:
        assert reads_environment(drv)
        drv.write("seg", 0, b"abc")
        assert drv.size("seg") == 3
    finally:
        drv.close()
