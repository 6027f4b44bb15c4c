"""The ``fake_gcs`` fixture: one server per session, its buckets emptied after each module.

fake-gcs-server's filesystem backend walks the whole bucket on every listing, so objects
one test module leaves behind made every later module's listings slower (measured: listing a
200-object prefix cost the server 6 ms of CPU alone in its bucket, 14 ms beside 2,000 other
objects; over the GCS tests the server spent 137 CPU-seconds with one bucket that only grew,
67 with this).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import urllib.request

from tiered_conformance.testing import start_or_skip
from tiered_driver_gcs import GcsDriver
from tiered_driver_gcs.emulator import FakeGcsServer

CONFTEST = "from tiered_driver_gcs.testing import fake_gcs  # noqa: F401\n"

MODULE = '''
import json, os, urllib.request
from tiered_driver_gcs.testing import GCS_BUCKET

def names(server):
    with urllib.request.urlopen(f"{server.url}/storage/v1/b/{GCS_BUCKET}/o") as r:
        return [item["name"] for item in json.load(r).get("items", [])]

def test_first_look(fake_gcs):
    with open(os.environ["SEEN"], "a") as f:
        f.write(f"{fake_gcs.url} {sorted(names(fake_gcs))}\\n")
    for name in ("{tag}/a", "{tag}/deep/b/c"):
        req = urllib.request.Request(f"{fake_gcs.url}/upload/storage/v1/b/{GCS_BUCKET}/o?uploadType=media&name={name}",
                                     data=b"x", method="POST")
        urllib.request.urlopen(req).close()

def test_second_look_in_the_same_module(fake_gcs):
    assert sorted(names(fake_gcs)) == ["{tag}/a", "{tag}/deep/b/c"]
'''


def test_each_module_starts_on_empty_buckets_of_the_one_server(tmp_path):
    for tag in ("one", "two", "three"):
        (tmp_path / f"test_{tag}.py").write_text(MODULE.replace("{tag}", tag))
    (tmp_path / "conftest.py").write_text(CONFTEST)
    seen = tmp_path / "seen.txt"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                          "-c", os.devnull, str(tmp_path)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env={**os.environ, "SEEN": str(seen)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "6 passed" in out.stdout, out.stdout
    looks = seen.read_text().splitlines()
    assert len(looks) == 3
    assert len({line.split()[0] for line in looks}) == 1, looks  # one server for the session
    assert [line.split(" ", 1)[1] for line in looks] == ["[]"] * 3, looks  # each module began on an empty bucket


def test_remove_objects_keeps_the_buckets_and_the_server_serves_on():
    with tempfile.TemporaryDirectory() as data:
        server = start_or_skip(FakeGcsServer(os.path.join(data, "data")))
        try:
            server.create_bucket("kept")
            driver = GcsDriver(**server.driver_options("kept", "p"), retries=0)
            driver.write("seg/one", 0, b"abc")
            driver.write("two", 0, b"defg")
            assert server.remove_objects() == 2
            assert list(driver.list()) == []
            driver.write("two", 0, b"again")  # the bucket is still there, a name is free again
            assert driver.read("two", 0, 5) == b"again"
            with urllib.request.urlopen(f"{server.url}/storage/v1/b") as r:
                assert b'"kept"' in r.read()
            driver.close()
        finally:
            server.close()
