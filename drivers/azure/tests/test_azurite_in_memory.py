"""Azurite with ``persist=False`` (the session fixture's): blobs in memory, nothing on disk."""

from __future__ import annotations

from tiered_conformance.testing import start_or_skip
from tiered_driver_azure import AzureDriver
from tiered_driver_azure.emulator import Azurite


def test_an_in_memory_azurite_writes_nothing_to_its_data_dir_and_a_restart_forgets(tmp_path):
    server = start_or_skip(Azurite(tmp_path / "data", persist=False), lambda s: s.create_container("mem"))
    try:
        with AzureDriver(**server.driver_options("mem", "p")) as drv:
            drv.write("seg", 0, b"kept in memory")
            assert drv.read("seg", 0, 14) == b"kept in memory"
        assert list((tmp_path / "data").iterdir()) == []
        server.restart()
        server.create_container("mem")
        with AzureDriver(**server.driver_options("mem", "p")) as drv:
            assert not drv.exists("seg")
    finally:
        server.close()


def test_the_session_fixture_keeps_its_blobs_in_memory(azurite):
    assert azurite.persist is False
    assert "--inMemoryPersistence" in azurite.command() and "--location" not in azurite.command()
