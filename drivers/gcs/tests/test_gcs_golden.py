"""Objects written by an earlier gcs driver stay readable, byte for byte (issue 19).

``golden/objects.json`` holds every raw object the gcs driver of main at b460b12 (its own
JSON-API client) wrote for a few segments, as ``tests/golden_objects.py`` dumped them: a
sealed segment (one composed base marked ``tiered-sealed``), unsealed ones whose base is
followed by part objects not yet composed into it (one after a compaction of 64 parts), an
empty segment and a ``write_if_absent`` object. Each test uploads them as stored (names,
bytes, custom metadata) into a fresh bucket through fake-gcs-server's JSON API, never
through the driver, then opens today's driver on them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from tiered_core.errors import SegmentSealed
from tiered_driver_gcs import GcsDriver

GOLDEN = Path(__file__).parent / "golden"
OBJECTS = json.loads((GOLDEN / "objects.json").read_text())["objects"]
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())
PART_MARK = "#tiered-part/"  # the old layout's part names, as stored in the fixture


def _bytes(entry: dict) -> bytes:
    data = base64.b64decode(entry["data"])
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry.get("name")
    return data


def _request(req: urllib.request.Request) -> bytes:
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read()


def _fresh_bucket(url: str) -> str:
    bucket = f"golden-{uuid.uuid4().hex[:12]}"
    _request(urllib.request.Request(f"{url}/storage/v1/b?project=test", method="POST",
                                    data=json.dumps({"name": bucket}).encode(),
                                    headers={"Content-Type": "application/json"}))
    return bucket


def _upload_raw(url: str, bucket: str, obj: dict) -> None:
    """One multipart upload of the stored object: its name, metadata, content type and bytes."""
    resource = {"name": obj["name"], "metadata": obj["metadata"], "contentType": obj["content_type"]}
    boundary = f"golden-{uuid.uuid4().hex}"
    body = b"".join([
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
        json.dumps(resource).encode(),
        f"\r\n--{boundary}\r\nContent-Type: {obj['content_type']}\r\n\r\n".encode(),
        _bytes(obj),
        f"\r\n--{boundary}--\r\n".encode(),
    ])
    _request(urllib.request.Request(f"{url}/upload/storage/v1/b/{bucket}/o?uploadType=multipart", method="POST",
                                    data=body, headers={"Content-Type": f"multipart/related; boundary={boundary}"}))


def _raw_listing(url: str, bucket: str) -> dict[str, tuple[int, dict]]:
    query = urllib.parse.urlencode({"prefix": EXPECTED["prefix"] + "/"})
    items = json.loads(_request(urllib.request.Request(f"{url}/storage/v1/b/{bucket}/o?{query}"))).get("items", [])
    return {i["name"]: (int(i["size"]), i.get("metadata") or {}) for i in items}


@pytest.fixture
def golden(fake_gcs):
    """A fresh bucket holding the fixture's objects exactly as stored, and a driver on it."""
    bucket = _fresh_bucket(fake_gcs.url)
    for obj in OBJECTS:
        _upload_raw(fake_gcs.url, bucket, obj)
    assert _raw_listing(fake_gcs.url, bucket) == {o["name"]: (o["size"], o["metadata"]) for o in OBJECTS}
    drv = GcsDriver(**fake_gcs.driver_options(bucket, EXPECTED["prefix"]))
    yield fake_gcs.url, bucket, drv
    drv.close()


def test_the_fixture_holds_the_old_layout():
    """The fixture itself: composed and uncomposed parts, a sealed base, an empty object."""
    names = [o["name"] for o in OBJECTS]
    parts = [n for n in names if PART_MARK in n]
    assert len(parts) >= 6 and len({n.split(PART_MARK)[0] for n in parts}) == 2
    assert any(o["metadata"].get("tiered-sealed") == "true" for o in OBJECTS)
    assert any(o["size"] == 0 for o in OBJECTS)
    assert len(EXPECTED["segments"]) == 5


def test_old_objects_read_back_byte_for_byte(golden):
    url, bucket, drv = golden
    before = _raw_listing(url, bucket)
    assert [list(e) for e in drv.list("")] == EXPECTED["list"]
    for path, seg in EXPECTED["segments"].items():
        data = _bytes(seg)
        assert drv.size(path) == seg["size"] == len(data), path
        assert drv.is_sealed(path) is seg["sealed"], path
        assert drv.exists(path), path
        if data:
            assert drv.read(path, 0, len(data)) == data, path
            # ranges that start and end inside different objects (base, parts)
            for lo in range(0, len(data), max(1, len(data) // 7)):
                hi = min(len(data), lo + 333)
                assert drv.read(path, lo, hi - lo) == data[lo:hi], (path, lo)
    for prefix in {p.rsplit("/", 2)[0] + "/" for p in EXPECTED["segments"]}:
        assert [list(e) for e in drv.list(prefix)] == [e for e in EXPECTED["list"] if e[0].startswith(prefix)]
    assert _raw_listing(url, bucket) == before  # reading changed no object


def test_old_segments_take_appends_and_seal(golden):
    """A store that upgrades goes on appending to its open segments, and seals them."""
    _url, _bucket, drv = golden
    sealed = [p for p, s in EXPECTED["segments"].items() if s["sealed"]]
    open_ = [p for p, s in EXPECTED["segments"].items() if not s["sealed"] and "COMMIT_LOG" in p]
    assert sealed and open_
    with pytest.raises(SegmentSealed):
        drv.write(sealed[0], EXPECTED["segments"][sealed[0]]["size"], b"more")
    for path in open_:
        old = _bytes(EXPECTED["segments"][path])
        drv.write(path, len(old), b"after the upgrade")
        assert drv.size(path) == len(old) + 17
        drv.seal(path)
        assert drv.is_sealed(path)
        assert drv.read(path, 0, len(old) + 17) == old + b"after the upgrade"
