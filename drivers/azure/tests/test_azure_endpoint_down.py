"""An Azure endpoint that is down: the error names the endpoint and the cause.

An operator drill: ``[DRIVER_ERROR] azure: cannot list prefix ... : ServiceRequestError (gave
up after 2 attempts in 0.1 s)`` named neither the endpoint nor why (the s3 driver names the
URL and "Could not connect"). The endpoint is shown as scheme://host:port only: never a key,
a SAS or the rest of a connection string.
"""

from __future__ import annotations

import socket

import pytest

from tiered_core.errors import DriverError
from tiered_core.plugins import open_driver
from tiered_driver_azure import AzureDriver
from tiered_driver_azure.emulator import AZURITE_KEY

SAS = "sv=2024-01-01&sig=SAS-SIGNATURE-NEVER-SHOWN"


def closed_port() -> int:
    """A local port nothing listens on (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def connection_string(port: int) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;")


def test_a_refused_endpoint_is_named_with_the_cause():
    port = closed_port()
    with AzureDriver(container="tiered", connection_string=connection_string(port), retries=0, timeout=3) as drv:
        with pytest.raises(DriverError) as info:
            list(drv.list("p/"))
    text = str(info.value)
    assert info.value.retryable is True
    assert f"endpoint http://127.0.0.1:{port}:" in text and "Connection refused" in text, text
    assert info.value.context["endpoint"] == f"http://127.0.0.1:{port}"
    assert AZURITE_KEY not in text + repr(info.value.context) and "devstoreaccount1/" not in text


def test_through_the_retry_layer_as_a_store_opens_it():
    port = closed_port()
    with open_driver("azure", container="tiered", connection_string=connection_string(port), retries=1,
                     timeout=3) as drv:
        with pytest.raises(DriverError) as info:
            drv.size("x")
    text = str(info.value)
    assert f"http://127.0.0.1:{port}" in text and "Connection refused" in text and "gave up after" in text, text
    assert AZURITE_KEY not in text


def test_the_endpoint_is_shown_without_its_path_or_sas():
    port = closed_port()
    with AzureDriver(container="tiered", account_name="acct", endpoint=f"http://127.0.0.1:{port}/acct",
                     sas_token=SAS, retries=0, timeout=3) as drv:
        with pytest.raises(DriverError) as info:
            drv.exists("x")
    text = str(info.value)
    assert f"no answer from endpoint http://127.0.0.1:{port}: Connection refused" in text, text
    assert "SIGNATURE" not in text + repr(info.value.context) and "/acct" not in text


def test_a_down_token_authority_is_told_apart_from_the_blob_endpoint(monkeypatch):
    """The service principal's token request fails (its authority is down): the error names the
    host that did not answer, and the blob endpoint it was for."""
    authority, blob = closed_port(), closed_port()
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", f"https://127.0.0.1:{authority}")
    secret = "sp-SECRET-value-123"
    with AzureDriver(container="c", account_name="acct", endpoint=f"https://127.0.0.1:{blob}/acct",
                     client_id="00000000-0000-0000-0000-000000000001", client_secret=secret,
                     tenant_id="00000000-0000-0000-0000-000000000002", retries=0, timeout=3) as drv:
        with pytest.raises(DriverError) as info:
            drv.size("x")
    text = str(info.value)
    assert f"127.0.0.1:{authority}" in text and f"https://127.0.0.1:{blob}" in text, text
    assert "Connection refused" in text and secret not in text + repr(info.value.context)
