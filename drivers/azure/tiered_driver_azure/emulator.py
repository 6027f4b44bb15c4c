"""Azurite for tests, conformance runs and benchmarks (test tooling, not driver code).

Loaded only through the ``tiered_conformance_environment`` hook or by a test suite; it
needs the ``testing`` extra (``pip install tiered-driver-azure[testing]``: the kit in
``tiered-conformance``) and Azurite's ``azurite-blob`` from npm (``npm install azurite@3``),
found through ``$TIERED_AZURITE`` or on PATH.

Nothing here is a credential: Azurite's account key is the public, documented
development key.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any, Iterator

from tiered_conformance.emulator import Emulator, binary_from_env, running

#: Azurite's fixed development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: Container the conformance environment uses unless ``TIERED_AZURE_CONTAINER`` names another.
CONFORMANCE_CONTAINER = "tiered-conformance"


def azurite_binary() -> str:
    """Path of ``azurite-blob``: ``$TIERED_AZURITE``, or PATH."""
    return binary_from_env("TIERED_AZURITE", "azurite-blob",
                           hint="install it with `npm install azurite@3` (the repository's `make tools` "
                                "puts it in .tools/)")


class Azurite(Emulator):
    """Azurite's blob service with its data (``--location``) in ``data_dir``.

    With ``persist=False`` Azurite keeps its data in memory only (``--inMemoryPersistence``):
    a kill or :meth:`restart` then loses every blob, so fault tests that restart it keep the
    default. Otherwise Azurite saves its whole database to ``data_dir`` every few seconds,
    which costs more CPU the more a long test session stores (over this repository's Azure
    tests: 35.8 CPU-s of Azurite saving to disk, 26.1 in memory).
    """

    name = "azurite"

    def __init__(self, data_dir: str | os.PathLike | None = None, port: int | None = None, *,
                 persist: bool = True) -> None:
        super().__init__(data_dir, port)
        self.persist = persist

    def command(self) -> list[str]:
        return [
            # --disableTelemetry: otherwise Azurite reports to an Application Insights host.
            azurite_binary(), "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry",
            "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
            *(["--location", str(self.data_dir)] if self.persist else ["--inMemoryPersistence"]),
        ]

    def probe_url(self) -> str:
        return f"{self.url}/{AZURITE_ACCOUNT}?comp=list"

    def is_me(self, status: int, headers, body: bytes) -> bool:
        return "azurite" in (headers.get("Server") or "").lower()

    @property
    def blob_endpoint(self) -> str:
        return f"{self.url}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.blob_endpoint};"
        )

    def create_container(self, container: str) -> None:
        """Create ``container`` (a no-op when it exists)."""
        create_container(self.connection_string, container)

    def driver_options(self, container: str, prefix: str = "") -> dict[str, Any]:
        """Options of the azure driver for ``container`` on this emulator."""
        return {"container": container, "prefix": prefix, "connection_string": self.connection_string}


def create_container(connection_string: str, container: str) -> None:
    """Create ``container`` in the account of ``connection_string`` (a no-op when it exists)."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(connection_string) as svc:
        with contextlib.suppress(ResourceExistsError):
            svc.create_container(container)


@contextlib.contextmanager
def conformance_environment(workdir: str) -> Iterator[dict[str, Any]]:
    """Options for a throw-away container prefix; starts Azurite unless an account is configured.

    An account is configured by ``TIERED_AZURE_CONNECTION_STRING`` (the container is
    created when missing; ``TIERED_AZURE_CONTAINER`` names it, default
    ``tiered-conformance``).
    """
    container = os.environ.get("TIERED_AZURE_CONTAINER", CONFORMANCE_CONTAINER)
    prefix = f"conformance-{uuid.uuid4().hex[:12]}"
    conn = os.environ.get("TIERED_AZURE_CONNECTION_STRING")
    if conn:
        create_container(conn, container)
        yield {"container": container, "prefix": prefix, "connection_string": conn}
        return
    server = Azurite(os.path.join(workdir, "azurite-data"))
    with running(server, lambda s: s.create_container(container)):
        yield server.driver_options(container, prefix)


__all__ = ["AZURITE_ACCOUNT", "AZURITE_KEY", "Azurite", "CONFORMANCE_CONTAINER", "azurite_binary",
           "conformance_environment", "create_container"]
