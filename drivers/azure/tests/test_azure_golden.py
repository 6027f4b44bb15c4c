"""Blobs written by an earlier azure driver stay readable, byte for byte (issue 19).

``golden/objects.json`` holds every raw blob the azure driver of main at b460b12 (on
azure-storage-blob) wrote for a few segments, as ``tests/golden_objects.py`` dumped them:
append blobs (one sealed, unsealed ones, an empty one) and the block blob a
``write_if_absent`` made. Each test uploads them as stored (names, blob types, bytes,
metadata, the seal) into a fresh container with azure-storage-blob, never through the
driver, then opens today's driver on them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from pathlib import Path

import pytest

from tiered_core.errors import SegmentSealed
from tiered_driver_azure import AzureDriver

GOLDEN = Path(__file__).parent / "golden"
OBJECTS = json.loads((GOLDEN / "objects.json").read_text())["objects"]
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())
BLOCK = 4 * 1024 * 1024


def _bytes(entry: dict) -> bytes:
    data = base64.b64decode(entry["data"])
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry.get("name")
    return data


def _upload_raw(container, obj: dict) -> None:
    from azure.storage.blob import BlobType, ContentSettings

    blob = container.get_blob_client(obj["name"])
    data = _bytes(obj)
    settings = ContentSettings(content_type=obj["content_type"])
    if obj["blob_type"] == "AppendBlob":
        blob.create_append_blob(metadata=obj["metadata"], content_settings=settings)
        for start in range(0, len(data), BLOCK):
            blob.append_block(data[start:start + BLOCK])
        if obj["sealed"]:
            blob.seal_append_blob()
    else:
        assert obj["blob_type"] == "BlockBlob" and not obj["sealed"]
        blob.upload_blob(data, blob_type=BlobType.BLOCKBLOB, metadata=obj["metadata"], content_settings=settings)


def _raw_listing(container) -> dict[str, tuple]:
    out = {}
    for item in container.list_blobs(name_starts_with=EXPECTED["prefix"] + "/", include=["metadata"]):
        props = container.get_blob_client(item.name).get_blob_properties()
        out[item.name] = (int(props.size), str(getattr(props.blob_type, "value", props.blob_type)),
                          bool(props.is_append_blob_sealed), props.metadata or {}, props.etag)
    return out


@pytest.fixture
def golden(azurite):
    """A fresh container holding the fixture's blobs exactly as stored, and a driver on it."""
    from azure.storage.blob import BlobServiceClient

    name = f"golden-{uuid.uuid4().hex[:12]}"
    with BlobServiceClient.from_connection_string(azurite.connection_string) as svc:
        container = svc.create_container(name)
        for obj in OBJECTS:
            _upload_raw(container, obj)
        listing = _raw_listing(container)
        assert {k: v[:4] for k, v in listing.items()} == {
            o["name"]: (o["size"], o["blob_type"], o["sealed"], o["metadata"]) for o in OBJECTS}
        drv = AzureDriver(**azurite.driver_options(name, EXPECTED["prefix"]))
        yield container, drv
        drv.close()


def test_the_fixture_holds_the_old_layout():
    kinds = {(o["blob_type"], o["sealed"], o["size"] == 0) for o in OBJECTS}
    assert {("AppendBlob", True, False), ("AppendBlob", False, False), ("AppendBlob", False, True),
            ("BlockBlob", False, False)} <= kinds
    assert len(EXPECTED["segments"]) == len(OBJECTS) == 5


def test_old_blobs_read_back_byte_for_byte(golden):
    container, drv = golden
    before = _raw_listing(container)
    assert [list(e) for e in drv.list("")] == EXPECTED["list"]
    for path, seg in EXPECTED["segments"].items():
        data = _bytes(seg)
        assert drv.size(path) == seg["size"] == len(data), path
        assert drv.is_sealed(path) is seg["sealed"], path
        assert drv.exists(path), path
        if data:
            assert drv.read(path, 0, len(data)) == data, path
            for lo in range(0, len(data), max(1, len(data) // 7)):
                hi = min(len(data), lo + 333)
                assert drv.read(path, lo, hi - lo) == data[lo:hi], (path, lo)
    for prefix in {p.rsplit("/", 2)[0] + "/" for p in EXPECTED["segments"]}:
        assert [list(e) for e in drv.list(prefix)] == [e for e in EXPECTED["list"] if e[0].startswith(prefix)]
    assert _raw_listing(container) == before  # reading changed no blob (etags included)


def test_old_segments_take_appends_and_seal(golden):
    """A store that upgrades goes on appending to its open segments, and seals them."""
    _container, drv = golden
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
