"""fake-gcs-server restarted after a kill between an object's bytes and its metadata.

Its filesystem backend writes the bytes, then the ``user.metadata`` extended attribute; a
kill between the two left a file that made every listing of the bucket answer 404 (the
driver then said the bucket does not exist: the GCS kill test's occasional failure).
The launcher drops such a file before it starts the server, as GCS never shows an upload
whose response never came.
"""

from __future__ import annotations

import os
import uuid

import pytest

from tiered_conformance.testing import start_or_skip
from tiered_driver_gcs import GcsDriver
from tiered_driver_gcs.emulator import FakeGcsServer


@pytest.mark.skipif(not hasattr(os, "removexattr"), reason="the torn state needs Linux extended attributes")
def test_an_object_a_kill_left_without_metadata_is_dropped_at_restart(tmp_path):
    server = start_or_skip(FakeGcsServer(tmp_path / "data"))
    try:
        server.create_bucket("restart")
        driver = GcsDriver(**server.driver_options("restart", f"p{uuid.uuid4().hex[:6]}"), retries=0)
        driver.write("kept", 0, b"acknowledged")
        driver.write("torn", 0, b"in flight when killed")
        server.kill()
        [torn] = [os.path.join(root, n) for root, _, names in os.walk(tmp_path / "data" / "restart")
                  for n in names if n == "torn"]
        os.removexattr(torn, "user.metadata")  # the state a kill between the two writes leaves

        server.restart()
        fresh = driver.reopen()
        try:
            assert list(fresh.list()) == [("kept", len(b"acknowledged"))]
            assert fresh.read("kept", 0, 12) == b"acknowledged"
        finally:
            fresh.close()
            driver.close()
        assert "dropped 1 object file(s)" in server.log_path.read_text()
    finally:
        server.close()
